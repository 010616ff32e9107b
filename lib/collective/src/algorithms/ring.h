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

/// Small allreduce of two ranks over a shared-memory link: each rank hands
/// its whole buffer to the peer's ring and then reduces the peer's buffer
/// straight out of its own ring into `data` (no staging copy). Returns false
/// (nothing done) unless comm has 2 ranks, the link supports in-place
/// receives, the message fits in the ring (the send completes before the
/// receive starts modifying `data`) and `op` is Sum, Average or Product
/// (commutative to the bit, so both ranks end with identical results).
/// The largest message (bytes) allreduce sends by direct exchange rather
/// than the ring: kSmallBytes, or kSmallBytes / (size - 1) when more than 2
/// ranks all reach each other by shared-memory links (there the direct
/// exchange moves (size-1) x the message per rank while the ring's steps
/// cost little; every rank decides alike, both ends of a link agree on
/// its kind; 4 ranks on 2 cores: 64 KiB direct
/// took 72-139 us, 128 KiB by ring 35-84 us).
std::size_t direct_allreduce_limit(Comm& comm);

bool pair_allreduce_in_ring(Comm& comm, char* data, std::size_t count, DataType dtype, ReduceOp op);

}  // namespace hvd::collective::detail
