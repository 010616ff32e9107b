#pragma once
// Launchers of the component's device kernels (kernels.cu). Host-callable
// from plain C++; parameters travel by value in the launch (no device-side
// argument arrays to allocate per call).
#include "hvd/collective/cuda.h"
#include "hvd/collective/types.h"

#include <cstddef>

namespace hvd::collective::cuda::detail {

/// Most inputs one reduce launch takes (local ranks of one host).
inline constexpr int kMaxReduceInputs = 16;
/// Most items one batched-copy launch takes; more items take more launches.
inline constexpr int kMaxCopyItems = 64;

struct ReduceLaunch {
  const void* inputs[kMaxReduceInputs] = {};
  int num_inputs = 0;
  void* out = nullptr;
  /// Further outputs that get the same result in the same pass (the
  /// shared-GPU leader writes every local rank's buffer at once: each input
  /// is read once and each output written once, no copy afterwards). Each
  /// may alias an input: element i of every input is read before element i
  /// of any output is written.
  void* copies[kMaxReduceInputs - 1] = {};
  int num_copies = 0;
  std::size_t count = 0;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  double prescale = 1.0;
  double postscale = 1.0;
  /// Average divides by this (the job size, which may exceed num_inputs
  /// when this is one stage of a larger reduction); 1 otherwise.
  int average_divisor = 1;
  /// 16-byte packs each thread handles per pass of its grid-stride loop, 1,
  /// 2 or 4 (else InvalidArgument): with more, a thread has that many loads
  /// of every input in flight at once. Same results whatever the value.
  /// 1 everywhere in the library; `cuda_check --reduce-bandwidth` measures
  /// the others on a GPU (docs/cuda.md).
  int unroll = 1;
};

/// Enqueues the reduction on `stream`; CudaError on a launch failure.
void launch_reduce(const ReduceLaunch& launch, CUstream_st* stream);

/// Runs the reduce kernel's element code -- the same __host__ __device__
/// functions, same vector/scalar split -- on the CPU over host memory. For
/// tests: tests/unit/cuda checks every dtype and op without a GPU.
void emulate_reduce_on_host(const ReduceLaunch& launch);

/// Enqueues copies of items[0..n) on `stream` (ceil(n / kMaxCopyItems) launches).
void launch_batched_copy(const CopyItem* items, std::size_t n, CUstream_st* stream);

}  // namespace hvd::collective::cuda::detail
