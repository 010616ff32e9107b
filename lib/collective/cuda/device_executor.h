#pragma once
// The Context's runner of operations on device buffers (docs/cuda.md,
// "Operations on device buffers"). Private to the collective library: the
// Context (src/engine/context.cpp) owns one, created on its background thread at
// the first device operation and destroyed when that thread ends (shutdown,
// communicator failure, elastic re-formation), and src/engine/operations.cpp calls
// it for agreed responses whose tensors are device buffers.
//
// Includes no CUDA header; in a build without CUDA the constructor throws
// hvd::InvalidArgument (the Controller refuses device tensors before that).
#include "device_plan.h"
#include "nccl.h"

#include "hvd/collective/cuda.h"
#include "hvd/store/store.h"

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hvd::collective::cuda::detail {

/// One rank's buffers of one tensor.
struct DeviceTensor {
  const void* input = nullptr;
  void* output = nullptr;
  std::size_t bytes = 0;
  /// The caller's stream: the operation runs after the work queued on it
  /// (null: the device's legacy default stream) ...
  CUstream_st* stream = nullptr;
  /// ... up to this event, when given: recorded on `stream` when the
  /// operation was submitted (record_ready_event), so the operation does
  /// not wait for work the caller queues later. The buffers must still be
  /// left alone until the handle completes.
  CUevent_st* ready = nullptr;
};

struct DeviceExecutorOptions {
  JobShape job;
  /// The communicator generation's store prefix (Settings::comm_prefix).
  std::string comm_prefix;
  /// The Context's fusion threshold: size of each device fusion buffer.
  std::size_t fusion_threshold = 64u << 20;
  /// Pipeline chunk of the intra-host and staged paths, and of broadcasts.
  std::size_t chunk_bytes = 4u << 20;
  int slots = 4;
  /// Bound on every wait for a peer in the intra-host path, the path
  /// records and NCCL set-up (HOROVOD_START_TIMEOUT).
  std::chrono::milliseconds timeout{30000};
  /// Bound on each host-side wait for device work to finish (it includes
  /// the caller's work queued before the operation and, with NCCL, the
  /// slowest rank's): HVD_CUDA_WAIT_TIMEOUT, generous by default so that a
  /// healthy job is never failed; past it the operation fails with
  /// TimeoutError instead of hanging. 0: unbounded.
  std::chrono::milliseconds wait_timeout{600000};
  /// HVD_CUDA_ALLREDUCE_PATH of this rank; rank 0's decides for the job
  /// (exchanged with the NCCL records). Staged lets one-host GPU tests run
  /// the cross-host path; Nccl fails when NCCL cannot be used.
  DevicePathSetting path = DevicePathSetting::Auto;
};

/// A blocking allreduce of `count` elements at `host` (pinned), with the
/// operation's dtype, reducing with `op` and no scaling, among the job's
/// ranks `members` only (every member calls it with the same list; disjoint
/// groups at once): the hierarchical path's cross-host leg, e.g.
/// collective::allreduce over a GroupComm of the Context's Comm.
using GroupHostAllreduce =
    std::function<void(void* host, std::size_t count, ReduceOp op, const std::vector<int>& members)>;

/// A blocking broadcast of `bytes` at `host` (pinned) from the root over the
/// network, e.g. collective::broadcast over the Context's Comm.
using HostBroadcast = std::function<void(void* host, std::size_t bytes)>;

/// Owns, per device this rank used: an internal stream, a device fusion
/// buffer, a StagedAllreducer and pinned broadcast buffers; and, per
/// distinct list of every rank's device (created collectively, in the same
/// order on every rank): the job's path choice (every rank's GPU, NCCL
/// availability and setting exchanged through the store), an NCCL
/// communicator when NCCL was chosen, else the DeviceAllreducer of the
/// intra-host path.
/// Not thread-safe: the Context's background thread only.
class DeviceExecutor {
 public:
  /// `store`: the job's rendezvous store (may be null for a job of size 1).
  DeviceExecutor(std::shared_ptr<store::Store> store, const DeviceExecutorOptions& options);
  /// Releases everything, device by device (bounded waits for local peers).
  ~DeviceExecutor();
  DeviceExecutor(const DeviceExecutor&) = delete;
  DeviceExecutor& operator=(const DeviceExecutor&) = delete;

  /// One agreed allreduce of `mine` (several tensors: fused through the
  /// device fusion buffer). devices[r] is rank r's device for them
  /// (identical list on every rank); every tensor of mine is on
  /// devices[rank]. `network` reduces pinned host memory across all ranks
  /// with the operation's dtype/op/scales bound in (the staged path);
  /// `group_network` reduces among some ranks (the hierarchical path).
  /// Returns once the results are in the outputs (stream synchronised).
  /// CudaError, hvd::IoError / TimeoutError (a local peer) on failure.
  void allreduce(const std::vector<int32_t>& devices, const std::vector<DeviceTensor>& mine, DataType dtype,
                 ReduceOp op, double prescale, double postscale, const HostAllreduce& network,
                 const GroupHostAllreduce& group_network);

  /// Root's input to every rank's output: ncclBroadcast when the job chose
  /// NCCL for `devices`, else through pinned host chunks and `network`
  /// (called once per chunk, same chunks on every rank).
  void broadcast(const std::vector<int32_t>& devices, const DeviceTensor& tensor, int root,
                 const HostBroadcast& network);

  /// Copies `t.bytes` of device memory `t.input` on `device` to host memory
  /// `dst`, after the caller's work (t.ready, else t.stream); returns when
  /// the copy is done. Allgather, alltoall and reducescatter of device
  /// buffers run their host algorithm between to_host and to_device.
  /// CudaError on failure; TimeoutError if the copy does not finish within
  /// the options' timeout.
  void to_host(int device, const DeviceTensor& t, void* dst);
  /// Copies host memory `src` to device memory `dst` on `device`, after
  /// `after` (if not null: an event recorded on the caller's stream once a
  /// caller's allocator returned `dst`, so work the caller queued on that
  /// memory comes first); returns when the copy is done.
  void to_device(int device, const void* src, void* dst, std::size_t bytes, CUevent_st* after = nullptr);
  /// Runs `fn` with `device` current on this thread (a caller's allocator
  /// that calls cudaMalloc allocates there).
  void with_device(int device, const std::function<void()>& fn);

  /// The communicator failed: wakes local peers waiting on this rank in an
  /// intra-host pipeline (they fail at once) and lets teardown skip waiting
  /// for them. Never throws.
  void abort() noexcept;

  /// Intra-host allreducers created so far (for tests and logs).
  std::size_t intra_host_created() const;
  /// NCCL communicators created so far (for tests and logs).
  std::size_t nccl_created() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// hvd::InvalidArgument unless `device` is one of the devices this process
/// sees.
void check_visible_device(int device);

/// An event recorded now on `stream` of `device` (the caller's stream, at
/// submit), destroyed when the last owner lets go. InvalidArgument for a
/// device that is not visible, CudaError when CUDA fails.
std::shared_ptr<CUevent_st> record_ready_event(int device, CUstream_st* stream);

/// `bytes` (at least 1 allocated) of device memory on `device`, freed with
/// cudaFree when the last owner lets go (a handle-owned output). CudaError
/// when the allocation fails.
std::shared_ptr<void> allocate_device_memory(int device, std::size_t bytes);

}  // namespace hvd::collective::cuda::detail
