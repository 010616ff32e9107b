// Device kernels of the CUDA component: an N-input elementwise reduction
// with fused prescale / average / postscale, and a batched copy for fusion
// buffers. Both use 16-byte vector loads when every pointer is 16-byte
// aligned, grid-stride loops, and parameters passed by value.
//
// Semantics match the CPU kernels (src/reduce.cpp): integer sum/product
// wrap (two's complement), integer prescale/postscale multiply in double and
// truncate, integer Average divides with truncation; float16/bfloat16
// accumulate in float32 and round once at the end (more accurate than the
// CPU ring, which rounds after every step).
#include "check.h"
#include "kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace hvd::collective::cuda::detail {

// The element code is __host__ __device__: emulate_reduce_on_host() runs the
// very same functions on the CPU so tests/unit/cuda checks the arithmetic
// of every dtype and op without a GPU.
#define HVD_HD __host__ __device__

namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 4096;

struct Half {
  uint16_t bits;
};
struct BHalf {
  uint16_t bits;
};

// Storage type -> compute (accumulate) type and back.
template <class T>
struct Codec {
  using Acc = T;
  HVD_HD static Acc load(T v) { return v; }
  HVD_HD static T store(Acc v) { return v; }
};
template <>
struct Codec<Half> {
  using Acc = float;
  HVD_HD static float load(Half v) { return __half2float(__ushort_as_half(v.bits)); }
  HVD_HD static Half store(float v) { return Half{__half_as_ushort(__float2half_rn(v))}; }
};
template <>
struct Codec<BHalf> {
  using Acc = float;
  HVD_HD static float load(BHalf v) { return __bfloat162float(__ushort_as_bfloat16(v.bits)); }
  HVD_HD static BHalf store(float v) { return BHalf{__bfloat16_as_ushort(__float2bfloat16_rn(v))}; }
};

template <class A>
HVD_HD A wrap_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    using U = std::make_unsigned_t<A>;
    return static_cast<A>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <class A>
HVD_HD A wrap_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    return static_cast<A>(static_cast<uint64_t>(static_cast<int64_t>(a)) *
                          static_cast<uint64_t>(static_cast<int64_t>(b)));
  } else {
    return a * b;
  }
}

struct SumOp {
  template <class A>
  HVD_HD static A apply(A a, A b) {
    return wrap_add(a, b);
  }
};
struct MinOp {
  template <class A>
  HVD_HD static A apply(A a, A b) {
    return b < a ? b : a;
  }
};
struct MaxOp {
  template <class A>
  HVD_HD static A apply(A a, A b) {
    return a < b ? b : a;
  }
};
struct ProdOp {
  template <class A>
  HVD_HD static A apply(A a, A b) {
    return wrap_mul(a, b);
  }
};

struct DeviceReduceParams {
  const void* inputs[kMaxReduceInputs];
  int num_inputs;
  void* out;
  void* copies[kMaxReduceInputs - 1];
  int num_copies;
  std::size_t count;
  double prescale;
  double postscale;  // floats: already divided by the average divisor
  int divisor;  // integers: Average's divisor (1 = none)
  bool scale_in;  // prescale != 1
  bool scale_out;  // postscale != 1
};

// A scaled integer: truncated to int64, then wrapped to A (two's
// complement), like the float64 reference. A plain double -> narrow integer
// conversion of an out-of-range value is undefined: the GPU saturates
// (cvt.rzi clamps int32 and negative-to-unsigned) where x86 wraps or yields
// INT_MIN, so results would differ between the GPU and its host emulation.
template <class A>
HVD_HD A int_from_double(double x) {
  if constexpr (sizeof(A) == 8) {
    return static_cast<A>(x);
  } else {
    return static_cast<A>(static_cast<uint64_t>(static_cast<int64_t>(x)));
  }
}

template <class T>
struct Scaler {
  using K = Codec<T>;
  using A = typename K::Acc;
  HVD_HD static A pre(A v, const DeviceReduceParams& p) {
    if (!p.scale_in) return v;
    if constexpr (std::is_integral_v<A>) {
      return int_from_double<A>(static_cast<double>(v) * p.prescale);
    } else if constexpr (std::is_same_v<A, double>) {
      return v * p.prescale;
    } else {
      return v * static_cast<float>(p.prescale);
    }
  }
  HVD_HD static A post(A v, const DeviceReduceParams& p) {
    if constexpr (std::is_integral_v<A>) {
      // Divide in int64: the divisor (the job size) need not fit A --
      // static_cast<int8_t>(128) is negative and static_cast<uint8_t>(256)
      // is zero (a division by zero).
      if (p.divisor > 1) v = static_cast<A>(static_cast<int64_t>(v) / static_cast<int64_t>(p.divisor));
      if (p.scale_out) v = int_from_double<A>(static_cast<double>(v) * p.postscale);
      return v;
    } else if constexpr (std::is_same_v<A, double>) {
      return p.scale_out ? v * p.postscale : v;
    } else {
      return p.scale_out ? v * static_cast<float>(p.postscale) : v;
    }
  }
};

template <class T>
struct alignas(16) Pack {
  static constexpr int kN = 16 / sizeof(T);
  T v[kN];
};

// Element i of the vector body: 16 bytes of every input.
template <class T, class Op>
HVD_HD void reduce_pack(const DeviceReduceParams& p, std::size_t i) {
  using K = Codec<T>;
  using A = typename K::Acc;
  using S = Scaler<T>;
  using P = Pack<T>;
  constexpr int kN = P::kN;
  P x = static_cast<const P*>(p.inputs[0])[i];
  A acc[kN];
#pragma unroll
  for (int k = 0; k < kN; ++k) acc[k] = S::pre(K::load(x.v[k]), p);
  for (int j = 1; j < p.num_inputs; ++j) {
    x = static_cast<const P*>(p.inputs[j])[i];
#pragma unroll
    for (int k = 0; k < kN; ++k) acc[k] = Op::apply(acc[k], S::pre(K::load(x.v[k]), p));
  }
  P y;
#pragma unroll
  for (int k = 0; k < kN; ++k) y.v[k] = K::store(S::post(acc[k], p));
  static_cast<P*>(p.out)[i] = y;
  for (int c = 0; c < p.num_copies; ++c) static_cast<P*>(p.copies[c])[i] = y;
}

// Element i of the scalar tail (everything when pointers are misaligned).
template <class T, class Op>
HVD_HD void reduce_one(const DeviceReduceParams& p, std::size_t i) {
  using K = Codec<T>;
  using A = typename K::Acc;
  using S = Scaler<T>;
  A acc = S::pre(K::load(static_cast<const T*>(p.inputs[0])[i]), p);
  for (int j = 1; j < p.num_inputs; ++j) {
    acc = Op::apply(acc, S::pre(K::load(static_cast<const T*>(p.inputs[j])[i]), p));
  }
  const T y = K::store(S::post(acc, p));
  static_cast<T*>(p.out)[i] = y;
  for (int c = 0; c < p.num_copies; ++c) static_cast<T*>(p.copies[c])[i] = y;
}

// Packs first, first + stride, ..., first + (U-1) * stride (those below
// vec_count): the loads of one input for all U packs are issued before any
// is used, so a thread has U loads in flight instead of one. Each pack's
// inputs are all read before its outputs are written (aliasing as
// reduce_pack); the arithmetic is reduce_pack's, in the same order.
template <class T, class Op, int U>
HVD_HD void reduce_packs(const DeviceReduceParams& p, std::size_t first, std::size_t stride, std::size_t vec_count) {
  using K = Codec<T>;
  using A = typename K::Acc;
  using S = Scaler<T>;
  using P = Pack<T>;
  constexpr int kN = P::kN;
  std::size_t idx[U];
  bool ok[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    idx[u] = first + static_cast<std::size_t>(u) * stride;
    ok[u] = idx[u] < vec_count;
  }
  A acc[U][kN];
  P x[U];
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (ok[u]) x[u] = static_cast<const P*>(p.inputs[0])[idx[u]];
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
#pragma unroll
    for (int k = 0; k < kN; ++k) acc[u][k] = ok[u] ? S::pre(K::load(x[u].v[k]), p) : A{};
  }
  for (int j = 1; j < p.num_inputs; ++j) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (ok[u]) x[u] = static_cast<const P*>(p.inputs[j])[idx[u]];
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      if (!ok[u]) continue;
#pragma unroll
      for (int k = 0; k < kN; ++k) acc[u][k] = Op::apply(acc[u][k], S::pre(K::load(x[u].v[k]), p));
    }
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (!ok[u]) continue;
    P y;
#pragma unroll
    for (int k = 0; k < kN; ++k) y.v[k] = K::store(S::post(acc[u][k], p));
    static_cast<P*>(p.out)[idx[u]] = y;
    for (int c = 0; c < p.num_copies; ++c) static_cast<P*>(p.copies[c])[idx[u]] = y;
  }
}

template <class T, class Op>
__global__ void reduce_kernel(DeviceReduceParams p, std::size_t vec_count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (std::size_t i = tid; i < vec_count; i += stride) reduce_pack<T, Op>(p, i);
  for (std::size_t i = vec_count * Pack<T>::kN + tid; i < p.count; i += stride) reduce_one<T, Op>(p, i);
}

// reduce_kernel with U packs per thread per pass (ReduceLaunch::unroll).
template <class T, class Op, int U>
__global__ void reduce_kernel_unrolled(DeviceReduceParams p, std::size_t vec_count) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (std::size_t i = tid; i < vec_count; i += stride * U) reduce_packs<T, Op, U>(p, i, stride, vec_count);
  for (std::size_t i = vec_count * Pack<T>::kN + tid; i < p.count; i += stride) reduce_one<T, Op>(p, i);
}

unsigned blocks_for(std::size_t work_items) {
  const std::size_t b = (work_items + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<std::size_t>(b, 1, kMaxBlocks));
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <class T, class Op>
void launch_typed(const ReduceLaunch& l, cudaStream_t stream, bool emulate) {
  DeviceReduceParams p{};
  bool aligned = aligned16(l.out);
  for (int j = 0; j < l.num_inputs; ++j) {
    p.inputs[j] = l.inputs[j];
    aligned = aligned && aligned16(l.inputs[j]);
  }
  for (int c = 0; c < l.num_copies; ++c) {
    p.copies[c] = l.copies[c];
    aligned = aligned && aligned16(l.copies[c]);
  }
  p.num_inputs = l.num_inputs;
  p.num_copies = l.num_copies;
  p.out = l.out;
  p.count = l.count;
  p.prescale = l.prescale;
  const bool average = l.op == ReduceOp::Average && l.average_divisor > 1;
  if constexpr (std::is_integral_v<typename Codec<T>::Acc>) {
    p.divisor = average ? l.average_divisor : 1;
    p.postscale = l.postscale;
  } else {
    p.divisor = 1;
    p.postscale = average ? l.postscale / l.average_divisor : l.postscale;
  }
  p.scale_in = l.prescale != 1.0;
  p.scale_out = p.postscale != 1.0;
  const std::size_t vec = aligned ? l.count / Pack<T>::kN : 0;
  const std::size_t tail = l.count - vec * Pack<T>::kN;
  const int unroll = l.unroll;
  if (unroll != 1 && unroll != 2 && unroll != 4) {
    throw InvalidArgument(fmt::format("reduce: unroll must be 1, 2 or 4, not {}", unroll));
  }
  if (emulate) {
    // One thread of a grid of one: stride 1, the same element functions.
    if (unroll == 1) {
      for (std::size_t i = 0; i < vec; ++i) reduce_pack<T, Op>(p, i);
    } else {
      for (std::size_t i = 0; i < vec; i += static_cast<std::size_t>(unroll)) {
        if (unroll == 2) reduce_packs<T, Op, 2>(p, i, 1, vec);
        if (unroll == 4) reduce_packs<T, Op, 4>(p, i, 1, vec);
      }
    }
    for (std::size_t i = vec * Pack<T>::kN; i < l.count; ++i) reduce_one<T, Op>(p, i);
    return;
  }
  const unsigned blocks =
      blocks_for((vec + static_cast<std::size_t>(unroll) - 1) / static_cast<std::size_t>(unroll) + tail);
  switch (unroll) {
    case 1: reduce_kernel<T, Op><<<blocks, kThreads, 0, stream>>>(p, vec); break;
    case 2: reduce_kernel_unrolled<T, Op, 2><<<blocks, kThreads, 0, stream>>>(p, vec); break;
    default: reduce_kernel_unrolled<T, Op, 4><<<blocks, kThreads, 0, stream>>>(p, vec); break;
  }
  check(cudaGetLastError(), "launch of reduce_kernel");
}

template <class T>
void launch_op(const ReduceLaunch& l, cudaStream_t stream, bool emulate) {
  switch (l.op) {
    case ReduceOp::Sum:
    case ReduceOp::Average: return launch_typed<T, SumOp>(l, stream, emulate);
    case ReduceOp::Min: return launch_typed<T, MinOp>(l, stream, emulate);
    case ReduceOp::Max: return launch_typed<T, MaxOp>(l, stream, emulate);
    case ReduceOp::Product: return launch_typed<T, ProdOp>(l, stream, emulate);
    case ReduceOp::Adasum: break;  // host tensors only (check_request refuses device ones)
  }
  throw InvalidArgument(fmt::format("unknown reduce op {}", static_cast<int>(l.op)));
}

// --- batched copy -----------------------------------------------------------

struct CopyParams {
  const void* src[kMaxCopyItems];
  void* dst[kMaxCopyItems];
  std::size_t bytes[kMaxCopyItems];
};

// blockIdx.y selects the item; the x dimension strides over its bytes.
__global__ void batched_copy_kernel(CopyParams p) {
  const int item = blockIdx.y;
  const auto* src = static_cast<const uint8_t*>(p.src[item]);
  auto* dst = static_cast<uint8_t*>(p.dst[item]);
  const std::size_t bytes = p.bytes[item];
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  const std::size_t tid = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  std::size_t vec = 0;
  if (((reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst)) & 15u) == 0) {
    vec = bytes / 16;
    for (std::size_t i = tid; i < vec; i += stride)
      reinterpret_cast<uint4*>(dst)[i] = reinterpret_cast<const uint4*>(src)[i];
  }
  for (std::size_t i = vec * 16 + tid; i < bytes; i += stride) dst[i] = src[i];
}

}  // namespace

namespace {

void run_reduce(const ReduceLaunch& l, cudaStream_t s, bool emulate) {
  if (l.num_inputs < 1 || l.num_inputs > kMaxReduceInputs) {
    throw InvalidArgument(fmt::format("device reduce takes 1 to {} inputs, got {}", kMaxReduceInputs, l.num_inputs));
  }
  if (l.num_copies < 0 || l.num_copies > kMaxReduceInputs - 1) {
    throw InvalidArgument(
        fmt::format("device reduce takes 0 to {} further outputs, got {}", kMaxReduceInputs - 1, l.num_copies));
  }
  if (l.count == 0) return;
  HVD_ENFORCE(l.out != nullptr, "device reduce output is null{}", "");
  for (int c = 0; c < l.num_copies; ++c) HVD_ENFORCE(l.copies[c] != nullptr, "device reduce output {} is null", c + 1);
  for (int j = 0; j < l.num_inputs; ++j) HVD_ENFORCE(l.inputs[j] != nullptr, "device reduce input {} is null", j);
  switch (l.dtype) {
    case DataType::UInt8: return launch_op<uint8_t>(l, s, emulate);
    case DataType::Int8: return launch_op<int8_t>(l, s, emulate);
    case DataType::Int16: return launch_op<int16_t>(l, s, emulate);
    case DataType::Int32: return launch_op<int32_t>(l, s, emulate);
    case DataType::Int64: return launch_op<int64_t>(l, s, emulate);
    case DataType::Float16: return launch_op<Half>(l, s, emulate);
    case DataType::BFloat16: return launch_op<BHalf>(l, s, emulate);
    case DataType::Float32: return launch_op<float>(l, s, emulate);
    case DataType::Float64: return launch_op<double>(l, s, emulate);
    case DataType::Bool:
      throw InvalidArgument("bool tensors cannot be reduced (only moved: allgather, broadcast, alltoall)");
  }
  throw InvalidArgument(fmt::format("unknown data type {}", static_cast<int>(l.dtype)));
}

}  // namespace

void launch_reduce(const ReduceLaunch& l, CUstream_st* stream) {
  run_reduce(l, static_cast<cudaStream_t>(stream), false);
}

void emulate_reduce_on_host(const ReduceLaunch& l) { run_reduce(l, nullptr, true); }

void launch_batched_copy(const CopyItem* items, std::size_t n, CUstream_st* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  for (std::size_t first = 0; first < n; first += kMaxCopyItems) {
    const std::size_t batch = std::min<std::size_t>(kMaxCopyItems, n - first);
    CopyParams p{};
    std::size_t largest = 0;
    int used = 0;
    for (std::size_t i = 0; i < batch; ++i) {
      const CopyItem& it = items[first + i];
      if (it.bytes == 0) continue;
      HVD_ENFORCE(it.src != nullptr && it.dst != nullptr, "batched copy item {} has a null pointer", first + i);
      p.src[used] = it.src;
      p.dst[used] = it.dst;
      p.bytes[used] = it.bytes;
      largest = std::max(largest, it.bytes);
      ++used;
    }
    if (used == 0) continue;
    const unsigned bx =
        static_cast<unsigned>(std::clamp<std::size_t>((largest / 16 + kThreads - 1) / kThreads, 1, 512));
    batched_copy_kernel<<<dim3(bx, static_cast<unsigned>(used)), kThreads, 0, s>>>(p);
    check(cudaGetLastError(), "launch of batched_copy_kernel");
  }
}

}  // namespace hvd::collective::cuda::detail

namespace hvd::collective::cuda {

void batched_copy(const std::vector<CopyItem>& items, CUstream_st* stream) {
  detail::launch_batched_copy(items.data(), items.size(), stream);
}

void reduce(const std::vector<const void*>& inputs, void* out, std::size_t count, DataType dtype, ReduceOp op,
            double prescale, double postscale, CUstream_st* stream) {
  detail::ReduceLaunch l;
  if (inputs.empty() || inputs.size() > static_cast<std::size_t>(detail::kMaxReduceInputs)) {
    throw InvalidArgument(
        fmt::format("cuda::reduce takes 1 to {} inputs, got {}", detail::kMaxReduceInputs, inputs.size()));
  }
  for (std::size_t j = 0; j < inputs.size(); ++j) l.inputs[j] = inputs[j];
  l.num_inputs = static_cast<int>(inputs.size());
  l.out = out;
  l.count = count;
  l.dtype = dtype;
  l.op = op;
  l.prescale = prescale;
  l.postscale = postscale;
  l.average_divisor = static_cast<int>(inputs.size());
  detail::launch_reduce(l, stream);
}

}  // namespace hvd::collective::cuda
