#pragma once
// NCCL for ranks on distinct GPUs (docs/cuda.md, "NCCL"). NCCL is no Debian
// package and is never linked: libnccl is loaded with dlopen at run time
// (HVD_NCCL_LIBRARY, then the build-time path if one was found, then the
// soname libnccl.so.2), through our own declarations of the few functions
// of its stable C API that we call. So a library built on a machine without
// NCCL still uses it on a GPU machine that has it.
//
// Plain C++ (streams are opaque pointers): the loader, the choice and the
// communicator set-up through the rendezvous store are unit-tested without
// a GPU against a fake libnccl (tests/unit/cuda/fake_nccl.cpp).
#include "device_plan.h"

#include "hvd/collective/types.h"
#include "hvd/common/error.h"
#include "hvd/store/store.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct CUstream_st;

namespace hvd::collective::cuda::detail {

/// An NCCL call failed: the message names the call and carries
/// ncclGetErrorString's text and the code. Fatal for the Context, like a
/// CudaError.
class NcclError : public Error {
 public:
  NcclError(const std::string& message, int code) : Error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

/// NCCL's ncclDataType_t / ncclRedOp_t values for ours (fixed by NCCL's
/// ABI since 2.10, the first version with bfloat16 and ncclAvg).
int nccl_dtype(DataType dtype);
/// Whether NCCL reduces this dtype (it has no 16-bit integer type: an int16
/// device allreduce on a job whose path is NCCL takes the library's own
/// path instead; every rank decides the same, as the dtype is negotiated).
bool nccl_reduces(DataType dtype);
/// Sum for Sum and Average (Average divides after, with our own kernel, so
/// integer and scaled averages match the other paths), Min, Max, Prod.
int nccl_op(ReduceOp op);

/// The loaded library: the functions we call, or why it is unavailable.
class NcclLibrary {
 public:
  /// Loads libnccl once per process (thread-safe) from, in order: the
  /// `HVD_NCCL_LIBRARY` environment variable, the path found at build time
  /// (if any), "libnccl.so.2". Never throws: unavailable() says why.
  static const NcclLibrary& get();
  /// For tests: loads exactly `path` (a fresh handle, kept for the process).
  static std::unique_ptr<NcclLibrary> load(const std::string& path);

  bool available() const { return unavailable_.empty(); }
  /// "" when available, else why not ("libnccl.so.2: cannot open shared
  /// object file ...", "ncclCommInitRank missing", "NCCL 2.8.4 is older
  /// than 2.10").
  const std::string& unavailable() const { return unavailable_; }
  /// NCCL's version code (major*10000 + minor*100 + patch), 0 if unavailable.
  int version_code() const { return version_; }
  /// "2.18.3", or "" when unavailable.
  std::string version() const;
  /// Whether libnccl has ncclCommInitRankConfig (NCCL >= 2.14): then
  /// NcclComm forms its communicator non-blocking and bounds the set-up by
  /// its timeout. Without it the set-up is ncclCommInitRank, unbounded.
  bool bounded_setup() const;
  const std::string& path() const { return path_; }

  struct Api;
  const Api& api() const { return *api_; }

  ~NcclLibrary();
  NcclLibrary(const NcclLibrary&) = delete;
  NcclLibrary& operator=(const NcclLibrary&) = delete;

 private:
  NcclLibrary();
  void open(const std::string& path);
  std::string path_;
  std::string unavailable_;
  int version_ = 0;
  std::unique_ptr<Api> api_;
};

/// HVD_CUDA_ALLREDUCE_PATH: auto (NCCL when possible, else CUDA IPC on one
/// host, else staged through pinned host memory), nccl (NCCL or fail),
/// intra-host (never NCCL; CUDA IPC on one host), staged (always staged),
/// hierarchical (never NCCL; CUDA IPC within each host and staged across
/// hosts when the hosts are alike, else as auto without NCCL).
enum class DevicePathSetting { Auto, Nccl, IntraHost, Staged, Hierarchical };
/// InvalidArgument for an unknown value.
DevicePathSetting parse_device_path_setting(const std::string& value);

/// What one rank says about itself before the job chooses its device path.
struct NcclRankInfo {
  /// The GPU's UUID (hex), identical for ranks sharing one GPU.
  std::string gpu;
  /// libnccl loadable here, and its version code.
  bool available = false;
  int version = 0;
  /// This rank's HVD_CUDA_ALLREDUCE_PATH. Rank 0's decides for the job
  /// (ranks decide from the same records, so they never diverge).
  DevicePathSetting setting = DevicePathSetting::Auto;
  /// Why not, for the message when NCCL is required.
  std::string reason;
  /// UUIDs of the GPUs this rank's GPU can access directly: its own, and
  /// every GPU this process sees with cudaDeviceCanAccessPeer. The
  /// intra-host CUDA IPC path needs every local peer's GPU in this list;
  /// without it (GPUs without peer access, or processes that each see only
  /// their own GPU through CUDA_VISIBLE_DEVICES) device allreduces take the
  /// staged path. UUIDs, not device indices: indices differ per process.
  std::vector<std::string> reachable;
  /// Where the rank is (the hierarchical path's groups).
  RankPlace place;

  std::string encode() const;
  /// hvd::IoError on a malformed record (a corrupt store value).
  static NcclRankInfo decode(const std::string& text);
};

/// The job's choice, identical on every rank (every rank decides from the
/// same records): NCCL when rank 0's setting allows it (Auto or Nccl), every
/// rank has the same setting, the job has more than one rank, every rank
/// loaded libnccl (one version everywhere) and no two ranks share a GPU.
/// Otherwise false -- unless rank 0's setting is Nccl, then
/// hvd::InvalidArgument naming the reason (every rank throws alike). `why`
/// (may be null) receives the reason NCCL is not used, for the log.
bool choose_nccl(const std::vector<NcclRankInfo>& ranks, std::string* why);

/// Whether every rank can reach the GPU of every other rank of its host
/// (same place.cross_rank) -- the same GPU, or one in its `reachable`
/// list: the intra-host path's condition. `why` (may be null) names the
/// first pair that cannot.
bool all_peer_access(const std::vector<NcclRankInfo>& ranks, std::string* why);

/// One NCCL communicator over every rank of the job.
class NcclComm {
 public:
  /// Collective over every rank: rank 0 creates the unique id and publishes
  /// it at `<prefix>id`; every rank reads it (bounded by `timeout`), then
  /// forms the communicator. The caller's CUDA device must be current.
  ///
  /// With ncclCommInitRankConfig (lib.bounded_setup()) the communicator is
  /// created non-blocking and its state polled until it is ready, fails
  /// (NcclError with NCCL's text) or `timeout` has passed since the call:
  /// then the half-made communicator is aborted (ncclCommAbort) and
  /// hvd::TimeoutError says that a peer may have died before joining. Without
  /// it, ncclCommInitRank: a peer that never joins blocks it for good (the
  /// log says so once, at debug level).
  NcclComm(const NcclLibrary& lib, store::Store& store, const std::string& prefix, int rank, int size,
           std::chrono::milliseconds timeout);
  /// ncclCommDestroy (ncclCommAbort after abort() or a failed call). Never
  /// throws.
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  /// Enqueue on `stream`; NcclError on failure. On a non-blocking
  /// communicator NCCL may answer ncclInProgress before the operation is on
  /// the stream; these return only once it is (the communicator's state left
  /// ncclInProgress), so work queued after them runs after NCCL's. That wait
  /// is bounded by the constructor's `timeout` (hvd::TimeoutError).
  void allreduce(const void* in, void* out, std::size_t count, DataType dtype, ReduceOp op, CUstream_st* stream);
  void broadcast(const void* in, void* out, std::size_t bytes, int root, CUstream_st* stream);
  /// NcclError if the communicator reported an asynchronous error (a peer
  /// lost, a network failure): polled while waiting for a stream.
  void check_async() const;
  /// Marks the communicator failed: its destruction aborts it instead of
  /// waiting for peers. Never throws.
  void abort() noexcept;

 private:
  /// After an NCCL call on the communicator returned `code`: ncclInProgress
  /// polls ncclCommGetAsyncError until the state is ncclSuccess; any error
  /// throws NcclError naming `call`.
  void settle(int code, const char* call);

  const NcclLibrary& lib_;
  int rank_;
  std::chrono::milliseconds timeout_;
  void* comm_ = nullptr;
  bool aborted_ = false;
};

/// Exchanges every rank's record at `<prefix>rank_<r>` and returns them in
/// rank order (bounded by `timeout`; TimeoutError names the missing ranks).
std::vector<NcclRankInfo> exchange_nccl_info(store::Store& store, const std::string& prefix, int rank, int size,
                                             const NcclRankInfo& mine, std::chrono::milliseconds timeout);

}  // namespace hvd::collective::cuda::detail
