// StagedAllreducer: the CUDA side of staged.h (cross-host device allreduce
// through pinned, reused host buffers).
#include "check.h"
#include "staged.h"
#include "staging_pool.h"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <chrono>
#include <thread>

namespace hvd::collective::cuda {

namespace {

class CudaStagedDevice final : public detail::StagedDevice {
 public:
  CudaStagedDevice(StagedAllreducer::Impl& im, uint8_t* data, cudaStream_t caller, uint8_t* stage0, uint8_t* stage1);
  void begin() override;
  void d2h(const detail::Chunk& c, int slot) override;
  void wait_d2h(int slot) override;
  void h2d(const detail::Chunk& c, int slot) override;
  void finish() override;
  uint8_t* staging(int slot) override { return stage_[slot]; }

 private:
  StagedAllreducer::Impl& im_;
  uint8_t* data_;
  cudaStream_t caller_;
  uint8_t* stage_[2];
};

}  // namespace

struct StagedAllreducer::Impl {
  StagedAllreducerOptions options;
  std::size_t chunk_bytes = 0;
  cudaStream_t stream = nullptr;  // every staging copy, in order
  cudaEvent_t start = nullptr;  // caller's stream -> copy stream
  cudaEvent_t end = nullptr;  // copy stream -> caller's stream
  cudaEvent_t copied[2] = {nullptr, nullptr};
  std::unique_ptr<detail::StagingPool> pool;
};

CudaStagedDevice::CudaStagedDevice(StagedAllreducer::Impl& im, uint8_t* data, cudaStream_t caller, uint8_t* stage0,
                                   uint8_t* stage1)
    : im_(im), data_(data), caller_(caller), stage_{stage0, stage1} {}

void CudaStagedDevice::begin() {
  HVD_CUDA_CHECK(cudaEventRecord(im_.start, caller_));
  HVD_CUDA_CHECK(cudaStreamWaitEvent(im_.stream, im_.start, 0));
}
void CudaStagedDevice::d2h(const detail::Chunk& c, int slot) {
  HVD_CUDA_CHECK(cudaMemcpyAsync(stage_[slot], data_ + c.offset, c.bytes, cudaMemcpyDeviceToHost, im_.stream));
  HVD_CUDA_CHECK(cudaEventRecord(im_.copied[slot], im_.stream));
}
void CudaStagedDevice::wait_d2h(int slot) {
  const auto bound = im_.options.wait_timeout;
  if (bound.count() <= 0) {
    HVD_CUDA_CHECK(cudaEventSynchronize(im_.copied[slot]));
    return;
  }
  // Polled, so that a copy stuck behind work that never finishes (a dead
  // local peer's event) fails the operation instead of hanging the thread.
  if (!detail::poll_until_done([&] { return cudaEventQuery(im_.copied[slot]); }, bound, [] {}, "cudaEventQuery")) {
    throw TimeoutError(
        fmt::format("hvd: a device-to-host copy on CUDA device {} did not finish within {} ms "
                    "(HVD_CUDA_WAIT_TIMEOUT): a local peer may have died, or the GPU hangs",
                    im_.options.device, bound.count()));
  }
}
void CudaStagedDevice::h2d(const detail::Chunk& c, int slot) {
  HVD_CUDA_CHECK(cudaMemcpyAsync(data_ + c.offset, stage_[slot], c.bytes, cudaMemcpyHostToDevice, im_.stream));
}
void CudaStagedDevice::finish() {
  HVD_CUDA_CHECK(cudaEventRecord(im_.end, im_.stream));
  HVD_CUDA_CHECK(cudaStreamWaitEvent(caller_, im_.end, 0));
}

StagedAllreducer::StagedAllreducer(const StagedAllreducerOptions& options) : impl_(std::make_unique<Impl>()) {
  if (options.chunk_bytes == 0) throw InvalidArgument("StagedAllreducer: chunk_bytes must be positive");
  const int devices = device_count();
  if (options.device < 0 || options.device >= devices) {
    throw InvalidArgument(
        fmt::format("StagedAllreducer: device {} does not exist ({} CUDA devices visible)", options.device, devices));
  }
  auto& im = *impl_;
  im.options = options;
  im.chunk_bytes = (options.chunk_bytes + 255) / 256 * 256;
  im.pool = std::make_unique<detail::StagingPool>(detail::make_pinned_allocator(), 2 * im.chunk_bytes, im.chunk_bytes);
  int previous = 0;
  HVD_CUDA_CHECK(cudaGetDevice(&previous));
  HVD_CUDA_CHECK(cudaSetDevice(options.device));
  try {
    HVD_CUDA_CHECK(cudaStreamCreateWithFlags(&im.stream, cudaStreamNonBlocking));
    for (cudaEvent_t* ev : {&im.start, &im.end, &im.copied[0], &im.copied[1]}) {
      HVD_CUDA_CHECK(cudaEventCreateWithFlags(ev, cudaEventDisableTiming));
    }
  } catch (...) {
    // The destructor does not run for a throwing constructor.
    for (cudaEvent_t ev : {im.start, im.end, im.copied[0], im.copied[1]}) {
      if (ev) cudaEventDestroy(ev);
    }
    if (im.stream) cudaStreamDestroy(im.stream);
    cudaSetDevice(previous);
    throw;
  }
  cudaSetDevice(previous);
}

StagedAllreducer::~StagedAllreducer() {
  auto& im = *impl_;
  // On this object's device: a destructor on a thread with no (or another)
  // device current would otherwise create a context on device 0.
  int previous = -1;
  if (cudaGetDevice(&previous) == cudaSuccess && previous != im.options.device) cudaSetDevice(im.options.device);
  if (im.stream) cudaStreamSynchronize(im.stream);  // staging buffers must outlive the copies
  for (cudaEvent_t ev : {im.start, im.end, im.copied[0], im.copied[1]}) {
    if (ev) cudaEventDestroy(ev);
  }
  if (im.stream) cudaStreamDestroy(im.stream);
  im.pool.reset();
  if (previous >= 0 && previous != im.options.device) cudaSetDevice(previous);
  cudaGetLastError();
}

void StagedAllreducer::allreduce(void* data, std::size_t count, DataType dtype, CUstream_st* stream,
                                 const HostAllreduce& host_allreduce) {
  if (count == 0) return;
  if (data == nullptr) throw InvalidArgument("StagedAllreducer::allreduce: data is null");
  auto& im = *impl_;
  const std::size_t esize = detail::element_size(dtype);
  int previous = 0;
  HVD_CUDA_CHECK(cudaGetDevice(&previous));
  HVD_CUDA_CHECK(cudaSetDevice(im.options.device));
  try {
    // Leases come from the pool (allocated on the first call, reused after).
    // They are returned when this call ends, but the pool belongs to this
    // object and only this object's stream uses them, in order.
    auto a = im.pool->acquire(im.chunk_bytes);
    auto b = im.pool->acquire(im.chunk_bytes);
    CudaStagedDevice device(im, static_cast<uint8_t*>(data), static_cast<cudaStream_t>(stream), a.data(), b.data());
    const auto chunks = detail::plan_chunks(count * esize, esize, im.chunk_bytes);
    detail::run_staged(chunks, device, [&](uint8_t* host, std::size_t bytes) { host_allreduce(host, bytes / esize); });
  } catch (...) {
    cudaSetDevice(previous);
    throw;
  }
  cudaSetDevice(previous);
}

}  // namespace hvd::collective::cuda
