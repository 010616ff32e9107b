#pragma once
/// The state behind a Handle, and the executor that runs one agreed
/// Response on this rank through the data-plane algorithms.
#include "engine/controller.h"
#include "engine/fusion.h"

#include "hvd/collective/comm.h"
#include "hvd/collective/handle.h"
#include "hvd/common/io.h"

struct CUstream_st;
struct CUevent_st;

namespace hvd::collective::cuda::detail {
class DeviceExecutor;
}

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace hvd::collective::detail {

class Timeline;

struct OpState {
  Request request;
  const void* input = nullptr;
  void* output = nullptr;
  Allocator allocator;
  /// Device operations: the caller's CUDA stream (request.device >= 0) ...
  CUstream_st* stream = nullptr;
  /// ... and an event recorded on it at submit: the operation runs after
  /// the work queued before the call, not after what the caller queues
  /// later. A failure to record it is kept and rethrown when the operation
  /// runs (so every rank still announces the tensor).
  std::shared_ptr<CUevent_st> ready;
  std::exception_ptr submit_error;
  Clock::time_point submitted;

  // Results, written by the background thread before finish().
  std::unique_ptr<uint8_t[]> owned;
  /// Handle-owned device memory (device operations without an allocator).
  std::shared_ptr<void> owned_device;
  void* out_data = nullptr;
  std::size_t out_bytes = 0;
  std::vector<int64_t> out_shape;
  std::vector<int64_t> recv_splits;
  /// A failure of this operation alone (its allocator failed) found while
  /// executing; reported by finish() after the collective completed.
  std::exception_ptr local_error;

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;

  /// Marks the operation finished (with `e` as its error, if any) and wakes
  /// waiters. Called exactly once, by the background thread or at failure.
  void finish(std::exception_ptr e);
};

/// Validates the local parts of a request at submit time (null pointers,
/// negative dims, root range, alltoall splits, scale factors on integer
/// types); throws hvd::InvalidArgument naming the tensor.
void check_request(const OpState& op, int size);

/// Rows this rank sends to each rank in an alltoall (even split if empty).
std::vector<int64_t> alltoall_splits(const Request& request, int size);

class Hierarchy;  // hierarchy.h

/// What execute() runs operations with.
struct Executors {
  Comm& comm;
  FusionBuffer& fusion;
  /// The Context's device executor, created on first use (device responses
  /// only; throws hvd::InvalidArgument in a build without CUDA).
  std::function<cuda::detail::DeviceExecutor&()> device;
  /// A GroupComm of `comm` for these ranks, kept for reuse (the
  /// hierarchical device allreduce's cross-host groups).
  std::function<Comm&(const std::vector<int>& members)> group;
  /// The timeline when it records (rank 0 of the global set), else null:
  /// execute() reports its activities (fusion copies, the collective).
  Timeline* timeline = nullptr;

  /// Hierarchical host allreduce/allgather when set (hierarchy.h); null: flat.
  Hierarchy* hierarchy = nullptr;
};

/// Runs `response` (ok() only) on this rank; ops[i] is this rank's state for
/// response.tensors[i]. Data-plane errors (hvd::IoError, CudaError, ...)
/// propagate: they are fatal for the Context.
void execute(const Response& response, const std::vector<OpState*>& ops, Executors& executors);

}  // namespace hvd::collective::detail
