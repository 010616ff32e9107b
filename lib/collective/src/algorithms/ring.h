#pragma once
// Ring building blocks shared by allreduce, reducescatter and allgatherv.
#include "hvd/collective/comm.h"
#include "hvd/collective/types.h"

#include <cstddef>
#include <vector>

namespace hvd::collective::detail {

/// Ring reduce-scatter in place on `work`, split into comm.size() chunks of
/// `chunk_elems[c]` elements back to back. On return chunk r of rank r holds
/// the reduction of every rank's chunk r (other chunks hold partial sums).
/// `tmp` must hold min(kSegmentBytes, largest chunk) bytes.
void ring_reduce_scatter(Comm& comm, char* work, const std::vector<std::size_t>& chunk_elems, DataType dtype,
                         ReduceOp op, char* tmp);

/// Ring allgather in place on `buf`: block b (of `block_bytes[b]` bytes, back
/// to back) starts valid on rank b and ends valid on every rank.
void ring_allgather(Comm& comm, char* buf, const std::vector<std::size_t>& block_bytes);

}  // namespace hvd::collective::detail
