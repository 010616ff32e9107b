#pragma once
/// Element types and reduction operators shared by the C++ API, the C ABI,
/// the algorithms and (later) the CUDA path. Values are part of the C ABI:
/// never renumber.
#include <cstddef>
#include <cstdint>
#include <string>

namespace hvd::collective {

enum class DataType : int32_t {
  UInt8 = 0,
  Int8 = 1,
  Int32 = 2,
  Int64 = 3,
  Float16 = 4,
  BFloat16 = 5,
  Float32 = 6,
  Float64 = 7,
  /// One byte per element, 0 or 1 (torch.bool, C++ bool): data movement
  /// only (allgather, broadcast, alltoall); allreduce and reducescatter
  /// refuse it, as Horovod's library does.
  Bool = 8,
  /// Two-byte signed integer (torch.int16): every operation, as in Horovod.
  Int16 = 9,
};

enum class ReduceOp : int32_t {
  Sum = 0,
  Average = 1,
  Min = 2,
  Max = 3,
  Product = 4,
  /// Horovod's Adasum (docs/collective.md, "Adasum"): allreduce only, of
  /// float16/float32/float64 host tensors, on a power-of-two number of ranks.
  Adasum = 5,
};

std::size_t dtype_size(DataType dtype);
const char* dtype_name(DataType dtype);
const char* reduce_op_name(ReduceOp op);

/// IEEE binary16 / bfloat16 bit patterns <-> float32, rounding to nearest
/// even (for tools, tests and bindings that fill or read half buffers).
float float16_to_float(uint16_t bits);
uint16_t float_to_float16(float value);
float bfloat16_to_float(uint16_t bits);
uint16_t float_to_bfloat16(float value);

}  // namespace hvd::collective
