#pragma once
/// A connected group of ranks: authenticated point-to-point links
/// (lib/transport) between every pair of ranks, formed through a Store --
/// at init those the first collectives need, the others the first time an
/// algorithm asks for them (src/bootstrap/comm.cpp, mesh_plan.h). Owned and
/// used by one thread at a time (abort() from any thread).
#include "hvd/store/store.h"

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace hvd::transport {
class Link;  // lib/transport: one point-to-point connection
}

namespace hvd::collective {

struct CommOptions {
  int rank = 0;
  int size = 1;
  /// Store key prefix for this communicator's rendezvous ("gen0/", ...), so
  /// a re-formed job never reads a stale address.
  std::string prefix;
  /// Address to listen on and publish; empty: the source address of the
  /// route to `route_hint`, else 127.0.0.1.
  std::string bind_address;
  std::string route_hint;
  /// Job secret; peers that do not prove it are refused.
  std::string secret;
  std::chrono::milliseconds timeout{30000};
  /// SO_SNDBUF/SO_RCVBUF for every link in bytes; 0 keeps the kernel's
  /// auto-tuning, negative picks the library default (kDefaultSocketBuffer).
  int socket_buffer_bytes = -1;
};

/// Socket buffer size used when CommOptions::socket_buffer_bytes < 0.
inline constexpr int kDefaultSocketBuffer = 0;

/// The first failure of a communicator, agreed on by its ranks through the
/// rendezvous store (keys "<prefix>failure/claim" and "<prefix>failure/first").
/// A rank that loses a peer aborts its communicator, closing every link: that
/// is how the others learn fast, but a rank that then sees a *live* peer's
/// link close would blame that peer. So the rank that sees a failure first
/// records it here *before* it aborts, and every rank that fails later (it
/// can only learn after the record) reports the recorded one: every
/// survivor names the same dead rank.
class FailureBoard {
 public:
  /// `budget`: the most time report() waits for the store (a slow or dead
  /// store must not slow a failure down; the rank then reports what it saw).
  FailureBoard(std::shared_ptr<store::Store> store, std::string prefix,
               std::chrono::milliseconds budget = std::chrono::milliseconds(300));
  /// Records `failure` (one line: "rank 2 failed (seen first by ...)")
  /// unless a rank recorded one before; returns the recorded one, or
  /// `failure` when the store did not answer within the budget.
  std::string report(const std::string& failure);
  /// Records `failure` for the communicator of rendezvous `prefix` unless a
  /// rank recorded one before, synchronously (report() without its thread
  /// and budget, for a caller that may block: the elastic watcher telling
  /// the members of a world still forming that it cannot form). Returns
  /// whether this call recorded it. Throws what the store throws.
  static bool record(store::Store& store, const std::string& prefix, const std::string& failure);
  /// The store key that holds the recorded failure of the communicator
  /// whose rendezvous prefix is `prefix`: "<prefix>failure/first" (ranks
  /// waiting at init look there; store::elastic::failure_key names the same
  /// key for an elastic world).
  static std::string first_key(const std::string& prefix) { return prefix + "failure/first"; }

 private:
  std::shared_ptr<store::Store> store_;
  std::string prefix_;
  std::chrono::milliseconds budget_;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The link to `peer` (peer != rank()); formed on first use when init
  /// did not (then it may block until the peer asks for it too, and throws
  /// transport::LinkError / TimeoutError naming the peer).
  virtual transport::Link& link(int peer) = 0;
  /// Closes every link so that peers blocked on us fail fast. Idempotent.
  virtual void abort(const std::string& reason) = 0;
  virtual bool aborted() const = 0;
  /// Why the Comm was aborted (empty while it is healthy).
  virtual std::string abort_reason() const { return {}; }

  /// Shares this communicator's first failure with its other ranks (see
  /// FailureBoard); without one, report_failure answers `failure` itself.
  void set_failure_board(std::shared_ptr<FailureBoard> board) { board_ = std::move(board); }
  /// Records `failure` as the communicator's first unless one was recorded;
  /// returns the first. Call it before abort(). A GroupComm asks its parent.
  virtual std::string report_failure(const std::string& failure) { return board_ ? board_->report(failure) : failure; }

  /// Scratch memory owned by the Comm and reused by every collective (grown,
  /// never shrunk): fresh pages cost ~10 us per 4 KiB, so algorithms never
  /// allocate per call. `slot` separates buffers needed at the same time.
  /// Only the thread that runs collectives may use it.
  char* scratch(std::size_t slot, std::size_t bytes);

 private:
  struct ScratchBuffer {
    std::unique_ptr<char[]> data;
    std::size_t size = 0;
  };
  std::vector<ScratchBuffer> scratch_;
  std::shared_ptr<FailureBoard> board_;
};

/// Publishes this rank's address under options.prefix and forms the init
/// links (every pair up to 8 ranks, else the ring neighbours) before
/// `options.timeout`; the error names the step and the peer that failed.
/// Links formed later read peer addresses from `store`: it must outlive
/// the Comm's use.
std::unique_ptr<Comm> connect_comm(store::Store& store, const CommOptions& options);

/// Some ranks of a connected Comm as a Comm of their own: group rank i is
/// parent rank members[i]. It shares the parent's links (no new
/// connections), so it may only be used while no other collective runs on
/// those links -- e.g. by the Context's background thread, where every
/// member runs the same group collective at the same point; disjoint groups
/// may run at once. Aborting it aborts the parent. Used by the hierarchical
/// device allreduce (docs/cuda.md) for the ranks of one local rank.
class GroupComm : public Comm {
 public:
  /// hvd::InvalidArgument unless `members` are distinct ranks of `parent`
  /// that include parent.rank().
  GroupComm(Comm& parent, std::vector<int> members);
  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  transport::Link& link(int peer) override;
  void abort(const std::string& reason) override { parent_.abort(reason); }
  bool aborted() const override { return parent_.aborted(); }
  std::string abort_reason() const override { return parent_.abort_reason(); }
  std::string report_failure(const std::string& failure) override { return parent_.report_failure(failure); }
  const std::vector<int>& members() const { return members_; }

 private:
  Comm& parent_;
  std::vector<int> members_;
  int rank_ = -1;
};

}  // namespace hvd::collective
