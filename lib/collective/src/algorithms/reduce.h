#pragma once
// Element-wise reduction kernels (private to the library). One dispatch on
// (dtype, op) per call, then a tight loop the compiler vectorises.
#include "hvd/collective/types.h"

#include <cstddef>

namespace hvd::collective::detail {

bool is_floating(DataType dtype);

/// acc[i] = acc[i] (op) in[i] for i < count. Average reduces as Sum (the
/// division happens once, in finalize). acc and in must not overlap.
void reduce_into(DataType dtype, ReduceOp op, void* acc, const void* in, std::size_t count);

/// data[i] *= factor. Integers: the product in double, truncated toward zero
/// (Horovod's ScaleBuffer behaviour). factor == 1.0 is a no-op.
void scale(DataType dtype, void* data, std::size_t count, double factor);

/// The last step of every reduction. Floating types: `postscale` multiplies,
/// then Average divides by `size` (a true division, as Horovod's CPU path
/// and torch do it). Integers: Average divides by `size` (truncating), then
/// `postscale` multiplies. Cheap no-op for
/// Sum/Min/Max/Product with postscale 1.
void finalize(DataType dtype, ReduceOp op, void* data, std::size_t count, int size, double postscale);

}  // namespace hvd::collective::detail
