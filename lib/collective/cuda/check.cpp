#include "check.h"

#include <fmt/format.h>

namespace hvd::collective::cuda::detail {

std::string cuda_error_message(int code, const std::string& call) {
  const char* text = cudaGetErrorString(static_cast<cudaError_t>(code));
  return fmt::format("{} failed: {} ({})", call, text ? text : "unknown CUDA error", code);
}

void throw_cuda_error(int code, const std::string& call) {
  // Clear a non-sticky error so the next call does not report it again.
  cudaGetLastError();
  throw CudaError(cuda_error_message(code, call), code);
}

}  // namespace hvd::collective::cuda::detail
