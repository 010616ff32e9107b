// Intra-host device allreduce through CUDA IPC (see DeviceAllreducer in
// hvd/collective/cuda.h and docs/cuda.md). The per-step protocol lives in
// pipeline.cpp (tested without a GPU); this file supplies the CUDA device:
// an exchange buffer of `slots` slots per local rank, a "ready" and a "done"
// interprocess event per slot, an internal copy stream (copy-in of chunk k+1
// overlaps the reduction of chunk k on the caller's stream).
#include "check.h"
#include "chunk_plan.h"
#include "control_block.h"
#include "ipc_record.h"
#include "kernels.h"
#include "pipeline.h"

#include "hvd/common/env.h"
#include "hvd/common/io.h"

#include <cuda_runtime.h>
#include <spdlog/spdlog.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>
#include <thread>

namespace hvd::collective::cuda {

namespace {

using detail::ControlBlock;
using detail::Counter;
using detail::DeviceGuard;
using detail::IpcHandle;

static_assert(sizeof(cudaIpcMemHandle_t) == detail::kIpcHandleBytes, "cudaIpcMemHandle_t size changed");
static_assert(sizeof(cudaIpcEventHandle_t) == detail::kIpcHandleBytes, "cudaIpcEventHandle_t size changed");

/// Published as `done` once a rank has closed its mappings of every peer.
constexpr uint64_t kClosed = std::numeric_limits<uint64_t>::max();
constexpr std::size_t kAlign = 256;

/// Waits for `ev` like cudaEventSynchronize, but gives up at `deadline`
/// (a dead peer's work may never complete). Returns whether it completed.
bool wait_event(cudaEvent_t ev, const Deadline& deadline) {
  for (;;) {
    const cudaError_t e = cudaEventQuery(ev);
    if (e != cudaErrorNotReady) {
      cudaGetLastError();
      return e == cudaSuccess;
    }
    if (deadline.expired()) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

/// Waits on the host for `ev` (a local peer's IPC event, its record already
/// enqueued): polls without sleeping for about 50 us (a peer's step is
/// usually that close), then every 10 us, until `deadline`, or until the
/// control block says a rank aborted (hvd::IoError).
void host_wait_event(cudaEvent_t ev, const detail::ControlBlock& control, const Deadline& deadline, int peer) {
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
  for (uint64_t i = 0;; ++i) {
    const cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) HVD_CUDA_CHECK(e);
    control.check_abort();
    if (deadline.expired()) {
      throw TimeoutError(fmt::format("the device work of local rank {} did not finish in time", peer));
    }
    if (std::chrono::steady_clock::now() < spin_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(10));
    }
  }
}

/// Control block flag: HVD_CUDA_SHARED_GPU=leader on local rank 0.
constexpr uint32_t kFlagLeader = 1;

/// What a rank tells the leader about its buffer for one call (mailbox).
struct LeaderRequest {
  IpcHandle handle;      // of the allocation holding the buffer
  uint64_t offset = 0;   // of the buffer in that allocation
  uint64_t bytes = 0;    // of the tensor (must equal the leader's)
};
static_assert(sizeof(LeaderRequest) <= detail::ControlBlock::kMailboxBytes, "leader request too large");

/// The allocation holding `p` (base and size), through the driver API that
/// the runtime has loaded (the runtime has no such query).
std::pair<uint8_t*, std::size_t> allocation_of(const void* p) {
  using Fn = int (*)(unsigned long long*, std::size_t*, unsigned long long);
  static Fn fn = [] {
    void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!lib) lib = ::dlopen("libcuda.so.1", RTLD_NOW);
    return lib ? reinterpret_cast<Fn>(::dlsym(lib, "cuMemGetAddressRange_v2")) : nullptr;
  }();
  if (!fn) throw CudaError("cuMemGetAddressRange_v2 is not in libcuda.so.1 (HVD_CUDA_SHARED_GPU=leader needs it)", 0);
  unsigned long long base = 0;
  std::size_t size = 0;
  const int rc = fn(&base, &size, reinterpret_cast<unsigned long long>(p));
  if (rc != 0) throw CudaError(fmt::format("cuMemGetAddressRange of a device buffer failed (CUresult {})", rc), rc);
  return {reinterpret_cast<uint8_t*>(base), size};
}

template <class H>
IpcHandle to_bytes(const H& h) {
  IpcHandle out{};
  std::memcpy(out.data(), &h, sizeof(h));
  return out;
}
template <class H>
H from_bytes(const IpcHandle& b) {
  H h;
  std::memcpy(&h, b.data(), sizeof(h));
  return h;
}

}  // namespace

struct DeviceAllreducer::Impl {
  DeviceAllreducerOptions options;
  std::size_t slot_bytes = 0;
  bool broken = false;
  uint64_t seq = 0;  // last step of the last completed call
  // Highest step whose device work was (even partly) enqueued; exceeds seq
  // after a call that failed part-way. Teardown must not free or unmap while
  // such work may still wait on a (possibly dead) peer's events.
  uint64_t issued = 0;

  cudaStream_t copy_stream = nullptr;
  cudaEvent_t start_event = nullptr;
  void* buffer = nullptr;  // mine: slots * slot_bytes
  // Per local rank (mine included): the exchange buffer as mapped here and
  // its events (my own, or opened from IPC handles).
  std::vector<uint8_t*> buffers;
  std::vector<std::vector<cudaEvent_t>> ready;
  std::vector<std::vector<cudaEvent_t>> done;
  std::optional<ControlBlock> control;
  /// Wait::Host in effect (resolved at setup): peers' events are waited on
  /// by this thread, not by the streams.
  bool host_waits = false;
  /// HVD_CUDA_SHARED_GPU=leader in effect (rank 0's choice, every local rank
  /// on one GPU): local rank 0 does all of each allreduce's GPU work on the
  /// other ranks' buffers, mapped through cached IPC handles (run_leader).
  bool leader_mode = false;
  struct Mapping {
    IpcHandle handle{};
    uint8_t* base = nullptr;
    uint64_t last_use = 0;
  };
  /// Leader only, per local rank: peers' allocations mapped here, at most
  /// kMaxMappings each (least recently used closed first).
  std::vector<std::vector<Mapping>> mappings;
  uint64_t mapping_clock = 0;
  static constexpr std::size_t kMaxMappings = 32;

  int me() const { return options.local_rank; }
  int n() const { return options.local_size; }

  void setup(store::Store& store);
  void run_leader(uint8_t* data, std::size_t count, DataType dtype, ReduceOp op, cudaStream_t stream,
                  double prescale, double postscale);
  uint8_t* map_peer(int peer, const IpcHandle& handle, cudaStream_t stream);
  void run(uint8_t* data, std::size_t count, DataType dtype, ReduceOp op, cudaStream_t stream, double prescale,
           double postscale);
  void teardown() noexcept;
};

void DeviceAllreducer::Impl::setup(store::Store& store) {
  const int slots = options.slots;
  HVD_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
  HVD_CUDA_CHECK(cudaEventCreateWithFlags(&start_event, cudaEventDisableTiming));
  HVD_CUDA_CHECK(cudaMalloc(&buffer, slot_bytes * static_cast<std::size_t>(slots)));

  detail::IpcRecord mine;
  mine.local_rank = me();
  mine.device = options.device;
  mine.pid = static_cast<int32_t>(::getpid());
  cudaDeviceProp prop{};
  HVD_CUDA_CHECK(cudaGetDeviceProperties(&prop, options.device));
  std::memcpy(mine.device_uuid.data(), &prop.uuid, std::min(sizeof(prop.uuid), mine.device_uuid.size()));
  cudaIpcMemHandle_t mh;
  HVD_CUDA_CHECK(cudaIpcGetMemHandle(&mh, buffer));
  mine.buffer = to_bytes(mh);
  mine.slot_bytes = slot_bytes;
  mine.slots = slots;

  buffers.assign(n(), nullptr);
  ready.assign(n(), std::vector<cudaEvent_t>(slots, nullptr));
  done.assign(n(), std::vector<cudaEvent_t>(slots, nullptr));
  buffers[me()] = static_cast<uint8_t*>(buffer);
  for (int s = 0; s < slots; ++s) {
    for (auto* list : {&ready, &done}) {
      cudaEvent_t ev;
      HVD_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming | cudaEventInterprocess));
      (*list)[me()][s] = ev;
      cudaIpcEventHandle_t eh;
      HVD_CUDA_CHECK(cudaIpcGetEventHandle(&eh, ev));
      (list == &ready ? mine.ready_events : mine.done_events).push_back(to_bytes(eh));
    }
  }
  const std::string shared_gpu = env::get_or("HVD_CUDA_SHARED_GPU", "each");
  if (shared_gpu != "each" && shared_gpu != "leader") {
    throw InvalidArgument(fmt::format("HVD_CUDA_SHARED_GPU={}: expected each or leader", shared_gpu));
  }
  if (me() == 0) {
    control.emplace(ControlBlock::create(ControlBlock::make_name(), n()));
    control->set_flags(shared_gpu == "leader" ? kFlagLeader : 0);  // rank 0's choice, before anyone attaches
    mine.control_name = control->name();
  }
  detail::publish_ipc_record(store, options.prefix, mine);
  const auto records = detail::gather_ipc_records(store, options.prefix, mine, n(), options.timeout);
  if (me() != 0) control.emplace(ControlBlock::open(records[0].control_name, n()));
  control->attach();

  for (int p = 0; p < n(); ++p) {
    if (p == me()) continue;
    void* mapped = nullptr;
    const auto what =
        fmt::format("cudaIpcOpenMemHandle(local rank {} exchange buffer, its device {})", p, records[p].device);
    detail::check(cudaIpcOpenMemHandle(&mapped, from_bytes<cudaIpcMemHandle_t>(records[p].buffer),
                                       cudaIpcMemLazyEnablePeerAccess),
                  what.c_str());
    buffers[p] = static_cast<uint8_t*>(mapped);
    for (int s = 0; s < slots; ++s) {
      HVD_CUDA_CHECK(
          cudaIpcOpenEventHandle(&ready[p][s], from_bytes<cudaIpcEventHandle_t>(records[p].ready_events[s])));
      HVD_CUDA_CHECK(cudaIpcOpenEventHandle(&done[p][s], from_bytes<cudaIpcEventHandle_t>(records[p].done_events[s])));
    }
  }
  DeviceAllreducerOptions::Wait wait = options.wait;
  if (auto v = env::get("HVD_CUDA_IPC_WAIT")) {
    if (*v == "host") {
      wait = DeviceAllreducerOptions::Wait::Host;
    } else if (*v == "device") {
      wait = DeviceAllreducerOptions::Wait::Device;
    } else {
      throw InvalidArgument(fmt::format("HVD_CUDA_IPC_WAIT={}: expected device or host", *v));
    }
  }
  host_waits = wait == DeviceAllreducerOptions::Wait::Host;
  bool one_gpu = true;
  for (int p = 0; p < n(); ++p) one_gpu &= records[p].device_uuid == records[0].device_uuid;
  leader_mode = (control->flags() & kFlagLeader) != 0 && one_gpu;
  if (leader_mode) mappings.assign(n(), {});
  if (me() == 0 && (control->flags() & kFlagLeader) && !one_gpu) {
    spdlog::info("device allreducer: HVD_CUDA_SHARED_GPU=leader ignored: the local ranks are on different GPUs");
  }
  if (me() == 0) {
    // Once everyone has mapped the control block its name can go: nothing
    // is left in /dev/shm even if a rank is killed later.
    control->wait_attached(Deadline::after(options.timeout));
    control->unlink();
  }
  spdlog::debug("device allreducer: local rank {}/{} on device {} ready ({} slots of {} bytes, {} waits{})", me(), n(),
                options.device, slots, slot_bytes, host_waits ? "host" : "device",
                leader_mode ? ", local rank 0 does the GPU work" : "");
}

namespace {

/// The CUDA side of one allreduce call (see pipeline.h for the protocol).
class CudaPipelineDevice final : public detail::PipelineDevice {
 public:
  CudaPipelineDevice(DeviceAllreducer::Impl& im, uint8_t* data, DataType dtype, ReduceOp op, cudaStream_t stream,
                     double prescale, double postscale, const Deadline& deadline)
      : im_(im), data_(data), stream_(stream), deadline_(deadline) {
    esize_ = detail::element_size(dtype);
    launch_.num_inputs = im.n();
    launch_.dtype = dtype;
    launch_.op = op;
    launch_.prescale = prescale;
    launch_.postscale = postscale;
    launch_.average_divisor = im.n();
  }
  void begin() override {
    HVD_CUDA_CHECK(cudaEventRecord(im_.start_event, stream_));
    HVD_CUDA_CHECK(cudaStreamWaitEvent(im_.copy_stream, im_.start_event, 0));
  }
  void copy_wait_done(int rank, int slot) override {
    if (im_.host_waits && rank != im_.me()) {
      host_wait_event(im_.done[rank][slot], *im_.control, deadline_, rank);
    } else {
      HVD_CUDA_CHECK(cudaStreamWaitEvent(im_.copy_stream, im_.done[rank][slot], 0));
    }
  }
  void copy_in(const detail::Chunk& chunk, int slot) override {
    HVD_CUDA_CHECK(cudaMemcpyAsync(slot_ptr(im_.me(), slot), data_ + chunk.offset, chunk.bytes,
                                   cudaMemcpyDeviceToDevice, im_.copy_stream));
    HVD_CUDA_CHECK(cudaEventRecord(im_.ready[im_.me()][slot], im_.copy_stream));
  }
  void reduce_wait_ready(int rank, int slot) override {
    if (im_.host_waits && rank != im_.me()) {
      host_wait_event(im_.ready[rank][slot], *im_.control, deadline_, rank);
    } else {
      HVD_CUDA_CHECK(cudaStreamWaitEvent(stream_, im_.ready[rank][slot], 0));
    }
  }
  void reduce_out(const detail::Chunk& chunk, int slot) override {
    // Local-rank order: every rank computes bit-identical results.
    for (int p = 0; p < im_.n(); ++p) launch_.inputs[p] = slot_ptr(p, slot);
    launch_.out = data_ + chunk.offset;
    launch_.count = chunk.bytes / esize_;
    detail::launch_reduce(launch_, stream_);
    HVD_CUDA_CHECK(cudaEventRecord(im_.done[im_.me()][slot], stream_));
  }

 private:
  uint8_t* slot_ptr(int rank, int slot) const {
    return im_.buffers[rank] + static_cast<std::size_t>(slot) * im_.slot_bytes;
  }
  DeviceAllreducer::Impl& im_;
  uint8_t* data_;
  cudaStream_t stream_;
  Deadline deadline_;
  std::size_t esize_ = 1;
  detail::ReduceLaunch launch_;
};

}  // namespace

void DeviceAllreducer::Impl::run(uint8_t* data, std::size_t count, DataType dtype, ReduceOp op, cudaStream_t stream,
                                 double prescale, double postscale) {
  const std::size_t esize = detail::element_size(dtype);
  const auto chunks = detail::plan_chunks(count * esize, esize, slot_bytes, kAlign);
  const auto steps = detail::plan_steps(seq + 1, chunks, options.slots);
  const Deadline deadline = Deadline::after(options.timeout);
  CudaPipelineDevice device(*this, data, dtype, op, stream, prescale, postscale, deadline);
  detail::run_pipeline(*control, me(), steps, device, deadline, &issued);
  if (!steps.empty()) seq = steps.back().seq;
}

uint8_t* DeviceAllreducer::Impl::map_peer(int peer, const IpcHandle& handle, cudaStream_t stream) {
  auto& list = mappings[peer];
  for (auto& m : list) {
    if (m.handle == handle) {
      m.last_use = ++mapping_clock;
      return m.base;
    }
  }
  if (list.size() >= kMaxMappings) {
    // Close the least recently used: my queued work may still read it.
    auto lru = std::min_element(list.begin(), list.end(),
                                [](const Mapping& a, const Mapping& b) { return a.last_use < b.last_use; });
    HVD_CUDA_CHECK(cudaStreamSynchronize(stream));
    cudaIpcCloseMemHandle(lru->base);
    list.erase(lru);
  }
  void* mapped = nullptr;
  cudaError_t rc = cudaIpcOpenMemHandle(&mapped, from_bytes<cudaIpcMemHandle_t>(handle), cudaIpcMemLazyEnablePeerAccess);
  if (rc == cudaErrorAlreadyMapped) {
    // The peer freed a buffer and allocated another in memory one of my
    // mappings still covers (cudaMalloc sub-allocates small buffers from
    // larger driver allocations), under a new handle: drop this peer's
    // mappings, once my queued work no longer reads them, and open again.
    cudaGetLastError();
    HVD_CUDA_CHECK(cudaStreamSynchronize(stream));
    for (auto& m : list) cudaIpcCloseMemHandle(m.base);
    list.clear();
    rc = cudaIpcOpenMemHandle(&mapped, from_bytes<cudaIpcMemHandle_t>(handle), cudaIpcMemLazyEnablePeerAccess);
  }
  const auto what = fmt::format("cudaIpcOpenMemHandle(a buffer of local rank {})", peer);
  detail::check(rc, what.c_str());
  list.push_back({handle, static_cast<uint8_t*>(mapped), ++mapping_clock});
  return list.back().base;
}

// HVD_CUDA_SHARED_GPU=leader: every local rank is on one GPU, where each
// process's CUDA context gets the GPU only in time slices; an allreduce in
// which every rank queues GPU work pays those slices at every step. Here only
// local rank 0 (the leader) queues GPU work:
//  * a rank r > 0 waits on the host for its caller's stream (its input is
//    written), tells the leader where its buffer is (the IPC handle of the
//    allocation and the offset, in its mailbox) and publishes Ready;
//  * the leader waits for every Ready, maps the buffers (cached), and in one
//    kernel on its caller's stream reduces every rank's buffer (local-rank
//    order) and writes the result into its own and every other rank's
//    buffer (each buffer read once and written once: 2n buffers of traffic,
//    where a reduce then n-1 copies moved 3n-1), records its done event and
//    publishes Done;
//  * a rank r > 0 waits for the leader's Done and then, on the host, for
//    its done event: the result is in its buffer, and it publishes Done.
// One step per call: seq counts calls.
void DeviceAllreducer::Impl::run_leader(uint8_t* data, std::size_t count, DataType dtype, ReduceOp op,
                                        cudaStream_t stream, double prescale, double postscale) {
  const std::size_t bytes = count * detail::element_size(dtype);
  const uint64_t step = seq + 1;
  const Deadline deadline = Deadline::after(options.timeout);
  if (me() != 0) {
    // The caller's work on my input is done: an event recorded on its stream
    // (a blocking stream's record also follows the legacy stream's work,
    // which a synchronize of an empty stream would not wait for).
    HVD_CUDA_CHECK(cudaEventRecord(start_event, stream));
    HVD_CUDA_CHECK(cudaEventSynchronize(start_event));
    const auto [base, size] = allocation_of(data);
    cudaIpcMemHandle_t h;
    HVD_CUDA_CHECK(cudaIpcGetMemHandle(&h, base));
    LeaderRequest req;
    req.handle = to_bytes(h);
    req.offset = static_cast<uint64_t>(data - base);
    req.bytes = bytes;
    control->put_mailbox(me(), &req, sizeof req);
    control->publish(me(), Counter::Ready, step);
    control->wait_at_least(0, Counter::Done, step, deadline);
    host_wait_event(done[0][0], *control, deadline, 0);
    control->publish(me(), Counter::Done, step);
    seq = step;
    return;
  }
  detail::ReduceLaunch launch;
  launch.num_inputs = n();
  launch.dtype = dtype;
  launch.op = op;
  launch.prescale = prescale;
  launch.postscale = postscale;
  launch.average_divisor = n();
  launch.inputs[0] = data;
  launch.out = data;
  launch.count = count;
  for (int p = 1; p < n(); ++p) {
    control->wait_at_least(p, Counter::Ready, step, deadline);
    LeaderRequest req;
    control->get_mailbox(p, &req, sizeof req);
    if (req.bytes != bytes) {
      throw InvalidArgument(fmt::format("device allreduce: local rank {} passed {} bytes, local rank 0 {}", p,
                                        req.bytes, bytes));
    }
    uint8_t* peer = map_peer(p, req.handle, stream) + req.offset;
    launch.inputs[p] = peer;
    launch.copies[p - 1] = peer;  // in place: the peer's buffer gets the result too
  }
  launch.num_copies = n() - 1;
  issued = step;
  detail::launch_reduce(launch, stream);  // one pass: every buffer read once, written once
  HVD_CUDA_CHECK(cudaEventRecord(done[0][0], stream));
  control->publish(0, Counter::Done, step);
  seq = step;
}

void DeviceAllreducer::Impl::teardown() noexcept {
  std::optional<DeviceGuard> guard;  // held for the whole teardown
  bool peers_ok = false;
  try {
    guard.emplace(options.device);
    if (control && !control->aborted()) {
      // Peers must have finished reading my buffer before it is freed, and I
      // theirs before I unmap them.
      const Deadline deadline = Deadline::after(options.timeout);
      for (int p = 0; p < n(); ++p) control->wait_at_least(p, Counter::Done, seq, deadline);
      peers_ok = true;
    }
  } catch (const std::exception& e) {
    spdlog::warn("device allreducer: local rank {} tears down without its peers: {}", me(), e.what());
  }
  // A dead peer's events may never complete: only wait on peers that kept
  // up, and never past the timeout.
  const Deadline drain = Deadline::after(options.timeout);
  for (int p = 0; p < n() && !done.empty(); ++p) {
    if (p != me() && !peers_ok) continue;
    for (auto ev : done[p]) {
      if (ev && !wait_event(ev, drain)) {
        spdlog::warn("device allreducer: local rank {}: work of local rank {} did not finish in time", me(), p);
      }
    }
  }
  if (peers_ok) {
    for (auto& list : mappings) {
      for (auto& m : list) cudaIpcCloseMemHandle(m.base);  // every peer saw my done event: no work reads them
      list.clear();
    }
  }
  if (copy_stream && start_event && peers_ok) {
    // Everything on the copy stream is before this record.
    if (cudaEventRecord(start_event, copy_stream) == cudaSuccess) wait_event(start_event, drain);
    cudaGetLastError();
  }
  if (!peers_ok && issued > 0) {
    // Work on my streams may still be queued behind a dead peer's events;
    // unmapping or cudaFree could wait for it forever. The process is
    // failing anyway: leave buffers, mappings and events to process exit.
    spdlog::warn("device allreducer: local rank {} leaves its CUDA resources to process exit", me());
    if (control) control->publish(me(), Counter::Done, kClosed);
    control.reset();
    return;
  }
  for (int p = 0; p < n() && !buffers.empty(); ++p) {
    if (p == me()) continue;
    for (auto* list : {&ready, &done}) {
      for (auto& ev : (*list)[p]) {
        if (ev) cudaEventDestroy(ev);
        ev = nullptr;
      }
    }
    if (buffers[p]) cudaIpcCloseMemHandle(buffers[p]);
    buffers[p] = nullptr;
  }
  if (control) {
    try {
      control->publish(me(), Counter::Done, kClosed);
      if (!control->aborted()) {
        const Deadline deadline = Deadline::after(options.timeout);
        for (int p = 0; p < n(); ++p) control->wait_at_least(p, Counter::Done, kClosed, deadline);
      }
    } catch (const std::exception& e) {
      spdlog::warn("device allreducer: local rank {} frees its buffer before every peer unmapped it: {}", me(),
                   e.what());
    }
  }
  if (!ready.empty()) {
    for (auto* list : {&ready, &done}) {
      for (auto& ev : (*list)[me()]) {
        if (ev) cudaEventDestroy(ev);
      }
    }
  }
  if (buffer) cudaFree(buffer);
  if (start_event) cudaEventDestroy(start_event);
  if (copy_stream) cudaStreamDestroy(copy_stream);
  cudaGetLastError();
  control.reset();
}

DeviceAllreducer::DeviceAllreducer(store::Store& store, const DeviceAllreducerOptions& options)
    : impl_(std::make_unique<Impl>()) {
  const auto& o = options;
  if (o.local_size < 1 || o.local_size > detail::kMaxReduceInputs) {
    throw InvalidArgument(
        fmt::format("DeviceAllreducer: local_size must be 1..{}, got {}", detail::kMaxReduceInputs, o.local_size));
  }
  if (o.local_rank < 0 || o.local_rank >= o.local_size) {
    throw InvalidArgument(
        fmt::format("DeviceAllreducer: local_rank {} is outside 0..{}", o.local_rank, o.local_size - 1));
  }
  if (o.slots < 1 || o.slots > 64)
    throw InvalidArgument(fmt::format("DeviceAllreducer: slots must be 1..64, got {}", o.slots));
  if (o.chunk_bytes == 0) throw InvalidArgument("DeviceAllreducer: chunk_bytes must be positive");
  const int devices = device_count();
  if (o.device < 0 || o.device >= devices) {
    throw InvalidArgument(
        fmt::format("DeviceAllreducer: device {} does not exist ({} CUDA devices visible)", o.device, devices));
  }
  impl_->options = o;
  impl_->slot_bytes = (o.chunk_bytes + kAlign - 1) / kAlign * kAlign;
  if (o.local_size == 1) return;  // nothing to exchange
  DeviceGuard guard(o.device);
  try {
    impl_->setup(store);
  } catch (...) {
    if (impl_->control) impl_->control->abort(o.local_rank);
    impl_->teardown();
    throw;
  }
}

DeviceAllreducer::~DeviceAllreducer() {
  if (impl_ && impl_->options.local_size > 1) impl_->teardown();
}

void DeviceAllreducer::allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op, CUstream_st* stream,
                                 double prescale, double postscale) {
  auto& im = *impl_;
  if (im.broken) {
    throw IoError(fmt::format("device allreducer of local rank {} failed earlier; create a new one", im.me()));
  }
  if (count == 0) return;
  if (data == nullptr) throw InvalidArgument("DeviceAllreducer::allreduce: data is null");
  DeviceGuard guard(im.options.device);
  if (im.n() == 1) {
    // Alone on the host: only the scaling (and Average by 1) remains.
    if (prescale == 1.0 && postscale == 1.0) return;
    detail::ReduceLaunch launch;
    launch.inputs[0] = data;
    launch.num_inputs = 1;
    launch.out = data;
    launch.count = count;
    launch.dtype = dtype;
    launch.op = op;
    launch.prescale = prescale;
    launch.postscale = postscale;
    detail::launch_reduce(launch, stream);
    return;
  }
  try {
    if (im.leader_mode) {
      im.run_leader(static_cast<uint8_t*>(data), count, dtype, op, static_cast<cudaStream_t>(stream), prescale,
                    postscale);
    } else {
      im.run(static_cast<uint8_t*>(data), count, dtype, op, static_cast<cudaStream_t>(stream), prescale, postscale);
    }
  } catch (...) {
    // Peers blocked on this rank fail at once instead of at their deadline.
    im.broken = true;
    im.control->abort(im.me());
    throw;
  }
}

void DeviceAllreducer::abort() noexcept {
  auto& im = *impl_;
  im.broken = true;
  try {
    if (im.control && !im.control->aborted()) im.control->abort(im.me());
  } catch (...) {
  }
}

const DeviceAllreducerOptions& DeviceAllreducer::options() const { return impl_->options; }

uint64_t DeviceAllreducer::steps() const { return impl_->seq; }

}  // namespace hvd::collective::cuda
