#pragma once
/// One member of a collective job: its settings, the Store it met its peers
/// through, the connected Comm, and the background thread that negotiates
/// and executes operations (docs/collective.md). Not a global: tests run N
/// Contexts as threads of one process; hvd.h wraps one per process.
#include "hvd/collective/comm.h"
#include "hvd/collective/errors.h"
#include "hvd/collective/handle.h"
#include "hvd/collective/types.h"
#include "hvd/store/store.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

struct CUstream_st;  // = cudaStream_t's pointee (no CUDA header needed here)

namespace hvd::collective {

namespace detail {
struct OpState;  // operations.h (private)
}  // namespace detail

/// The id of the process set of every rank (Horovod's global_process_set).
inline constexpr int32_t kGlobalProcessSet = 0;

/// AllreduceArgs::device / BroadcastArgs::device: the buffers are host memory.
inline constexpr int32_t kHostDevice = -1;
/// The library asks CUDA where the buffers are (cuda::pointer_device of the
/// output, else the input). Only a library built with the CUDA component
/// probes; without it kAutoDevice means host memory. Probing initialises the
/// CUDA runtime, so CPU-only programs should leave kHostDevice.
inline constexpr int32_t kAutoDevice = -2;

/// Everything a Context needs, normally read from the environment hvdrun
/// sets (settings_from_env, init_env.h); tests fill it in directly.
struct Settings {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
  std::string hostname;

  /// HOROVOD_CYCLE_TIME: pause between negotiation cycles when idle (a
  /// submission wakes the thread early).
  std::chrono::microseconds cycle_time{1000};
  /// HOROVOD_FUSION_THRESHOLD: bytes of one fused allreduce; 0 disables fusion.
  std::size_t fusion_threshold = 64u << 20;
  /// HOROVOD_HIERARCHICAL_ALLREDUCE / HOROVOD_HIERARCHICAL_ALLGATHER: host
  /// buffers are reduced / gathered within each host first, then across
  /// hosts (docs/collective.md). Must be the same on every rank.
  bool hierarchical_allreduce = false;
  bool hierarchical_allgather = false;
  /// HOROVOD_AUTOTUNE and its knobs (docs/collective.md, "Autotune"): the
  /// Context of every rank tunes fusion threshold, cycle time and (several
  /// hosts) the hierarchical switches; process sets keep their settings.
  bool autotune = false;
  /// HOROVOD_AUTOTUNE_LOG: Horovod's CSV, written by rank 0 (empty: none).
  std::string autotune_log;
  int autotune_warmup_samples = 3;
  int autotune_steps_per_sample = 10;
  int autotune_max_samples = 20;
  /// HOROVOD_CACHE_CAPACITY: response-cache entries; 0 disables the cache.
  std::size_t cache_capacity = 1024;
  /// HOROVOD_STALL_CHECK_DISABLE inverted.
  bool stall_check = true;
  /// HOROVOD_STALL_CHECK_TIME_SECONDS.
  std::chrono::milliseconds stall_warn_after{60000};
  /// HOROVOD_STALL_SHUTDOWN_TIME_SECONDS; 0 = never fail stalled tensors.
  std::chrono::milliseconds stall_fail_after{0};
  /// HOROVOD_THREAD_AFFINITY: one core id per local rank (Horovod's
  /// format); local rank i pins its background thread to core
  /// thread_affinity[i]. Empty: not pinned. Fewer ids than local ranks: not
  /// pinned, one warning from local rank 0 (as Horovod, which logs an
  /// error). A core this process may not run on: InvalidArgument.
  std::vector<int> thread_affinity;

  /// Rendezvous through the store (size > 1 only): reaching the store and
  /// connecting the mesh. HOROVOD_GLOO_TIMEOUT_SECONDS when set (Horovod's
  /// Gloo rendezvous timeout), else HOROVOD_START_TIMEOUT.
  std::chrono::milliseconds start_timeout{30000};
  /// When set, the mesh connection ends by this time even if start_timeout
  /// would allow longer: init spent part of start_timeout reaching the
  /// store, and the two share one bound.
  std::optional<std::chrono::steady_clock::time_point> init_deadline;
  /// Key prefix of this communicator generation in the store.
  std::string comm_prefix = "gen0/";
  /// HVDRUN_SECRET: peers prove it on every link.
  std::string secret;
  /// Listen address (HOROVOD_GLOO_IFACE's address); empty: derived from route_hint.
  std::string bind_address;
  /// The store's host, used to pick the interface peers can reach.
  std::string route_hint;

  /// Static process sets (Horovod's init(process_sets=[...])): every Context
  /// made from these settings registers them when it is created (a
  /// collective step over every rank), set i getting id i + 1. Duplicates,
  /// repeated or out-of-range ranks: hvd::InvalidArgument.
  std::vector<std::vector<int>> process_sets;
  /// Elastic worlds: a static set naming a rank >= size is not registered
  /// in that world (rank 0 logs one warning; ops on its id fail as for an
  /// unknown id) instead of failing the Context; its id stays reserved.
  bool skip_unfit_process_sets = false;
  /// Elastic worlds: when another rank shuts down (its process ends, e.g.
  /// after an exception in the training script) while this rank's
  /// operations wait, they fail with elastic::PeerFailureError -- the member
  /// left the world, and run() restores the last commit and re-joins the
  /// world hvdrun publishes without it -- instead of ShutdownError (a job
  /// that ends, nothing to recover into). Horovod recovers there too.
  bool peer_shutdown_is_failure = false;
  /// HOROVOD_DYNAMIC_PROCESS_SETS=1: add_process_set/remove_process_set
  /// allowed after creation (else they throw, as Horovod refuses them).
  bool dynamic_process_sets = false;
  /// Set by the process-set table on the Context of a set: that set's id
  /// (0: the Context of every rank). Log lines then say
  /// "hvd[set 1, rank 0]", the rank being the one within the set.
  int32_t process_set_id = 0;

  /// HOROVOD_TIMELINE: rank 0 of the global set writes a Chrome-trace
  /// timeline to this file from creation on (docs/collective.md,
  /// "Timeline"); empty: none. A path that cannot be created is logged.
  std::string timeline_path;
  /// HOROVOD_TIMELINE_MARK_CYCLES=1: CYCLE_START marks in the timeline.
  bool timeline_mark_cycles = false;
};

/// What a Context has done; used by tests and logs.
struct ContextStats {
  uint64_t cycles = 0;
  uint64_t cache_hits = 0;
  uint64_t cache_misses = 0;
  uint64_t fused_responses = 0;
  uint64_t fused_tensors = 0;
  uint64_t responses = 0;
  /// Autotune (Settings::autotune): scored samples so far (rank 0; other
  /// ranks 0), whether it still tunes, and the setting in use since its
  /// last change (0 until then).
  uint64_t autotune_samples = 0;
  bool autotune_active = false;
  std::size_t fusion_threshold = 0;
  std::chrono::microseconds cycle_time{0};
  /// Allreduces and allgathers run hierarchically (Settings::hierarchical_*).
  uint64_t hierarchical_ops = 0;
  /// Stall warnings issued (rank 0 only), newest last.
  std::vector<std::string> stall_warnings;
};

/// Tensor arguments: `shape` describes the tensor (its element count is the
/// product; {} is a scalar). Input may equal output for in-place operations.
/// A name identifies the operation across ranks; an empty name gets an
/// automatic one ("allreduce.noname.N"), which only matches if every rank
/// submits its unnamed operations in the same order.
///
/// Device buffers (docs/cuda.md, "Operations on device buffers"): `device`
/// is the CUDA device both buffers are on (>= 0), kHostDevice (default) or
/// kAutoDevice. The operation is ordered after work already queued on
/// `stream` when it is submitted (an event recorded then; null: the legacy
/// default stream), not after work queued later -- the buffers must still be
/// left alone until the handle completes -- and the handle completes once
/// the result is in `output` (the library synchronises its own stream), so
/// later work on any stream may read it. Every rank must pass device
/// buffers or every rank host buffers (else MismatchError on all ranks);
/// the device index may differ per rank.
struct AllreduceArgs {
  std::string name;
  const void* input = nullptr;
  void* output = nullptr;
  DataType dtype = DataType::Float32;
  std::vector<int64_t> shape;
  ReduceOp op = ReduceOp::Sum;
  double prescale = 1.0;
  double postscale = 1.0;
  int32_t device = kHostDevice;
  CUstream_st* stream = nullptr;
  /// The process set that runs the operation (kGlobalProcessSet: every
  /// rank); see Context::add_process_set.
  int32_t process_set = kGlobalProcessSet;
};

/// Concatenates every rank's tensor along the first dimension, which may
/// differ per rank. The output comes from `allocator` or the handle.
///
/// Allgather, alltoall and reducescatter take device buffers too: `device`
/// and `stream` as in AllreduceArgs (the data goes through host memory,
/// docs/cuda.md). Then `allocator` must return memory on `device`; without
/// one the handle owns device memory (Handle::output_device()).
struct AllgatherArgs {
  std::string name;
  const void* input = nullptr;
  DataType dtype = DataType::Float32;
  std::vector<int64_t> shape;
  Allocator allocator;
  int32_t device = kHostDevice;
  CUstream_st* stream = nullptr;
  /// The process set that runs the operation (kGlobalProcessSet: every
  /// rank); see Context::add_process_set.
  int32_t process_set = kGlobalProcessSet;
};

/// Copies root's input into every rank's output (input may equal output;
/// non-root ranks' input is ignored). `device` and `stream` as in
/// AllreduceArgs (device buffers travel through pinned host memory).
struct BroadcastArgs {
  std::string name;
  const void* input = nullptr;
  void* output = nullptr;
  DataType dtype = DataType::Float32;
  std::vector<int64_t> shape;
  int root = 0;
  int32_t device = kHostDevice;
  CUstream_st* stream = nullptr;
  /// The process set that runs the operation (kGlobalProcessSet: every
  /// rank); see Context::add_process_set.
  int32_t process_set = kGlobalProcessSet;
};

/// Sends splits[r] rows (first-dimension slices) to rank r; empty splits
/// divide the first dimension evenly. Rows received from each rank are
/// learned during negotiation (Handle::recv_splits).
struct AlltoallArgs {
  std::string name;
  const void* input = nullptr;
  DataType dtype = DataType::Float32;
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;
  Allocator allocator;
  /// As AllgatherArgs.
  int32_t device = kHostDevice;
  CUstream_st* stream = nullptr;
  /// The process set that runs the operation (kGlobalProcessSet: every
  /// rank); see Context::add_process_set.
  int32_t process_set = kGlobalProcessSet;
};

/// Reduces across ranks, then rank r keeps its share of the first
/// dimension: shape[0]/size rows, the first shape[0]%size ranks one more.
struct ReducescatterArgs {
  std::string name;
  const void* input = nullptr;
  DataType dtype = DataType::Float32;
  std::vector<int64_t> shape;
  ReduceOp op = ReduceOp::Sum;
  double prescale = 1.0;
  double postscale = 1.0;
  Allocator allocator;
  /// As AllgatherArgs.
  int32_t device = kHostDevice;
  CUstream_st* stream = nullptr;
  /// The process set that runs the operation (kGlobalProcessSet: every
  /// rank); see Context::add_process_set.
  int32_t process_set = kGlobalProcessSet;
};

struct BarrierArgs {
  std::string name;
  /// The process set that runs the operation (kGlobalProcessSet: every
  /// rank); see Context::add_process_set.
  int32_t process_set = kGlobalProcessSet;
};

/// Rows of the first dimension reducescatter gives `rank` out of `rows`.
int64_t reducescatter_rows(int64_t rows, int rank, int size);

class Context {
 public:
  /// Rendezvous: connects the Comm through `store` (size > 1; may be null
  /// for size 1) within settings.start_timeout, then starts the thread
  /// (named "hvd-background"; pinned per settings.thread_affinity).
  /// Throws hvd::TimeoutError / hvd::IoError naming the store on failure.
  static std::unique_ptr<Context> create(const Settings& settings, std::shared_ptr<store::Store> store);

  /// Uses an already connected Comm (size must match settings); null for a
  /// job of size 1.
  Context(const Settings& settings, std::unique_ptr<Comm> comm, std::shared_ptr<store::Store> store = nullptr);
  /// Shuts down if still running.
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  const Settings& settings() const;
  int rank() const;
  int size() const;
  int local_rank() const;
  int local_size() const;
  int cross_rank() const;
  int cross_size() const;

  /// Asynchronous operations. Argument errors (null pointers, bad root or
  /// splits, a name already pending) throw hvd::InvalidArgument here; after a
  /// communicator failure they throw its hvd::IoError; after shutdown,
  /// ShutdownError. Everything else is reported by the handle.
  Handle allreduce_async(const AllreduceArgs& args);
  Handle allgather_async(const AllgatherArgs& args);
  Handle broadcast_async(const BroadcastArgs& args);
  Handle alltoall_async(const AlltoallArgs& args);
  Handle reducescatter_async(const ReducescatterArgs& args);
  Handle barrier_async(const BarrierArgs& args = {});

  /// Synchronous forms: submit and wait.
  void allreduce(const AllreduceArgs& args) { allreduce_async(args).wait(); }
  Handle allgather(const AllgatherArgs& args);
  void broadcast(const BroadcastArgs& args) { broadcast_async(args).wait(); }
  Handle alltoall(const AlltoallArgs& args);
  Handle reducescatter(const ReducescatterArgs& args);
  void barrier(const BarrierArgs& args = {}) { barrier_async(args).wait(); }

  /// Horovod's join: this rank has no more data. Until every rank has
  /// joined, allreduces that all other ranks submit complete with zeros
  /// from the joined ranks (Average still divides by size()), barriers
  /// complete with the joined ranks taking part, and any other operation
  /// fails with JoinedError on every rank, as in Horovod. Completes once
  /// every rank joined; returns the rank that joined last (join_async's
  /// handle: output() is that rank as an int32).
  int join();
  Handle join_async();

  /// Tells every rank to stop after the current cycle, fails whatever is
  /// still pending with ShutdownError and joins the thread. Idempotent; clean
  /// after a failure.
  void shutdown();

  /// Aborts the communicator (as a peer failure would): every pending and
  /// later operation here fails with hvd::IoError naming `reason`, and peers
  /// fail within the transport's detection time.
  void abort(const std::string& reason);

  /// The timeline (docs/collective.md, "Timeline"; Horovod's
  /// start_timeline/stop_timeline): rank 0 of the global set starts writing
  /// a Chrome-trace JSON file at `path` (truncated; an open timeline is
  /// closed first), with CYCLE_START marks when `mark_cycles`. Other ranks
  /// and process-set Contexts do nothing (rank 0 records every rank's
  /// negotiation). Throws hvd::IoError when the file cannot be created,
  /// hvd::InvalidArgument for an empty path. stop_timeline flushes and
  /// closes it (no-op when none is open).
  void start_timeline(const std::string& path, bool mark_cycles = false);
  void stop_timeline();
  /// Whether this Context is writing a timeline now.
  bool timeline_active() const;

  /// Process sets (docs/collective.md, "Process sets"): a sorted set of this
  /// job's ranks with its own communicator (a mesh of its own, formed
  /// through the store), negotiation, fusion buffer and response cache, so
  /// operations on different sets never wait for or mix with each other.
  /// Ops name a set by id in their Args (process_set); ranks and a
  /// broadcast root stay global ranks, alltoall splits and the order of
  /// allgather/reducescatter rows follow the set's ranks.
  ///
  /// add_process_set and remove_process_set are collective over every rank
  /// of this Context: every rank calls them with the same arguments and in
  /// the same order (checked: else hvd::InvalidArgument on every rank).
  /// Both need Settings::dynamic_process_sets. add returns the new id
  /// (Horovod's: the lowest freed id first, else the next unused one); it
  /// throws hvd::InvalidArgument for an empty set, a repeated or
  /// out-of-range rank, or ranks some registered set (the global one
  /// included) already has. remove throws hvd::InvalidArgument for id 0 or
  /// an unknown id; operations still pending on the set fail with
  /// ShutdownError.
  int32_t add_process_set(std::vector<int> ranks);
  void remove_process_set(int32_t id);
  /// Registered ids, ascending (0 first).
  std::vector<int32_t> process_set_ids() const;
  /// The set's global ranks, ascending. Unknown id: hvd::InvalidArgument.
  std::vector<int> process_set_ranks(int32_t id) const;
  bool process_set_included(int32_t id) const;
  /// This rank's index in the set; hvd::InvalidArgument if not a member.
  int process_set_rank(int32_t id) const;
  int process_set_size(int32_t id) const;

  /// Whether the communicator has failed (operations now throw IoError).
  bool failed() const;
  ContextStats stats() const;

  struct Impl;

 private:
  /// The one path every op entry point takes (context.cpp).
  struct Submission;
  Handle submit(std::shared_ptr<detail::OpState> op, const Submission& how);

  std::unique_ptr<Impl> impl_;
};

}  // namespace hvd::collective
