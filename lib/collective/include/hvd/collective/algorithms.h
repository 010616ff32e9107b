#pragma once
/// Data-plane collectives over a connected Comm: blocking free functions
/// called by the background thread only (never concurrently on one Comm).
/// They throw hvd::IoError when a peer fails (and abort the Comm so every
/// other rank learns within the 2 s bound), hvd::TimeoutError on deadlines.
/// Layout conventions: "bytes per rank" vectors have comm.size() entries;
/// outputs are rank-contiguous.
#include "hvd/collective/comm.h"
#include "hvd/collective/types.h"

#include <cstddef>
#include <vector>

namespace hvd::collective {

/// In place. Average divides by size after summing (integer types: truncating
/// division). prescale multiplies inputs before, postscale the result after
/// (1.0 is a no-op; meant for floating types -- integer types get the product
/// computed in double and truncated, as Horovod's ScaleBuffer does).
/// float16/bfloat16 are reduced in float32 and rounded back (nearest even)
/// at every pairwise step. Results are bit-identical on every rank.
/// Small messages (<= 64 KiB, <= 8 ranks) take one all-to-all round; larger
/// ones the bandwidth-optimal ring (reduce-scatter + allgather).
void allreduce(Comm& comm, void* data, std::size_t count, DataType dtype, ReduceOp op, double prescale = 1.0,
               double postscale = 1.0);

/// Adasum (docs/collective.md, "Adasum"), in place: `data` holds tensors of
/// tensor_counts[i] elements back to back, each combined with its own
/// coefficients (Horovod's per-tensor dot products and norms), by
/// vector-halving distance-doubling. float16/float32/float64 only; the
/// communicator's size must be a power of two (hvd::InvalidArgument
/// otherwise, as Horovod refuses other sizes). prescale multiplies the
/// input, postscale the result. Results are bit-identical on every rank.
/// allreduce(..., ReduceOp::Adasum, ...) is this with one tensor.
void adasum_allreduce(Comm& comm, void* data, const std::vector<std::size_t>& tensor_counts, DataType dtype,
                      double prescale = 1.0, double postscale = 1.0);

/// Whether Adasum runs on `size` ranks (a power of two).
bool adasum_supported_size(int size);

/// Every rank contributes send_bytes (== recv_bytes[rank]); recv gets all
/// contributions back to back in rank order.
void allgatherv(Comm& comm, const void* send, std::size_t send_bytes, void* recv,
                const std::vector<std::size_t>& recv_bytes);

/// In place: data on `root` is copied to every rank.
void broadcast(Comm& comm, void* data, std::size_t bytes, int root);

/// send holds send_bytes[r] for each rank r back to back; recv receives
/// recv_bytes[r] from each rank r back to back.
void alltoallv(Comm& comm, const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
               const std::vector<std::size_t>& recv_bytes);

/// send holds sum(recv_counts) elements; rank r gets the reduction of the
/// recv_counts[r]-element segment at offset sum(recv_counts[0..r)).
void reducescatter(Comm& comm, const void* send, void* recv, const std::vector<std::size_t>& recv_counts,
                   DataType dtype, ReduceOp op, double prescale = 1.0, double postscale = 1.0);

void barrier(Comm& comm);

}  // namespace hvd::collective
