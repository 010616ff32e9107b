#pragma once
/// One elastic worker's membership in the job (issue 5): joins the worlds
/// hvdrun publishes in the store (hvd/store/elastic_world.h), owns the
/// Context of the current world and a watcher thread that notices newer
/// worlds. hvd::init() in an elastic job makes one per process (the free
/// functions of hvd/collective/elastic.h wrap it); tests make several, one
/// per thread, against one in-process store.
///
/// Joining world v (docs/elastic.md, "Library side"):
///  1. the newest world >= the wanted version that lists this worker is
///     taken (a world without it: wait for the next one, or, once this
///     worker has been a member, write left_key and throw
///     WorkerRemovedError -- except for a draining member that synced and
///     whose world failed before its commit, which waits until hvdrun calls
///     it back or another holder of the state is in a formed world, see
///     store/elastic_world.h; a `final` world: WorkerRemovedError);
///  2. an arrival barrier under comm_prefix(v): every member adds 1 to
///     "<prefix>arrived"; the one that reaches size writes "<prefix>formed".
///     While waiting, a member that learns of a newer world cancels the
///     barrier by adding -2^40 ("poison") unless the barrier had already
///     completed -- one atomic counter decides, so either every member of v
///     forms the communicator or none does, and nobody waits for a peer that
///     went on to a newer world;
///  3. Context::create under comm_prefix(v) (all members are known to be
///     alive and past the barrier, so this takes milliseconds). A failure
///     here (a peer died in between) moves on to the next world.
///
/// The watcher (its own store connection: an HttpStoreClient serialises its
/// requests, so a long-poll must not block the joining thread) long-polls
/// world_key(v + 1), then each later one. When one appears,
/// hosts_updated() turns true; if a newer world lacks a member of the
/// current one (a worker failed or was removed) and does not list it as
/// draining, the current Context is aborted at once, so operations blocked
/// on a peer that vanished without a TCP reset (a cut link) fail with
/// PeerFailureError instead of hanging. A draining member (its host was
/// dropped; it trains on to the next commit) aborts the Context only when
/// hvdrun writes its drain_failed_key (read when kDrainFailuresKey changes,
/// once per watch slice).
#include "hvd/collective/context.h"
#include "hvd/collective/elastic.h"
#include "hvd/store/elastic_world.h"
#include "hvd/store/store.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace hvd::elastic {

struct MemberOptions {
  /// HVDRUN_WORKER_ID: how worlds name this worker.
  std::string worker_id;
  /// Opens a connection to the job's store. Called once for the joining
  /// thread and once for the watcher; may return the same (thread-safe)
  /// store twice.
  std::function<std::shared_ptr<store::Store>()> open_store;
  /// Template for every world's Context (timeouts, secret, addresses, cycle
  /// time, ...); rank, size, local/cross ranks and comm_prefix come from the
  /// world.
  collective::Settings settings;
  /// HOROVOD_ELASTIC_TIMEOUT: how long one join() / reset() may wait for a
  /// world that lists this worker and for its peers.
  std::chrono::milliseconds timeout{600000};
  /// How often a member waiting in the arrival barrier checks whether it
  /// should give up on the world (a newer one exists).
  std::chrono::milliseconds barrier_slice{100};
  /// Length of one watcher long-poll; bounds how long close() waits for the
  /// watcher thread.
  std::chrono::milliseconds watch_slice{250};
  /// Written to ready_key(worker_id) on the first join ("host pid").
  std::string ready_value;
};

class ElasticMember final : public Membership {
 public:
  /// Validates options (InvalidArgument: empty worker id, no open_store);
  /// joins nothing yet.
  explicit ElasticMember(MemberOptions options);
  /// close().
  ~ElasticMember() override;
  ElasticMember(const ElasticMember&) = delete;
  ElasticMember& operator=(const ElasticMember&) = delete;

  /// First join: sets ready_key(worker_id), starts the watcher and joins the
  /// newest world that lists this worker (see above). Throws
  /// WorkerRemovedError, hvd::TimeoutError (nothing within options.timeout),
  /// hvd::IoError (store unreachable).
  void join();
  /// Shuts the current Context down and joins the next world (a version
  /// newer than the current one). Same errors as join().
  void reset() override;
  /// Shuts the Context down and stops the watcher. Idempotent.
  void close();

  collective::Context& context() override;
  std::shared_ptr<collective::Context> shared_context() const;
  bool elastic() const override { return true; }
  bool hosts_updated() const override;
  /// Writes synced_key(worker_id) = the current world's version (best
  /// effort): State::sync completed, so this worker holds the state the
  /// world's sync gave it. A draining member that never synced leaves at
  /// once even when its world failed (it has nothing worth keeping).
  void synced() override;
  /// The world this member belongs to (version 0 before the first join).
  uint64_t version() const;
  store::elastic::World world() const;
  const std::string& worker_id() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// MemberOptions for this process from the environment hvdrun sets in an
/// elastic job: HVDRUN_WORKER_ID, HOROVOD_GLOO_RENDEZVOUS_ADDR/_PORT,
/// HVDRUN_SECRET, HOROVOD_ELASTIC_TIMEOUT (seconds, default 600) and the
/// usual settings (settings_from_env, init_env.h). InvalidArgument naming
/// what is missing.
MemberOptions member_options_from_env();

}  // namespace hvd::elastic
