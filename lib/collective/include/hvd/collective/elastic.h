#pragma once
/// Elastic training, library side (issue 5): the same contract as Horovod's
/// hvd.elastic (State, run, HostsUpdatedInterrupt, HorovodInternalError),
/// for C++ programs; the Python binding mirrors it.
///
/// A worker started by `hvdrun --host-discovery-script ...` gets
/// HOROVOD_ELASTIC=1 and HVDRUN_WORKER_ID. hvd::init() then joins the newest
/// world hvdrun publishes in the store (hvd/store/elastic_world.h) instead of
/// reading HOROVOD_RANK & co., and a background watcher long-polls the store
/// for the next world version (hosts_updated()).
///
/// Recovery rules (docs/elastic.md):
///  * a peer that dies mid-operation makes the operation throw
///    PeerFailureError (an hvd::IoError); the run() loop restores the last
///    commit, calls reset() and retries;
///  * State::commit() saves, then checks for host changes collectively: if
///    any rank has seen a newer world, every rank throws
///    HostsUpdatedInterrupt at the same commit, so all agree;
///  * after every (re-)join, run() calls State::sync() on every member,
///    newcomers included (never skipped, so survivors and newcomers cannot
///    disagree on whether a broadcast happens -- the horovodrun hang);
///  * sync() broadcasts from the member with the most commits (ties: the
///    lowest rank), so a newcomer never overwrites trained state.
#include "hvd/common/error.h"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace hvd::collective {
class Context;
}

namespace hvd::elastic {

/// A peer failed while an operation was in flight (Horovod's
/// HorovodInternalError). Recoverable in elastic mode by restore()+reset().
class PeerFailureError : public IoError {
 public:
  using IoError::IoError;
};

/// hvdrun published a new world (hosts joined or left). Thrown by
/// State::commit()/check_host_updates() on every rank at the same commit.
class HostsUpdatedInterrupt : public Error {
 public:
  using Error::Error;
};

/// The job is over for this worker: the newest world no longer lists it (it
/// was removed), or a world marked `final` was published (the protocol
/// allows it; today's hvdrun never publishes one, see docs/elastic.md). The
/// worker should exit (0, by convention): a worker of a host discovery
/// dropped drains to its next commit and gets this from the reset that
/// follows, having told hvdrun it left (store::elastic::left_key), so any
/// exit status is a departure; hvdrun stops it if it is still running after
/// --elastic-drain-timeout.
class WorkerRemovedError : public Error {
 public:
  using Error::Error;
};

/// Whether this process runs in an elastic job (HOROVOD_ELASTIC=1).
bool enabled();

/// The world version this process is a member of (0 before joining or when
/// not elastic).
uint64_t world_version();

/// Whether a world newer than world_version() has been published. Local and
/// non-blocking (the watcher thread sets it). Always false when not elastic.
/// A `final` world does not count (the job is ending: training goes on to
/// its end; a later reset() throws WorkerRemovedError). A newer world that
/// drops a member of the current one also aborts the current Context, so
/// operations waiting on that member fail with PeerFailureError at once --
/// unless it lists that member as draining (World::draining: it trains on
/// to the next commit), in which case only hvdrun's drain_failed_key for it
/// aborts the Context.
bool hosts_updated();

/// Leaves the current communicator and joins the newest world: shuts the
/// current Context down, waits (up to HOROVOD_ELASTIC_TIMEOUT, default
/// 600 s) for a world that lists this worker, rendezvouses under its prefix
/// and re-creates the process-wide Context; hvd::rank(), size(), ... then
/// answer for the new world. If a newer world appears while rendezvousing,
/// it moves on to that one. Throws WorkerRemovedError (see above),
/// hvd::TimeoutError, or hvd::InvalidArgument when not elastic.
void reset();

/// Tells hvdrun that this process now holds the state of its current world
/// (it completed the broadcast that follows a (re-)join). State::sync calls
/// it; a program that keeps its own state instead of a State calls it after
/// its own broadcast, so that hvdrun keeps a holder of the trained state
/// when hosts are dropped (docs/elastic.md, "Who holds the state"). No-op
/// when not elastic.
void state_synced();

/// Where State and run() find their communicator and membership: the
/// process-wide one (process_membership(), backed by hvd::init()) unless a
/// State is pointed elsewhere with State::set_membership. The seam exists so
/// tests can run several elastic members as threads of one process
/// (hvd/collective/elastic_member.h); programs never need it.
class Membership {
 public:
  virtual ~Membership() = default;
  /// The current world's Context (valid until the next reset()).
  virtual collective::Context& context() = 0;
  /// Whether this is an elastic member (false: run() calls fn once).
  virtual bool elastic() const = 0;
  /// See hosts_updated() / reset() above.
  virtual bool hosts_updated() const = 0;
  virtual void reset() = 0;
  /// State::sync completed in the current world: tells hvdrun this member
  /// now holds the state the sync gave it (store/elastic_world.h,
  /// synced_key). No-op by default and outside an elastic job.
  virtual void synced() {}
};

/// The process-wide membership: hvd::context(), enabled(), hosts_updated(),
/// reset().
Membership& process_membership();

/// Collective over `m`'s current world: every rank learns whether any rank
/// has seen a newer world; if so, throws HostsUpdatedInterrupt on every rank
/// (an allreduce MAX of one int32 named "elastic.hosts_updated"). No-op
/// outside an elastic job. State::commit() calls it.
void check_host_updates(Membership& m);
inline void check_host_updates() { check_host_updates(process_membership()); }

/// User state that survives failures and membership changes.
class State {
 public:
  State();
  virtual ~State();
  State(const State&) = delete;
  State& operator=(const State&) = delete;

  /// Saves a copy of the state (save()), counts the commit, then
  /// check_host_updates().
  void commit();
  /// Collective: every rank learns whether any rank saw a newer world; if
  /// so, throws HostsUpdatedInterrupt on every rank.
  void check_host_updates();
  /// Returns to the last commit (restore_saved()).
  void restore();
  /// Collective: agrees on the member with the most commits (lowest rank on
  /// ties), makes everyone's state that member's (sync_from(root)), adopts
  /// its commit count and saves. Called by run() after every (re-)join.
  void sync();
  /// Called, in order, after every reset (e.g. to rescale the learning rate
  /// to the new size).
  void register_reset_callbacks(std::vector<std::function<void()>> callbacks);
  void on_reset();
  /// Commits so far (carried over from the sync root).
  uint64_t commits() const { return commits_; }

  /// Use `m` (which must outlive the State) instead of the process-wide
  /// membership. For tests that run several members in one process.
  void set_membership(Membership& m) { membership_ = &m; }
  Membership& membership() const { return membership_ ? *membership_ : process_membership(); }

 protected:
  /// Copy the live state into the saved copy.
  virtual void save() = 0;
  /// Copy the saved copy into the live state.
  virtual void restore_saved() = 0;
  /// Collective: broadcast the live state from `root` (every rank calls it).
  virtual void sync_from(int root) = 0;

 private:
  uint64_t commits_ = 0;
  std::vector<std::function<void()>> reset_callbacks_;
  Membership* membership_ = nullptr;
};

/// A State over registered byte buffers (model weights, optimizer slots,
/// counters): save/restore copy them, sync broadcasts each from the root.
/// Buffers must stay valid and keep their size for the State's life.
class BufferState : public State {
 public:
  /// Registers `bytes` bytes at `data` under a name unique in this state.
  void add(const std::string& name, void* data, std::size_t bytes);
  template <typename T>
  void add(const std::string& name, std::vector<T>& v) {
    add(name, v.data(), v.size() * sizeof(T));
  }

 protected:
  void save() override;
  void restore_saved() override;
  void sync_from(int root) override;

 private:
  struct Entry {
    std::string name;
    void* data;
    std::size_t bytes;
    std::vector<uint8_t> saved;
  };
  std::vector<Entry> entries_;
};

/// Horovod's @hvd.elastic.run: calls state.sync() then fn(state); on
/// PeerFailureError restores the last commit, resets, runs the reset
/// callbacks and tries again; on HostsUpdatedInterrupt resets (keeping the
/// live state: it was just committed) and tries again. Returns when fn
/// returns. Other exceptions propagate. Outside an elastic job it just
/// calls sync() (a no-op at size 1) and fn once.
void run(State& state, const std::function<void(State&)>& fn);

}  // namespace hvd::elastic
