#pragma once
/// Hierarchical allreduce and allgather (HOROVOD_HIERARCHICAL_ALLREDUCE /
/// HOROVOD_HIERARCHICAL_ALLGATHER, docs/collective.md): the same results as
/// the flat collectives of algorithms.h, computed in two levels -- among the
/// ranks of one host, then across hosts -- so that each byte crosses the
/// network once per host instead of once per rank. Private to the library;
/// the Context's executor picks them (hierarchy.h).
#include "hvd/collective/comm.h"
#include "hvd/collective/types.h"

#include <cstddef>
#include <vector>

namespace hvd::collective::detail {

/// In place, same contract as allreduce() over the whole job of
/// local.size() * cross.size() ranks. `local`: the ranks of this host, group
/// rank = local rank. `cross`: the ranks with this rank's local rank on every
/// host, group rank = host index; every host has local.size() ranks.
/// Steps: reduce-scatter within the host (local rank i owns slice i of
/// count/L elements, the first count%L slices one more), allreduce of each
/// slice across hosts among the ranks owning it (L cross-host allreduces at
/// once), average/postscale applied to the slice, allgather within the host.
/// Every rank ends with bit-identical results; floating sums are added in
/// another order than the flat allreduce's, so they may differ from it in
/// the last bits.
void hierarchical_allreduce(Comm& local, Comm& cross, void* data, std::size_t count, DataType dtype, ReduceOp op,
                            double prescale = 1.0, double postscale = 1.0);

/// Same contract as allgatherv() over the whole job, with host-major ranks
/// (global rank = host * L + local rank, L = local.size()); recv_bytes has
/// one entry per global rank. `leaders`: the local-rank-0 ranks of every
/// host (group rank = host index), non-null exactly on local rank 0.
/// Steps: allgather within the host (the host's contiguous block), allgather
/// of host blocks among the leaders, broadcast of the other hosts' blocks
/// from the leader within each host.
void hierarchical_allgatherv(Comm& local, Comm* leaders, int host, int hosts, const void* send, std::size_t send_bytes,
                             void* recv, const std::vector<std::size_t>& recv_bytes);

}  // namespace hvd::collective::detail
