#pragma once
/// The negotiation logic (Horovod's Controller), free of any I/O so that it
/// can be unit-tested without sockets.
///
/// Every cycle each rank builds a RankMessage with make_message(), the
/// Context all-gathers the messages, and every rank feeds the identical list
/// to process(). process() updates the message table (which ranks have
/// announced which names), and returns, in one agreed order, the tensors that
/// every rank has now announced: validated (mismatches become error
/// responses naming the disagreeing ranks) and grouped for fusion. Because
/// the inputs and the code are identical on every rank, so are the outputs.
#include "engine/message.h"
#include "engine/response_cache.h"
#include "engine/stall_inspector.h"

#include "hvd/common/io.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace hvd::collective::detail {

/// Mismatch: ranks disagree (MismatchError). Stalled: some rank never
/// submitted (TimeoutError). Unsupported: every rank agrees, but this
/// library cannot run it, e.g. device buffers without the CUDA component
/// (hvd::InvalidArgument). Joined: some rank joined and the operation is not
/// an allreduce of host buffers (JoinedError).
enum class ResponseError { None, Mismatch, Stalled, Unsupported, Joined };

/// One unit of work for the executor: a single tensor, or several fused
/// allreduces. tensors[i][r] is rank r's request for the i-th tensor.
struct Response {
  OpType type = OpType::Allreduce;
  std::vector<TensorRequests> tensors;
  ResponseError error = ResponseError::None;
  /// The message every rank reports when error != None.
  std::string message;
  /// Join: the rank that joined last (latest cycle; the highest rank of
  /// that cycle), as Horovod's join() returns it.
  int last_joined = -1;

  bool ok() const { return error == ResponseError::None; }
  const std::string& name(std::size_t i = 0) const { return tensors[i][0].name; }
};

struct ControllerOptions {
  int rank = 0;
  int size = 1;
  std::size_t cache_capacity = 1024;
  std::size_t fusion_threshold = 64u << 20;
  /// Whether device (CUDA) buffers can be reduced: cuda::cuda_built() in
  /// the Context. Without it a tensor whose ranks all pass device buffers
  /// fails on every rank with ResponseError::Unsupported. Every rank runs
  /// the same library, so every rank decides the same.
  bool device_buffers = false;
};

struct ControllerStats {
  uint64_t cycles = 0;
  /// Requests this rank announced as a cache bit / in full.
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  /// Responses holding more than one tensor, and the tensors in them.
  uint64_t fused_responses = 0;
  uint64_t fused_tensors = 0;
  uint64_t responses = 0;
};

class Controller {
 public:
  explicit Controller(ControllerOptions options);

  /// This rank's message for the coming cycle. `fresh` are requests
  /// submitted since the last cycle (each name at most once while pending).
  RankMessage make_message(const std::vector<Request>& fresh, bool shutdown, std::vector<std::string> stalled);

  struct Outcome {
    std::vector<Response> responses;
    /// Lowest rank that asked to shut down, or -1.
    int shutdown_rank = -1;
  };

  /// Feeds all ranks' messages (index = rank). Throws hvd::IoError when the
  /// messages are inconsistent with the shared state (desynchronised peers).
  Outcome process(const std::vector<RankMessage>& messages, Clock::time_point now);

  /// Tensors announced by some but not all ranks, oldest first.
  std::vector<PendingTensor> pending() const;

  const ControllerStats& stats() const { return stats_; }

  /// Called by process() for each announcement as it is fed (rank r
  /// announced this request; cache hits included), e.g. for the timeline.
  /// Empty: nothing is called.
  std::function<void(const Request& request, int rank)> on_announce;

  /// Autotune: the threshold later cycles fuse with (every rank changes it
  /// after the same cycle).
  void set_fusion_threshold(std::size_t bytes) { options_.fusion_threshold = bytes; }
  const ResponseCache& cache() const { return cache_; }

 private:
  struct Entry {
    TensorRequests requests;  // index = rank; empty name = not yet announced
    std::vector<bool> have;
    std::vector<uint64_t> cycle;  // the cycle each rank announced it in
    int count = 0;
    uint64_t order = 0;
    Clock::time_point first_seen;
  };

  void announce(int rank, Request request, Clock::time_point now, std::vector<std::string>& ready);
  /// Horovod's join: tensors every rank that has not joined announced are
  /// completed with made-up requests (joined = true) for the joined ranks,
  /// appended to `ready` in announcement order.
  void complete_for_joined(std::vector<std::string>& ready);
  Response validate(TensorRequests requests) const;

  ControllerOptions options_;
  ResponseCache cache_;
  std::map<std::string, Entry> table_;
  uint64_t next_order_ = 0;
  ControllerStats stats_;
};

}  // namespace hvd::collective::detail
