// Reduction kernels. Each (type, op) pair becomes one simple loop over
// restrict-qualified arrays so GCC vectorises it (this file is built with
// -O3, see lib/collective/CMakeLists.txt). Half types go through float32:
// load (widen), combine, store (round to nearest even).
#include "algorithms/reduce.h"

#include "algorithms/half.h"

#include "hvd/common/error.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

namespace hvd::collective::detail {

namespace {

struct Half {
  uint16_t bits;
};
struct BHalf {
  uint16_t bits;
};

// How a stored element becomes a compute value and back.
template <class T>
struct Codec {
  using Compute = T;
  static Compute load(T v) { return v; }
  static T store(Compute v) { return v; }
};
template <>
struct Codec<Half> {
  using Compute = float;
  static float load(Half v) { return half_to_float(v.bits); }
  static Half store(float v) { return Half{float_to_half(v)}; }
};
template <>
struct Codec<BHalf> {
  using Compute = float;
  static float load(BHalf v) { return bfloat16_to_float(v.bits); }
  static BHalf store(float v) { return BHalf{float_to_bfloat16(v)}; }
};

// Integer sum/product wrap (two's complement) instead of invoking UB.
template <class C>
C wrap_add(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}
template <class C>
C wrap_mul(C a, C b) {
  if constexpr (std::is_integral_v<C>) {
    // Promote through uint64 so uint16-ish promotions to int cannot overflow.
    return static_cast<C>(static_cast<uint64_t>(static_cast<int64_t>(a)) *
                          static_cast<uint64_t>(static_cast<int64_t>(b)));
  } else {
    return a * b;
  }
}

template <class T, class F>
void combine(T* __restrict acc, const T* __restrict in, std::size_t n, F f) {
  using K = Codec<T>;
  for (std::size_t i = 0; i < n; ++i) acc[i] = K::store(f(K::load(acc[i]), K::load(in[i])));
}

template <class T>
void reduce_typed(ReduceOp op, void* acc_v, const void* in_v, std::size_t n) {
  using C = typename Codec<T>::Compute;
  T* acc = static_cast<T*>(acc_v);
  const T* in = static_cast<const T*>(in_v);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average: combine(acc, in, n, [](C a, C b) { return wrap_add(a, b); }); return;
    case ReduceOp::Min: combine(acc, in, n, [](C a, C b) { return b < a ? b : a; }); return;
    case ReduceOp::Max: combine(acc, in, n, [](C a, C b) { return a < b ? b : a; }); return;
    case ReduceOp::Product: combine(acc, in, n, [](C a, C b) { return wrap_mul(a, b); }); return;
    case ReduceOp::Adasum: break;  // not element-wise: algorithms/adasum.cpp
  }
  throw InvalidArgument(fmt::format("unknown reduce op {}", static_cast<int>(op)));
}

template <class T>
void scale_typed(void* data_v, std::size_t n, double factor) {
  using K = Codec<T>;
  using C = typename K::Compute;
  T* data = static_cast<T*>(data_v);
  if constexpr (std::is_integral_v<C>) {
    // Truncated to int64, then wrapped to T (a double -> narrow integer
    // conversion out of range is undefined; the GPU kernel does the same).
    for (std::size_t i = 0; i < n; ++i) {
      const auto v = static_cast<int64_t>(static_cast<double>(data[i]) * factor);
      data[i] = static_cast<T>(static_cast<uint64_t>(v));
    }
  } else if constexpr (std::is_same_v<C, double>) {
    for (std::size_t i = 0; i < n; ++i) data[i] *= factor;
  } else {
    const float f = static_cast<float>(factor);
    for (std::size_t i = 0; i < n; ++i) data[i] = K::store(K::load(data[i]) * f);
  }
}

template <class T>
void divide_typed(void* data_v, std::size_t n, int divisor) {
  // In int64: the divisor (the job size) need not fit T -- int8_t(128) is
  // negative and uint8_t(256) is zero.
  T* data = static_cast<T*>(data_v);
  const int64_t d = divisor;
  for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<T>(static_cast<int64_t>(data[i]) / d);
}

// Calls f.template operator()<T>() for the storage type of dtype.
template <class F>
void dispatch(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::UInt8: return f(uint8_t{});
    case DataType::Int8: return f(int8_t{});
    case DataType::Int16: return f(int16_t{});
    case DataType::Int32: return f(int32_t{});
    case DataType::Int64: return f(int64_t{});
    case DataType::Float16: return f(Half{});
    case DataType::BFloat16: return f(BHalf{});
    case DataType::Float32: return f(float{});
    case DataType::Float64: return f(double{});
    case DataType::Bool:
      throw InvalidArgument("bool tensors cannot be reduced (only moved: allgather, broadcast, alltoall)");
  }
  throw InvalidArgument(fmt::format("unknown data type {}", static_cast<int>(dtype)));
}

}  // namespace

bool is_floating(DataType dtype) {
  return dtype == DataType::Float16 || dtype == DataType::BFloat16 || dtype == DataType::Float32 ||
         dtype == DataType::Float64;
}

void reduce_into(DataType dtype, ReduceOp op, void* acc, const void* in, std::size_t count) {
  if (count == 0) return;
  dispatch(dtype, [&](auto tag) { reduce_typed<decltype(tag)>(op, acc, in, count); });
}

void scale(DataType dtype, void* data, std::size_t count, double factor) {
  if (count == 0 || factor == 1.0) return;
  dispatch(dtype, [&](auto tag) { scale_typed<decltype(tag)>(data, count, factor); });
}

void finalize(DataType dtype, ReduceOp op, void* data, std::size_t count, int size, double postscale) {
  if (count == 0) return;
  const bool average = op == ReduceOp::Average && size > 1;
  if (is_floating(dtype)) {
    // Horovod's order on the CPU: the postscale, then a true division by
    // the size (x * (1/3) is not x / 3 in float32: the results would differ
    // from Horovod's, and from torch's own division, in the last bit).
    scale(dtype, data, count, postscale);
    if (average) {
      dispatch(dtype, [&](auto tag) {
        using T = decltype(tag);
        using K = Codec<T>;
        using C = typename K::Compute;
        if constexpr (std::is_floating_point_v<C>) {
          T* p = static_cast<T*>(data);
          const C d = static_cast<C>(size);
          for (std::size_t i = 0; i < count; ++i) p[i] = K::store(K::load(p[i]) / d);
        }
      });
    }
    return;
  }
  if (average) {
    dispatch(dtype, [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_integral_v<T>) divide_typed<T>(data, count, size);
    });
  }
  scale(dtype, data, count, postscale);
}

}  // namespace hvd::collective::detail
