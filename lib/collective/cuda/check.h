#pragma once
// Every CUDA runtime call in the component goes through HVD_CUDA_CHECK,
// which turns a failure into hvd::collective::CudaError naming the call
// (its source text) and cudaGetErrorString's message.
#include "hvd/collective/cuda.h"

#include <cuda_runtime_api.h>

#include <string>

namespace hvd::collective::cuda::detail {

/// "<call> failed: <cudaGetErrorString> (<code>)".
std::string cuda_error_message(int code, const std::string& call);
[[noreturn]] void throw_cuda_error(int code, const std::string& call);

inline void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) throw_cuda_error(static_cast<int>(status), call);
}

/// Makes `device` current for the scope, restoring the caller's device.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) : device_(device) {
    check(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != device_) check(cudaSetDevice(device_), "cudaSetDevice");
  }
  ~DeviceGuard() {
    if (previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int device_;
  int previous_ = 0;
};

}  // namespace hvd::collective::cuda::detail

#define HVD_CUDA_CHECK(expr) ::hvd::collective::cuda::detail::check((expr), #expr)
