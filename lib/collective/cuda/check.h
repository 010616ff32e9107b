#pragma once
// Every CUDA runtime call in the component goes through HVD_CUDA_CHECK,
// which turns a failure into hvd::collective::CudaError naming the call
// (its source text) and cudaGetErrorString's message.
#include "hvd/collective/cuda.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <thread>

namespace hvd::collective::cuda::detail {

/// "<call> failed: <cudaGetErrorString> (<code>)".
std::string cuda_error_message(int code, const std::string& call);
[[noreturn]] void throw_cuda_error(int code, const std::string& call);

inline void check(cudaError_t status, const char* call) {
  if (status != cudaSuccess) throw_cuda_error(static_cast<int>(status), call);
}

/// Polls `query` (cudaStreamQuery / cudaEventQuery of something) until it
/// reports cudaSuccess: a short spin first, as a synchronize would, then
/// 20 us sleeps, calling `on_poll` between queries (e.g. NCCL's async
/// error check). Returns false once `timeout` (> 0) has passed; 0 or less
/// waits for good. A query error throws CudaError naming `what`.
template <class Query, class OnPoll>
bool poll_until_done(Query&& query, std::chrono::milliseconds timeout, OnPoll&& on_poll, const char* what) {
  const auto start = std::chrono::steady_clock::now();
  for (uint64_t polls = 0;; ++polls) {
    const cudaError_t q = query();
    if (q == cudaSuccess) return true;
    if (q != cudaErrorNotReady) check(q, what);
    on_poll();
    if (polls < 2000) {
      std::this_thread::yield();
      continue;
    }
    if (timeout.count() > 0 && std::chrono::steady_clock::now() - start > timeout) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
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
