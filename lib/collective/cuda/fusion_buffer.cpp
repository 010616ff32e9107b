// DeviceFusionBuffer (hvd/collective/cuda.h).
#include "check.h"
#include "chunk_plan.h"
#include "kernels.h"

#include <cuda_runtime.h>

namespace hvd::collective::cuda {

DeviceFusionBuffer::DeviceFusionBuffer(int device, std::size_t threshold) : device_(device), threshold_(threshold) {
  if (device < 0 || device >= device_count()) {
    throw InvalidArgument(
        fmt::format("DeviceFusionBuffer: device {} does not exist ({} CUDA devices visible)", device, device_count()));
  }
}

DeviceFusionBuffer::~DeviceFusionBuffer() {
  if (data_) {
    // On the buffer's device (a destructor on a thread with another device
    // current must not create a context there).
    int previous = -1;
    if (cudaGetDevice(&previous) == cudaSuccess && previous != device_) cudaSetDevice(device_);
    cudaFree(data_);
    if (previous >= 0 && previous != device_) cudaSetDevice(previous);
    cudaGetLastError();
  }
}

void* DeviceFusionBuffer::pack(const std::vector<Tensor>& tensors, CUstream_st* stream, std::size_t& bytes) {
  std::vector<std::size_t> sizes;
  for (const auto& t : tensors) sizes.push_back(t.bytes);
  const auto layout = detail::plan_fusion_layout(sizes);
  if (layout.total > threshold_) {
    throw InvalidArgument(fmt::format("{} tensors need {} bytes of fusion buffer, more than the threshold {}",
                                      tensors.size(), layout.total, threshold_));
  }
  // The batched-copy kernel is launched on `stream`, which belongs to this
  // buffer's device: a launch needs that device current (else
  // cudaErrorInvalidResourceHandle), whatever the calling thread had set.
  detail::DeviceGuard guard(device_);
  if (!data_ && threshold_ > 0) {
    HVD_CUDA_CHECK(cudaMalloc(&data_, threshold_));
  }
  std::vector<CopyItem> items;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    items.push_back(CopyItem{tensors[i].data, static_cast<uint8_t*>(data_) + layout.offsets[i], tensors[i].bytes});
  }
  detail::launch_batched_copy(items.data(), items.size(), stream);
  bytes = layout.total;
  return data_;
}

void DeviceFusionBuffer::unpack(const std::vector<Tensor>& tensors, CUstream_st* stream) {
  std::vector<std::size_t> sizes;
  for (const auto& t : tensors) sizes.push_back(t.bytes);
  const auto layout = detail::plan_fusion_layout(sizes);
  HVD_ENFORCE(layout.total <= threshold_ && data_ != nullptr, "unpack without a matching pack{}", "");
  detail::DeviceGuard guard(device_);
  std::vector<CopyItem> items;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    items.push_back(CopyItem{static_cast<uint8_t*>(data_) + layout.offsets[i], tensors[i].data, tensors[i].bytes});
  }
  detail::launch_batched_copy(items.data(), items.size(), stream);
}

}  // namespace hvd::collective::cuda
