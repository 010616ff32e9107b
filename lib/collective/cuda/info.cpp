// Build and run-time information of the CUDA component (built with CUDA).
#include "check.h"
#include "nccl.h"

#include <fmt/format.h>

namespace hvd::collective::cuda {

bool cuda_built() { return true; }

bool nccl_built() { return detail::NcclLibrary::get().available(); }

std::string nccl_version() { return detail::NcclLibrary::get().version(); }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // no driver / no device: not an error here
    return 0;
  }
  return n;
}

bool is_device_pointer(const void* ptr) {
  if (ptr == nullptr || device_count() == 0) return false;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

int pointer_device(const void* ptr) {
  if (ptr == nullptr || device_count() == 0) return -1;
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, ptr) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) return -1;
  return attr.device;
}

void copy(void* dst, const void* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  // cudaMemcpy does not wait for a device-to-device copy; the documented
  // "returns when done" needs the stream synchronised.
  HVD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, cudaStreamLegacy));
  HVD_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

}  // namespace hvd::collective::cuda
