#pragma once
/// A connected group of ranks: a full mesh of authenticated point-to-point
/// links (lib/transport) formed through a Store. Owned and used by one
/// thread at a time. Implemented by the data-plane work (comm.cpp).
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

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// The link to `peer` (peer != rank()).
  virtual transport::Link& link(int peer) = 0;
  /// Closes every link so that peers blocked on us fail fast. Idempotent.
  virtual void abort(const std::string& reason) = 0;
  virtual bool aborted() const = 0;
  /// Why the Comm was aborted (empty while it is healthy).
  virtual std::string abort_reason() const { return {}; }

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
};

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
  const std::vector<int>& members() const { return members_; }

 private:
  Comm& parent_;
  std::vector<int> members_;
  int rank_ = -1;
};

}  // namespace hvd::collective
