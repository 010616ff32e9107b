#pragma once
/// The CUDA component of the collective library (docs/cuda.md).
///
/// Built when CMake finds nvcc (HVD_WITH_CUDA=AUTO|ON|OFF); this header is
/// always present so callers can ask cuda_built() instead of carrying their
/// own #ifdefs. It deliberately includes no CUDA header: streams and events
/// are passed as the runtime's own opaque handle types (cudaStream_t is
/// `CUstream_st*`), so plain C++ callers compile without the toolkit.
#include "hvd/collective/types.h"
#include "hvd/common/error.h"
#include "hvd/store/store.h"

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

struct CUstream_st;  // = cudaStream_t's pointee
struct CUevent_st;  // = cudaEvent_t's pointee

namespace hvd::collective {

/// A CUDA runtime call failed. The message names the call and carries
/// cudaGetErrorString's text and the numeric code, e.g.
/// "cudaIpcOpenMemHandle(peer 1 buffer) failed: invalid device context (201)".
/// Not an IoError: a CUDA failure is local to this process (a sticky error
/// usually means the CUDA context is unusable and the process must restart).
class CudaError : public Error {
 public:
  CudaError(const std::string& message, int code) : Error(message), code_(code) {}
  /// The cudaError_t value.
  int code() const { return code_; }

 private:
  int code_;
};

namespace cuda {

/// Whether this library was compiled with the CUDA component.
bool cuda_built();
/// Whether device allreduces and broadcasts can use NCCL: the CUDA
/// component is built and libnccl (>= 2.10) loads at run time (it is never
/// linked; see docs/cuda.md, "NCCL"). The first call tries to load it.
bool nccl_built();
/// "major.minor.patch" of the libnccl loaded at run time; "" when
/// nccl_built() is false.
std::string nccl_version();
/// Number of CUDA devices visible to this process; 0 when the component is
/// not built, no driver is installed or no device is present. Never throws:
/// it is the question every GPU test and tool asks first.
int device_count();
/// Whether `ptr` is device (or managed) memory that kernels can access.
/// False for host memory, null, and whenever CUDA is unavailable. On a GPU
/// machine the first call initialises the CUDA runtime, so CPU-only code
/// paths should not call it per operation.
bool is_device_pointer(const void* ptr);
/// The CUDA device `ptr` was allocated on (device or managed memory), or -1
/// for host memory, null, and whenever CUDA is unavailable. Initialises the
/// CUDA runtime like is_device_pointer; used only for kAutoDevice.
int pointer_device(const void* ptr);
/// Copies `bytes` from `src` to `dst`, each host or device memory
/// (cudaMemcpyDefault), and returns when done (e.g. a device Handle's
/// output() into a framework tensor). hvd::InvalidArgument in a build
/// without the CUDA component, CudaError when CUDA fails.
void copy(void* dst, const void* src, std::size_t bytes);

/// Settings of a DeviceAllreducer; every local rank must pass the same
/// values except local_rank and device.
struct DeviceAllreducerOptions {
  /// Index of this process among the ranks of this host (0..local_size-1)
  /// and how many there are. The allreduce is across these ranks only.
  int local_rank = 0;
  int local_size = 1;
  /// CUDA device of this rank's buffers. Several ranks may share a device.
  int device = 0;
  /// Store key prefix; must be unique per communicator generation and host
  /// (e.g. "gen0/cuda/host_<cross_rank>/").
  std::string prefix = "cuda/";
  /// Bytes of one pipeline chunk: copy-in of chunk k+1 overlaps the
  /// reduction of chunk k. Rounded up to 256-byte multiples.
  std::size_t chunk_bytes = 4u << 20;
  /// Chunks in flight per rank (exchange-buffer slots), >= 2 for overlap.
  int slots = 4;
  /// Bound on every wait for a peer (rendezvous and each pipeline step);
  /// past it the operation throws hvd::TimeoutError naming the peer.
  std::chrono::milliseconds timeout{30000};
  /// How a rank waits for a local peer's copy or reduction before using its
  /// slot: Device (cudaStreamWaitEvent on the peer's IPC event: no host
  /// round trip) or Host (this thread polls the peer's event, then enqueues
  /// work that depends on nothing of the peer's, so no stream of this
  /// context blocks on another context's event). Measured on an H200 with
  /// two ranks sharing it (docs/performance.md, "GPU allreduce"): the same
  /// ~0.57 ms floor up to 4 MiB, Host slower from 64 MiB, so Device is the
  /// default. The environment variable HVD_CUDA_IPC_WAIT (device, host)
  /// overrides this.
  enum class Wait { Device, Host };
  Wait wait = Wait::Device;
};

/// Allreduce of device buffers among the ranks of one host, through CUDA IPC
/// (docs/cuda.md, "Intra-host allreduce"):
///  * at creation each rank allocates one exchange buffer of `slots` chunks
///    and IPC events, publishes their handles through the Store (the
///    authenticated job store), opens every peer's, and maps a small POSIX
///    shared-memory control block where ranks publish per-step progress;
///  * allreduce() walks a chunk plan: copy the chunk into my slot (on an
///    internal copy stream), publish, wait on every peer's copy event, then
///    one kernel reduces all local_size slots into the caller's buffer with
///    prescale/average/postscale fused, on the caller's stream.
/// Works for ranks on distinct GPUs with peer access and for several ranks
/// sharing one GPU. Every rank must call allreduce() with the same count,
/// dtype and op in the same order (the controller guarantees this).
/// Not thread-safe: one thread per instance.
class DeviceAllreducer {
 public:
  /// Collective over the local ranks: blocks until all have published.
  /// Throws CudaError, hvd::TimeoutError naming missing ranks, or
  /// hvd::InvalidArgument (bad options; component not built).
  DeviceAllreducer(store::Store& store, const DeviceAllreducerOptions& options);
  /// Waits (bounded by the timeout) until peers finished reading this
  /// rank's buffers, then releases everything. Never throws.
  ~DeviceAllreducer();
  DeviceAllreducer(const DeviceAllreducer&) = delete;
  DeviceAllreducer& operator=(const DeviceAllreducer&) = delete;

  /// In place: data[i] = postscale * (reduce_r prescale * data_r[i]), with
  /// Average dividing by local_size. `data` is device memory on
  /// options.device; the result is ordered on `stream` (null: the legacy
  /// default stream) -- the call returns once the work is enqueued, before
  /// it completes. Host blocking is limited to waiting for peers to enqueue.
  void allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op, CUstream_st* stream, double prescale = 1.0,
                 double postscale = 1.0);

  /// Marks this rank's side failed and wakes every local peer waiting on it
  /// (they fail with hvd::IoError instead of at their timeout); later calls
  /// throw IoError. For a Context whose communicator failed. Never throws.
  void abort() noexcept;

  const DeviceAllreducerOptions& options() const;
  /// Pipeline steps run so far (one per chunk), for tests and logs.
  uint64_t steps() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// Reduces `count` elements at `host` (pinned host memory) in place across
/// hosts, blocking; e.g. collective::allreduce over a cross-host Comm with
/// the operation's dtype, op and scale factors bound in.
using HostAllreduce = std::function<void(void* host, std::size_t count)>;

struct StagedAllreducerOptions {
  /// CUDA device of the buffers.
  int device = 0;
  /// Bytes per chunk: the D2H copy of chunk k+1 and the H2D copy of chunk
  /// k-1 overlap the network reduction of chunk k. Two pinned buffers of
  /// this size are allocated on the first call and reused afterwards.
  std::size_t chunk_bytes = 4u << 20;
  /// Bound on each host-side wait for a device-to-host copy (work queued
  /// before it may wait on local peers' events); hvd::TimeoutError past it.
  /// 0: unbounded.
  std::chrono::milliseconds wait_timeout{0};
};

/// The cross-host leg of a device allreduce: device -> pinned staging ->
/// `host_allreduce` (the network transport) -> staging -> device, pipelined
/// in chunks (docs/cuda.md). In place; ordered on `stream`. The host blocks
/// while the network reduces (the CPU collectives are synchronous), not for
/// the final copy back. Not thread-safe: one thread per instance.
class StagedAllreducer {
 public:
  explicit StagedAllreducer(const StagedAllreducerOptions& options);
  ~StagedAllreducer();
  StagedAllreducer(const StagedAllreducer&) = delete;
  StagedAllreducer& operator=(const StagedAllreducer&) = delete;

  void allreduce(void* data, std::size_t count, DataType dtype, CUstream_st* stream,
                 const HostAllreduce& host_allreduce);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

/// One element of a batched copy (fusion buffers): `bytes` from src to dst.
struct CopyItem {
  const void* src = nullptr;
  void* dst = nullptr;
  std::size_t bytes = 0;
};

/// Copies every item with one kernel launch on `stream` (device or managed
/// memory; items must not overlap). Used to pack and unpack device fusion
/// buffers: one launch instead of one cudaMemcpyAsync per tensor.
void batched_copy(const std::vector<CopyItem>& items, CUstream_st* stream);

/// A device buffer for fused allreduces: allocated once (on first use, at
/// `threshold` bytes, like the CPU FusionBuffer) and reused, never
/// allocated per call. pack() copies tensors in with one batched-copy
/// launch at 16-byte aligned offsets (identical on every rank for identical
/// sizes); unpack() copies them back out. The fused region can then be
/// reduced as one array (padding elements are reduced too and ignored).
class DeviceFusionBuffer {
 public:
  DeviceFusionBuffer(int device, std::size_t threshold);
  ~DeviceFusionBuffer();
  DeviceFusionBuffer(const DeviceFusionBuffer&) = delete;
  DeviceFusionBuffer& operator=(const DeviceFusionBuffer&) = delete;

  struct Tensor {
    void* data = nullptr;  ///< device memory
    std::size_t bytes = 0;
  };
  /// Copies `tensors` in on `stream`; returns the fused region's start and
  /// sets `bytes` to its length. InvalidArgument if it exceeds the threshold.
  void* pack(const std::vector<Tensor>& tensors, CUstream_st* stream, std::size_t& bytes);
  /// Copies the fused region back into `tensors` (same list as pack).
  void unpack(const std::vector<Tensor>& tensors, CUstream_st* stream);
  std::size_t threshold() const { return threshold_; }

 private:
  int device_;
  std::size_t threshold_;
  void* data_ = nullptr;
};

/// out[i] = postscale' * reduce_j(prescale * inputs[j][i]) on `stream`, in
/// float32 for half types (float64 for float64, the integer type otherwise);
/// Average divides by inputs.size() (integers: truncating). `out` may alias
/// inputs[0]. Loads are 16-byte vectors when every pointer is 16-byte aligned.
void reduce(const std::vector<const void*>& inputs, void* out, std::size_t count, DataType dtype, ReduceOp op,
            double prescale, double postscale, CUstream_st* stream);

}  // namespace cuda
}  // namespace hvd::collective
