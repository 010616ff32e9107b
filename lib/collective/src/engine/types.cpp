#include "hvd/collective/types.h"

#include "algorithms/half.h"

#include "hvd/common/error.h"

namespace hvd::collective {

std::size_t dtype_size(DataType dtype) {
  switch (dtype) {
    case DataType::UInt8:
    case DataType::Int8:
    case DataType::Bool: return 1;
    case DataType::Int16:
    case DataType::Float16:
    case DataType::BFloat16: return 2;
    case DataType::Int32:
    case DataType::Float32: return 4;
    case DataType::Int64:
    case DataType::Float64: return 8;
  }
  throw InvalidArgument(fmt::format("unknown data type {}", static_cast<int>(dtype)));
}

const char* dtype_name(DataType dtype) {
  switch (dtype) {
    case DataType::UInt8: return "uint8";
    case DataType::Int8: return "int8";
    case DataType::Int32: return "int32";
    case DataType::Int64: return "int64";
    case DataType::Float16: return "float16";
    case DataType::BFloat16: return "bfloat16";
    case DataType::Float32: return "float32";
    case DataType::Float64: return "float64";
    case DataType::Bool: return "bool";
    case DataType::Int16: return "int16";
  }
  return "unknown";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Average: return "average";
    case ReduceOp::Min: return "min";
    case ReduceOp::Max: return "max";
    case ReduceOp::Product: return "product";
    case ReduceOp::Adasum: return "adasum";
  }
  return "unknown";
}

float float16_to_float(uint16_t bits) { return detail::half_to_float(bits); }
uint16_t float_to_float16(float value) { return detail::float_to_half(value); }
float bfloat16_to_float(uint16_t bits) { return detail::bfloat16_to_float(bits); }
uint16_t float_to_bfloat16(float value) { return detail::float_to_bfloat16(value); }

}  // namespace hvd::collective
