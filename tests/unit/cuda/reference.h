#pragma once
// Reference checks shared by the CPU-only kernel-math unit test
// (tests/unit/cuda/test_kernel_math.cpp) and the GPU checks
// (tests/integration/cuda/cuda_check.cpp): random never-zero inputs exactly
// representable in their dtype, a float64 reference (integers: the
// documented wrap/truncate semantics, exactly), tolerances, poison patterns.
#include "hvd/collective/types.h"

#include "algorithms/half.h"  // lib/collective/src: the library's own conversions

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace hvd::collective::testref {

constexpr std::size_t kGuard = 64;  // poisoned elements checked past the end

inline std::size_t ref_size(DataType t) {
  switch (t) {
    case DataType::UInt8:
    case DataType::Int8:
    case DataType::Bool: return 1;
    case DataType::Int16:
    case DataType::Float16:
    case DataType::BFloat16: return 2;
    case DataType::Int32:
    case DataType::Float32: return 4;
    default: return 8;
  }
}

inline const char* ref_name(DataType t) {
  static const char* names[] = {"uint8",   "int8",    "int32", "int64", "float16",
                                "bfloat16", "float32", "float64", "bool", "int16"};
  return names[static_cast<int>(t)];
}

inline const char* ref_name(ReduceOp op) {
  static const char* names[] = {"sum", "average", "min", "max", "product", "adasum"};
  return names[static_cast<int>(op)];
}

/// Every dtype the reduce kernel takes (Bool is data movement only).
inline const std::vector<DataType> kTypes = {DataType::UInt8,   DataType::Int8,    DataType::Int16,
                                             DataType::Int32,   DataType::Int64,   DataType::Float16,
                                             DataType::BFloat16, DataType::Float32, DataType::Float64};
inline const std::vector<ReduceOp> kOps = {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Min, ReduceOp::Max,
                                           ReduceOp::Product};

inline bool is_float(DataType t) {
  return t == DataType::Float16 || t == DataType::BFloat16 || t == DataType::Float32 || t == DataType::Float64;
}

/// Host copy of one tensor as raw bytes plus its exact values as double.
struct Tensor {
  std::vector<uint8_t> bytes;
  std::vector<double> values;
};

inline double load(DataType t, const uint8_t* p) {
  switch (t) {
    case DataType::UInt8: return *p;
    case DataType::Int8: return static_cast<int8_t>(*p);
    case DataType::Bool: return *p;
    case DataType::Int16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case DataType::Int32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::Int64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<double>(v);
    }
    case DataType::Float16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return detail::half_to_float(v);
    }
    case DataType::BFloat16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return detail::bfloat16_to_float(v);
    }
    case DataType::Float32: {
      float v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DataType::Float64: {
      double v;
      std::memcpy(&v, p, 8);
      return v;
    }
  }
  return 0;
}

inline void store_value(DataType t, uint8_t* p, double x) {
  switch (t) {
    case DataType::UInt8: *p = static_cast<uint8_t>(x); return;
    case DataType::Int8: *p = static_cast<uint8_t>(static_cast<int8_t>(x)); return;
    case DataType::Bool: *p = x != 0 ? 1 : 0; return;
    case DataType::Int16: {
      int16_t v = static_cast<int16_t>(x);
      std::memcpy(p, &v, 2);
      return;
    }
    case DataType::Int32: {
      int32_t v = static_cast<int32_t>(x);
      std::memcpy(p, &v, 4);
      return;
    }
    case DataType::Int64: {
      int64_t v = static_cast<int64_t>(x);
      std::memcpy(p, &v, 8);
      return;
    }
    case DataType::Float16: {
      uint16_t v = detail::float_to_half(static_cast<float>(x));
      std::memcpy(p, &v, 2);
      return;
    }
    case DataType::BFloat16: {
      uint16_t v = detail::float_to_bfloat16(static_cast<float>(x));
      std::memcpy(p, &v, 2);
      return;
    }
    case DataType::Float32: {
      float v = static_cast<float>(x);
      std::memcpy(p, &v, 4);
      return;
    }
    case DataType::Float64: std::memcpy(p, &x, 8); return;
  }
}

/// Random, never zero. Products use small magnitudes so they stay finite.
inline Tensor random_tensor(DataType t, ReduceOp op, std::size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const std::size_t es = ref_size(t);
  Tensor out;
  out.bytes.resize(count * es);
  out.values.resize(count);
  for (std::size_t i = 0; i < count; ++i) {
    double x;
    if (is_float(t)) {
      std::uniform_real_distribution<double> mag(op == ReduceOp::Product ? 0.7 : 0.5,
                                                 op == ReduceOp::Product ? 1.3 : 2.0);
      x = mag(rng) * ((rng() & 1) ? 1 : -1);
    } else if (op == ReduceOp::Product) {
      x = static_cast<double>(1 + rng() % 3);
      if (t != DataType::UInt8 && (rng() & 1)) x = -x;
    } else if (t == DataType::UInt8) {
      x = static_cast<double>(1 + rng() % 60);
    } else {
      x = static_cast<double>(1 + rng() % 30) * ((rng() & 1) ? 1 : -1);
    }
    store_value(t, out.bytes.data() + i * es, x);
    out.values[i] = load(t, out.bytes.data() + i * es);  // exactly what the GPU sees
  }
  return out;
}

template <class T>
inline T wrap_int(double v) {
  // Integer reference: exact in int64 for the magnitudes used, then wrapped
  // to T the way two's complement arithmetic does.
  return static_cast<T>(static_cast<uint64_t>(static_cast<int64_t>(v)));
}

/// The integer reference, mirroring the documented semantics step by step.
inline double int_reference(DataType t, ReduceOp op, const std::vector<double>& xs, double pre, double post,
                            int divisor) {
  auto as_t = [&](double v) -> double {
    switch (t) {
      case DataType::UInt8: return wrap_int<uint8_t>(v);
      case DataType::Int8: return wrap_int<int8_t>(v);
      case DataType::Int16: return wrap_int<int16_t>(v);
      case DataType::Int32: return wrap_int<int32_t>(v);
      default: return static_cast<double>(static_cast<int64_t>(v));
    }
  };
  auto scaled = [&](double x) { return pre == 1.0 ? x : as_t(std::trunc(x * pre)); };
  double acc = scaled(xs[0]);
  for (std::size_t j = 1; j < xs.size(); ++j) {
    const double x = scaled(xs[j]);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Average: acc = as_t(acc + x); break;
      case ReduceOp::Min: acc = x < acc ? x : acc; break;
      case ReduceOp::Max: acc = acc < x ? x : acc; break;
      case ReduceOp::Product: acc = as_t(acc * x); break;
      case ReduceOp::Adasum: return std::nan("");  // host tensors only: never a kernel's op
    }
  }
  if (op == ReduceOp::Average && divisor > 1) acc = as_t(std::trunc(acc / divisor));
  if (post != 1.0) acc = as_t(std::trunc(acc * post));
  return acc;
}

struct Tolerance {
  double acc_eps;  // accumulate type
  double store_eps;  // storage rounding
  double tiny;  // absolute floor (subnormals)
};
inline Tolerance tolerance(DataType t) {
  switch (t) {
    case DataType::Float16: return {6e-8, std::ldexp(1.0, -11), std::ldexp(1.0, -24)};
    case DataType::BFloat16: return {6e-8, std::ldexp(1.0, -8), 1e-38};
    case DataType::Float32: return {6e-8, 6e-8, 1e-38};
    case DataType::Float64: return {1.2e-16, 1.2e-16, 1e-300};
    default: return {0, 0, 0};
  }
}

/// Compares `got` (count values + kGuard guard elements) with the reference
/// of inputs[j] reduced. Returns a description of the first failure or "".
inline std::string verify(DataType t, ReduceOp op, const std::vector<const Tensor*>& inputs, const uint8_t* got,
                          std::size_t count, double pre, double post, int divisor, const std::vector<uint8_t>& guard) {
  const std::size_t es = ref_size(t);
  const int n = static_cast<int>(inputs.size());
  const Tolerance tol = tolerance(t);
  std::vector<double> xs(n);
  for (std::size_t i = 0; i < count; ++i) {
    for (int j = 0; j < n; ++j) xs[j] = inputs[j]->values[i];
    const double g = load(t, got + i * es);
    double ref;
    bool ok;
    if (!is_float(t)) {
      ref = int_reference(t, op, xs, pre, post, divisor);
      ok = g == ref;
    } else {
      const double post_eff = (op == ReduceOp::Average && divisor > 1) ? post / divisor : post;
      double acc = xs[0] * pre, mag = std::fabs(acc);
      for (int j = 1; j < n; ++j) {
        const double x = xs[j] * pre;
        switch (op) {
          case ReduceOp::Sum:
          case ReduceOp::Average:
            acc += x;
            mag += std::fabs(x);
            break;
          case ReduceOp::Min:
            acc = x < acc ? x : acc;
            mag = std::max(mag, std::fabs(x));
            break;
          case ReduceOp::Max:
            acc = acc < x ? x : acc;
            mag = std::max(mag, std::fabs(x));
            break;
          case ReduceOp::Product:
            acc *= x;
            mag *= std::fabs(x);
            break;
          case ReduceOp::Adasum: acc = std::nan(""); break;  // never a kernel's op: fails the check
        }
      }
      ref = acc * post_eff;
      const double bound =
          (n + 3) * tol.acc_eps * mag * std::fabs(post_eff) + tol.store_eps * std::fabs(ref) + tol.tiny;
      ok = !std::isnan(g) && std::fabs(g - ref) <= bound;
    }
    if (!ok) {
      char buf[256];
      std::snprintf(buf, sizeof buf, "%s %s n=%d count=%zu: element %zu is %.9g, expected %.9g", ref_name(t),
                    ref_name(op), n, count, i, g, ref);
      return buf;
    }
  }
  if (std::memcmp(got + count * es, guard.data(), guard.size()) != 0) {
    return std::string(ref_name(t)) + " " + ref_name(op) + ": wrote past the end (guard changed)";
  }
  return "";
}

inline std::vector<uint8_t> poison_bytes(DataType t, std::size_t bytes) {
  // All-ones is NaN for every float type; integers get a recognisable pattern.
  return std::vector<uint8_t>(bytes, is_float(t) ? 0xff : 0x5a);
}

}  // namespace hvd::collective::testref
