// Build and run-time information of the CUDA component (built with CUDA).
#include "check.h"

#include <fmt/format.h>

#ifdef HVD_HAVE_NCCL
#include <dlfcn.h>
#include <nccl.h>
#endif

namespace hvd::collective::cuda {

bool cuda_built() { return true; }

bool nccl_built() {
#ifdef HVD_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::string nccl_version() {
#ifdef HVD_HAVE_NCCL
  // Loaded on demand, never unloaded (RTLD_NODELETE keeps it if the handle
  // is dropped); nullptr -> not present at run time.
  void* lib = dlopen(HVD_NCCL_LIBRARY, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!lib) lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!lib) return "";
  using GetVersion = decltype(&ncclGetVersion);
  auto get = reinterpret_cast<GetVersion>(dlsym(lib, "ncclGetVersion"));
  int v = 0;
  if (!get || get(&v) != ncclSuccess) return "";
  // NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
  return fmt::format("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100);
#else
  return "";
#endif
}

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

}  // namespace hvd::collective::cuda
