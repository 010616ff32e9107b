// DeviceExecutor (device_executor.h): device-buffer operations of the
// Context, built from the component's pieces -- DeviceFusionBuffer, NCCL
// (one GPU per rank, libnccl loadable everywhere), DeviceAllreducer (one
// host), StagedAllreducer (several hosts).
#include "device_executor.h"

#include "check.h"
#include "chunk_plan.h"
#include "kernels.h"

#include "hvd/store/memory_store.h"

#include <cuda_runtime.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <thread>

namespace hvd::collective::cuda::detail {

namespace {

/// What one device keeps between operations. Everything but the stream and
/// events is created at its first use.
struct PerDevice {
  int device = 0;
  cudaStream_t stream = nullptr;  // all of this rank's work on the device
  cudaEvent_t callers = nullptr;  // caller's stream -> stream
  cudaEvent_t h2d_done[2] = {nullptr, nullptr};
  void* pinned[2] = {nullptr, nullptr};  // broadcast staging, chunk_bytes each
  std::unique_ptr<DeviceFusionBuffer> fusion;
  std::unique_ptr<StagedAllreducer> staged;
  /// Set after a failure: teardown waits for the stream only for a bounded
  /// time, and leaves everything to process exit if it is stuck (work
  /// queued behind a dead local peer's event may never finish, and freeing
  /// memory it uses -- cudaFree synchronises -- could hang teardown).
  bool failed = false;

  explicit PerDevice(int d) : device(d) {
    DeviceGuard guard(device);
    HVD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    HVD_CUDA_CHECK(cudaEventCreateWithFlags(&callers, cudaEventDisableTiming));
    for (auto& ev : h2d_done) HVD_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  }
  ~PerDevice() {
    // Never throws: called on teardown, possibly after a CUDA failure.
    if (cudaSetDevice(device) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    if (stream && failed && !drained(stream, std::chrono::milliseconds(2000))) {
      spdlog::warn(
          "hvd: device work on CUDA device {} did not finish after the failure; its buffers are left to "
          "process exit",
          device);
      (void)staged.release();
      (void)fusion.release();
      cudaGetLastError();
      return;
    }
    if (stream) cudaStreamSynchronize(stream);
    staged.reset();
    fusion.reset();
    for (void* p : pinned) {
      if (p) cudaFreeHost(p);
    }
    for (cudaEvent_t ev : {callers, h2d_done[0], h2d_done[1]}) {
      if (ev) cudaEventDestroy(ev);
    }
    if (stream) cudaStreamDestroy(stream);
    cudaGetLastError();
  }
  PerDevice(const PerDevice&) = delete;
  PerDevice& operator=(const PerDevice&) = delete;

  /// Orders `stream` after the callers' work: after each tensor's ready
  /// event (recorded on the caller's stream when the operation was
  /// submitted), or, for a tensor without one, after everything queued on
  /// its stream so far.
  void after_callers(const std::vector<DeviceTensor>& tensors) {
    std::vector<CUstream_st*> seen;
    for (const DeviceTensor& t : tensors) {
      if (t.ready) {
        HVD_CUDA_CHECK(cudaStreamWaitEvent(stream, static_cast<cudaEvent_t>(t.ready), 0));
        continue;
      }
      if (std::find(seen.begin(), seen.end(), t.stream) != seen.end()) continue;
      seen.push_back(t.stream);
      // cudaStreamWaitEvent captures the event's current record, so one
      // event serves every caller stream in turn.
      HVD_CUDA_CHECK(cudaEventRecord(callers, static_cast<cudaStream_t>(t.stream)));
      HVD_CUDA_CHECK(cudaStreamWaitEvent(stream, callers, 0));
    }
  }

  /// Whether `s` finished its work within `bound` (polled; never throws).
  static bool drained(cudaStream_t s, std::chrono::milliseconds bound) {
    const auto deadline = std::chrono::steady_clock::now() + bound;
    for (;;) {
      const cudaError_t q = cudaStreamQuery(s);
      if (q == cudaSuccess) return true;
      if (q != cudaErrorNotReady) {
        cudaGetLastError();
        return false;
      }
      if (std::chrono::steady_clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
};

/// The GPU's UUID as hex: identical for every rank that uses this GPU.
std::string gpu_uuid(int device) {
  cudaDeviceProp prop{};
  HVD_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  std::string hex;
  for (unsigned char c : prop.uuid.bytes) hex += fmt::format("{:02x}", c);
  return hex;
}

/// In place on `stream`: data = data * prescale / divisor * postscale with
/// the reduce kernel's own rounding (one input), for what NCCL does not do.
void scale_in_place(void* data, std::size_t count, DataType dtype, double prescale, double postscale, int divisor,
                    cudaStream_t stream) {
  ReduceLaunch l;
  l.inputs[0] = data;
  l.num_inputs = 1;
  l.out = data;
  l.count = count;
  l.dtype = dtype;
  l.op = divisor > 1 ? ReduceOp::Average : ReduceOp::Sum;
  l.prescale = prescale;
  l.postscale = postscale;
  l.average_divisor = divisor;
  launch_reduce(l, stream);
}

/// Waits for `stream`, bounded by `timeout` (0: unbounded): polls (spinning briefly
/// first, as cudaStreamSynchronize would, then sleeping) so that work that
/// never finishes -- queued behind the event of a local peer that died, say
/// -- fails the operation with TimeoutError instead of hanging the
/// background thread; with an NCCL communicator, NCCL's asynchronous error
/// (a lost peer) ends the wait too.
void wait_stream(cudaStream_t stream, NcclComm* nccl, int device, std::chrono::milliseconds timeout) {
  const bool done = poll_until_done([&] { return cudaStreamQuery(stream); }, timeout,
                                    [&] {
                                      if (nccl) nccl->check_async();
                                    },
                                    "cudaStreamQuery");
  if (!done) {
    throw TimeoutError(
        fmt::format("hvd: device work on CUDA device {} did not finish within {} ms "
                    "(HVD_CUDA_WAIT_TIMEOUT): a local peer may have died, or the GPU hangs",
                    device, timeout.count()));
  }
}

/// UUIDs of the GPUs `mine` can access directly: itself and every device
/// this process sees with peer access (the intra-host path maps peers'
/// buffers through CUDA IPC with peer access).
std::vector<std::string> reachable_gpus(int mine) {
  std::vector<std::string> out;
  const int n = device_count();
  for (int d = 0; d < n; ++d) {
    int can = d == mine ? 1 : 0;
    if (d != mine) HVD_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, mine, d));
    if (can) out.push_back(gpu_uuid(d));
  }
  return out;
}

/// The job's choice for one list of every rank's device.
struct JobPath {
  DevicePathSetting setting = DevicePathSetting::Auto;
  /// Every rank's GPU can reach the others' (the intra-host path's need).
  bool peer_access = true;
  /// The hierarchical path's group of this rank (empty: not hierarchical).
  std::vector<int> cross_group;
  std::unique_ptr<NcclComm> nccl;  // null: our own paths
};

}  // namespace

struct DeviceExecutor::Impl {
  DeviceExecutorOptions options;
  std::shared_ptr<store::Store> store;
  store::InMemoryStore alone;  // a host of one rank exchanges nothing
  // std::map: iteration (and so teardown) order is identical on every rank.
  std::map<int, std::unique_ptr<PerDevice>> devices;
  std::map<std::vector<int32_t>, std::unique_ptr<DeviceAllreducer>> intra;
  uint64_t intra_created = 0;
  std::map<std::vector<int32_t>, std::unique_ptr<JobPath>> paths;
  uint64_t paths_created = 0;
  uint64_t nccl_created = 0;

  PerDevice& device(int d) {
    auto& slot = devices[d];
    if (!slot) {
      const int n = device_count();
      if (d < 0 || d >= n) {
        devices.erase(d);
        throw InvalidArgument(fmt::format("hvd: rank {} passed buffers on CUDA device {}, but {} device(s) are visible",
                                          options.job.rank, d, n));
      }
      if (devices.size() == 1) {
        // The first device of this (the background) thread becomes its
        // current device for good: device guards then switch nothing, and
        // never make a context on device 0 by restoring the thread's
        // default.
        HVD_CUDA_CHECK(cudaSetDevice(d));
      }
      slot = std::make_unique<PerDevice>(d);
    }
    return *slot;
  }

  DeviceAllreducer& intra_host(const std::vector<int32_t>& all_devices) {
    auto& slot = intra[all_devices];
    if (!slot) {
      const JobShape& job = options.job;
      if (job.local_size > 1 && !store) {
        intra.erase(all_devices);
        throw InvalidArgument("hvd: a device allreduce across local ranks needs the job's rendezvous store");
      }
      DeviceAllreducerOptions o;
      o.local_rank = job.local_rank;
      o.local_size = job.local_size;
      o.device = all_devices[job.rank];
      o.prefix = intra_host_prefix(options.comm_prefix, job.cross_rank, intra_created++);
      o.chunk_bytes = options.chunk_bytes;
      o.slots = options.slots;
      o.timeout = options.timeout;
      try {
        slot = std::make_unique<DeviceAllreducer>(job.local_size > 1 ? *store : alone, o);
      } catch (...) {
        intra.erase(all_devices);
        throw;
      }
      spdlog::debug("hvd[{}]: device allreducer {} on device {} ({} local ranks)", job.rank, o.prefix, o.device,
                    o.local_size);
    }
    return *slot;
  }

  /// Collective (every rank, same order): every rank's GPU, NCCL and
  /// setting go through the store once per device list, and every rank
  /// takes the same decision from them (nccl.h, choose_nccl).
  JobPath& path_for(const std::vector<int32_t>& all_devices, int dev) {
    auto& slot = paths[all_devices];
    if (slot) return *slot;
    auto p = std::make_unique<JobPath>();
    p->setting = options.path;
    const JobShape& job = options.job;
    try {
      if (job.size > 1) {
        if (!store) throw InvalidArgument("hvd: a device operation across ranks needs the job's rendezvous store");
        const NcclLibrary& lib = NcclLibrary::get();
        NcclRankInfo mine;
        mine.gpu = gpu_uuid(dev);
        mine.available = lib.available();
        mine.version = lib.version_code();
        mine.reason = lib.unavailable();
        mine.setting = options.path;
        mine.reachable = reachable_gpus(dev);
        mine.place = {job.local_rank, job.local_size, job.cross_rank};
        const std::string prefix = fmt::format("{}cuda/path/{}/", options.comm_prefix, paths_created++);
        const auto all = exchange_nccl_info(*store, prefix, job.rank, job.size, mine, options.timeout);
        p->setting = all[0].setting;
        std::string no_peer;
        p->peer_access = all_peer_access(all, &no_peer);
        if (!p->peer_access && job.rank == 0) {
          spdlog::info("hvd: device allreduces without NCCL take the staged path: {}", no_peer);
        }
        if (p->setting == DevicePathSetting::Hierarchical && p->peer_access && job.cross_size > 1) {
          std::vector<RankPlace> places;
          for (const auto& r : all) places.push_back(r.place);
          std::string why_not;
          p->cross_group = cross_group(places, job.rank, &why_not);
          if (job.rank == 0) {
            if (p->cross_group.empty()) {
              spdlog::warn("hvd: HVD_CUDA_ALLREDUCE_PATH=hierarchical: device allreduces take the staged path: {}",
                           why_not);
            } else {
              spdlog::info("hvd: device allreduces are hierarchical: {} hosts of {} ranks", job.size / job.local_size,
                           job.local_size);
            }
          }
        }
        std::string why;
        if (choose_nccl(all, &why)) {
          p->nccl = std::make_unique<NcclComm>(lib, *store, prefix, job.rank, job.size, options.timeout);
          ++nccl_created;
          if (job.rank == 0) spdlog::info("hvd: device operations use NCCL {} ({} ranks)", lib.version(), job.size);
        } else if (job.rank == 0) {
          spdlog::debug("hvd: device operations do not use NCCL: {}", why);
        }
      }
    } catch (...) {
      paths.erase(all_devices);
      throw;
    }
    slot = std::move(p);
    return *slot;
  }

  void abort() noexcept {
    for (auto& [d, pd] : devices) pd->failed = true;
    for (auto& [key, ar] : intra) ar->abort();
    for (auto& [key, p] : paths) {
      if (p->nccl) p->nccl->abort();
    }
  }

  void release() noexcept {
    // Intra-host allreducers first (their teardown waits for local peers,
    // who release theirs in the same order), then NCCL communicators (an
    // aborted one cancels its kernels, which the per-device teardown would
    // otherwise wait for), then the per-device objects.
    while (!intra.empty()) intra.erase(intra.begin());
    while (!paths.empty()) paths.erase(paths.begin());
    while (!devices.empty()) devices.erase(devices.begin());
  }
};

DeviceExecutor::DeviceExecutor(std::shared_ptr<store::Store> store, const DeviceExecutorOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->options = options;
  impl_->store = std::move(store);
}

DeviceExecutor::~DeviceExecutor() { impl_->release(); }

void DeviceExecutor::abort() noexcept { impl_->abort(); }

std::size_t DeviceExecutor::intra_host_created() const { return impl_->intra_created; }

std::size_t DeviceExecutor::nccl_created() const { return impl_->nccl_created; }

void DeviceExecutor::allreduce(const std::vector<int32_t>& devices, const std::vector<DeviceTensor>& mine,
                               DataType dtype, ReduceOp op, double prescale, double postscale,
                               const HostAllreduce& network, const GroupHostAllreduce& group_network) {
  auto& im = *impl_;
  const JobShape& job = im.options.job;
  check_devices(devices, job);
  std::size_t total = 0;
  for (const auto& t : mine) total += t.bytes;
  if (mine.empty() || total == 0) return;  // same on every rank: nothing to agree on
  const std::size_t esize = element_size(dtype);
  const int dev = devices[job.rank];
  PerDevice& pd = im.device(dev);
  DeviceGuard guard(dev);
  pd.after_callers(mine);

  // 1. The data to reduce in place: the output, or the fused region.
  void* data = nullptr;
  std::size_t bytes = 0;
  const bool fused = mine.size() > 1;
  std::vector<DeviceFusionBuffer::Tensor> outputs;
  if (!fused) {
    const DeviceTensor& t = mine[0];
    if (t.input != t.output) {
      HVD_CUDA_CHECK(cudaMemcpyAsync(t.output, t.input, t.bytes, cudaMemcpyDeviceToDevice, pd.stream));
    }
    data = t.output;
    bytes = t.bytes;
  } else {
    if (!pd.fusion) pd.fusion = std::make_unique<DeviceFusionBuffer>(dev, im.options.fusion_threshold);
    std::vector<DeviceFusionBuffer::Tensor> inputs;
    for (const auto& t : mine) {
      inputs.push_back({const_cast<void*>(t.input), t.bytes});
      outputs.push_back({t.output, t.bytes});
    }
    data = pd.fusion->pack(inputs, pd.stream, bytes);
  }
  HVD_ENFORCE(bytes % esize == 0, "device allreduce of {} bytes is not whole {}-byte elements", bytes, esize);

  // 2. The reduction.
  JobPath& path = im.path_for(devices, dev);
  const std::size_t count = bytes / esize;
  if (path.nccl && nccl_reduces(dtype)) {
    // NCCL reduces; scaling and Average's division are our kernel's, so
    // results round like the other paths.
    if (prescale != 1.0) scale_in_place(data, count, dtype, prescale, 1.0, 1, pd.stream);
    path.nccl->allreduce(data, data, count, dtype, op, pd.stream);
    const int divisor = op == ReduceOp::Average ? job.size : 1;
    if (postscale != 1.0 || divisor > 1) scale_in_place(data, count, dtype, 1.0, postscale, divisor, pd.stream);
  } else
    switch (path.setting == DevicePathSetting::Staged || !path.peer_access ? AllreducePath::Staged
            : !path.cross_group.empty()                                    ? AllreducePath::Hierarchical
                                                                           : choose_allreduce_path(job)) {
      case AllreducePath::IntraHost:
        im.intra_host(devices).allreduce(data, bytes / esize, dtype, op, pd.stream, prescale, postscale);
        break;
      case AllreducePath::Staged:
        if (!pd.staged) {
          pd.staged = std::make_unique<StagedAllreducer>(
              StagedAllreducerOptions{dev, im.options.chunk_bytes, im.options.wait_timeout});
        }
        pd.staged->allreduce(data, bytes / esize, dtype, pd.stream, network);
        break;
      case AllreducePath::Hierarchical: {
        // 1. Within the host: every local rank gets the host's result (Sum
        //    for Average; prescale applied once, here).
        const ReduceOp leg = op == ReduceOp::Average ? ReduceOp::Sum : op;
        DeviceAllreducer& host = im.intra_host(devices);
        host.allreduce(data, count, dtype, leg, pd.stream, prescale, 1.0);
        // 2. Across hosts: local rank l carries slice l, among the ranks of
        //    its local rank (same slice on each), through pinned memory.
        const auto [first, last] =
            hierarchical_slice(count, job.local_rank, job.local_size, std::max<std::size_t>(1, 16 / esize));
        auto* base = static_cast<uint8_t*>(data);
        if (last > first) {
          if (!pd.staged) {
            pd.staged = std::make_unique<StagedAllreducer>(
                StagedAllreducerOptions{dev, im.options.chunk_bytes, im.options.wait_timeout});
          }
          pd.staged->allreduce(base + first * esize, last - first, dtype, pd.stream,
                               [&](void* h, std::size_t c) { group_network(h, c, leg, path.cross_group); });
        }
        // 3. Every slice to every local rank: zero the rest of mine and sum
        //    within the host again (x + 0 is exact for every dtype).
        if (first > 0) HVD_CUDA_CHECK(cudaMemsetAsync(base, 0, first * esize, pd.stream));
        if (last < count) HVD_CUDA_CHECK(cudaMemsetAsync(base + last * esize, 0, (count - last) * esize, pd.stream));
        host.allreduce(data, count, dtype, ReduceOp::Sum, pd.stream, 1.0, 1.0);
        // 4. Average's division by the job size, and postscale.
        const int divisor = op == ReduceOp::Average ? job.size : 1;
        if (postscale != 1.0 || divisor > 1) scale_in_place(data, count, dtype, 1.0, postscale, divisor, pd.stream);
        break;
      }
    }

  // 3. Results out, then complete: the handle finishes after this returns.
  if (fused) pd.fusion->unpack(outputs, pd.stream);
  wait_stream(pd.stream, path.nccl.get(), dev, im.options.wait_timeout);
}

void DeviceExecutor::broadcast(const std::vector<int32_t>& devices, const DeviceTensor& t, int root,
                               const HostBroadcast& network) {
  auto& im = *impl_;
  const JobShape& job = im.options.job;
  check_devices(devices, job);
  if (root < 0 || root >= job.size) throw InvalidArgument(fmt::format("device broadcast from root {}", root));
  if (t.bytes == 0) return;
  const int device = devices[job.rank];
  const bool is_root = job.rank == root;
  PerDevice& pd = im.device(device);
  DeviceGuard guard(device);
  pd.after_callers({t});
  JobPath& path = im.path_for(devices, device);
  if (path.nccl) {
    // NCCL copies the root's input to every output (the root's too).
    path.nccl->broadcast(t.input ? t.input : t.output, t.output, t.bytes, root, pd.stream);
    wait_stream(pd.stream, path.nccl.get(), device, im.options.wait_timeout);
    return;
  }
  const std::size_t chunk = std::max<std::size_t>(256, im.options.chunk_bytes / 256 * 256);
  for (void*& p : pd.pinned) {
    if (!p) HVD_CUDA_CHECK(cudaHostAlloc(&p, chunk, cudaHostAllocPortable));
  }
  // The root may broadcast its output in place (input null).
  auto* in = static_cast<const uint8_t*>(t.input ? t.input : t.output);
  auto* out = static_cast<uint8_t*>(t.output);
  if (is_root && in != t.output) {
    HVD_CUDA_CHECK(cudaMemcpyAsync(out, in, t.bytes, cudaMemcpyDeviceToDevice, pd.stream));
  }
  // Two pinned chunks: a non-root's copy back of chunk k overlaps the
  // network broadcast of chunk k+1; a chunk is overwritten only after its
  // previous copy back finished.
  const auto chunks = plan_chunks(t.bytes, 1, chunk, 256);
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    const Chunk& c = chunks[k];
    const int slot = static_cast<int>(k % 2);
    auto* host = static_cast<uint8_t*>(pd.pinned[slot]);
    if (k >= 2 && !is_root) HVD_CUDA_CHECK(cudaEventSynchronize(pd.h2d_done[slot]));
    if (is_root) {
      HVD_CUDA_CHECK(cudaMemcpyAsync(host, in + c.offset, c.bytes, cudaMemcpyDeviceToHost, pd.stream));
      wait_stream(pd.stream, nullptr, device, im.options.wait_timeout);
    }
    network(host, c.bytes);
    if (!is_root) {
      HVD_CUDA_CHECK(cudaMemcpyAsync(out + c.offset, host, c.bytes, cudaMemcpyHostToDevice, pd.stream));
      HVD_CUDA_CHECK(cudaEventRecord(pd.h2d_done[slot], pd.stream));
    }
  }
  wait_stream(pd.stream, nullptr, device, im.options.wait_timeout);
}

void DeviceExecutor::to_host(int device, const DeviceTensor& t, void* dst) {
  PerDevice& pd = impl_->device(device);
  DeviceGuard guard(device);
  pd.after_callers({t});
  if (t.bytes > 0) HVD_CUDA_CHECK(cudaMemcpyAsync(dst, t.input, t.bytes, cudaMemcpyDeviceToHost, pd.stream));
  wait_stream(pd.stream, nullptr, device, impl_->options.wait_timeout);
}

void DeviceExecutor::to_device(int device, const void* src, void* dst, std::size_t bytes, CUevent_st* after) {
  PerDevice& pd = impl_->device(device);
  DeviceGuard guard(device);
  if (after) HVD_CUDA_CHECK(cudaStreamWaitEvent(pd.stream, static_cast<cudaEvent_t>(after), 0));
  if (bytes > 0) HVD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, pd.stream));
  wait_stream(pd.stream, nullptr, device, impl_->options.wait_timeout);
}

void check_visible_device(int device) {
  const int n = device_count();
  if (device < 0 || device >= n) {
    throw InvalidArgument(
        fmt::format("hvd: buffers on CUDA device {}, but {} device(s) are visible to this process", device, n));
  }
}

namespace {
/// Ready events kept for reuse, per device: record_ready_event is on every
/// device operation's submit path, so an event is created once, not per
/// call, and given back (no CUDA call, on whatever thread drops the handle)
/// when the operation's state goes. Re-recording a given-back event is safe:
/// the internal stream's wait on its previous record was enqueued before
/// the operation completed. Never destroyed (handles may outlive statics).
struct ReadyEventPool {
  std::mutex mu;
  std::map<int, std::vector<cudaEvent_t>> free;
  static ReadyEventPool& get() {
    static auto* pool = new ReadyEventPool;
    return *pool;
  }
};
}  // namespace

std::shared_ptr<CUevent_st> record_ready_event(int device, CUstream_st* stream) {
  check_visible_device(device);
  DeviceGuard guard(device);  // a null stream means this device's legacy stream
  ReadyEventPool& pool = ReadyEventPool::get();
  cudaEvent_t ev = nullptr;
  {
    std::lock_guard<std::mutex> lock(pool.mu);
    auto& free = pool.free[device];
    if (!free.empty()) {
      ev = free.back();
      free.pop_back();
    }
  }
  if (!ev) HVD_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  std::shared_ptr<CUevent_st> owned(ev, [device](CUevent_st* e) {
    ReadyEventPool& p = ReadyEventPool::get();
    std::lock_guard<std::mutex> lock(p.mu);
    p.free[device].push_back(e);
  });
  HVD_CUDA_CHECK(cudaEventRecord(ev, static_cast<cudaStream_t>(stream)));
  return owned;
}

void DeviceExecutor::with_device(int device, const std::function<void()>& fn) {
  impl_->device(device);  // checks the device; makes it current for good on first use
  DeviceGuard guard(device);
  fn();
}

std::shared_ptr<void> allocate_device_memory(int device, std::size_t bytes) {
  DeviceGuard guard(device);
  void* p = nullptr;
  HVD_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(bytes, 1)));
  return std::shared_ptr<void>(p, [device](void* q) {
    // Never throws; may run on any thread, with any device current.
    int current = 0;
    const bool restore = cudaGetDevice(&current) == cudaSuccess;
    if (cudaSetDevice(device) == cudaSuccess) cudaFree(q);
    if (restore) cudaSetDevice(current);
    cudaGetLastError();
  });
}

}  // namespace hvd::collective::cuda::detail
