#pragma once
/// Rank placement: the one rule for static and elastic jobs, pure functions.
///
/// horovodrun's rule (get_host_assignments): rank r's local_rank is its
/// index among the ranks on its host and local_size the number of ranks on
/// that host; its cross_rank is the index of its host among the hosts that
/// have a rank at this local_rank, and cross_size the number of such hosts.
/// (With uneven slots cross_size differs between local ranks: hierarchical
/// collectives rely on exactly this definition.)
///
/// Both kinds of job come down to "the host of each rank, in rank order":
///  * static: ranks fill hosts in the order given, each up to its slots, so
///    each host's ranks are contiguous (assign_slots);
///  * elastic: a world lists its members in rank order, survivors first in
///    their previous order, then newcomers in start order, so one host's
///    ranks may be interleaved with another's (ElasticDriver). Ranks stay
///    positions in that list: re-grouping them by host would move surviving
///    ranks (and rank 0) between worlds.
/// "Index" always means order of rank: a host's local ranks follow its ranks
/// in ascending order, and the hosts at one local rank are ordered by the
/// rank they hold there. For contiguous hosts that is host order, so both
/// shapes give the same result for the same layout.
#include <string>
#include <vector>

#include "hvd/launcher/plan/job_plan.h"

namespace hvd::launcher {

/// One SlotAssignment per entry of `rank_hosts` (the host of rank r at index
/// r), with rank = r and local/cross ranks by the rule above. Hosts are told
/// apart by name, compared exactly. An empty list gives an empty placement.
std::vector<SlotAssignment> place_ranks(const std::vector<std::string>& rank_hosts);

/// A static job of `num_proc` ranks on `hosts` (distinct names: the host
/// parsers refuse a host listed twice): ranks fill the hosts in order, then
/// place_ranks. Throws hvd::InvalidArgument when num_proc < 1,
/// when there are no hosts, or when num_proc exceeds the total slots:
/// "-np 5 but only 4 slots on 2 hosts (a:2, b:2)".
/// With `beyond_slots` (mpirun mode: mpirun, not hvdrun, decides whether
/// a host may run more ranks than its slots, e.g. --mpi-args
/// --oversubscribe) ranks past the total go round the hosts again, one a
/// host, instead of the error.
std::vector<SlotAssignment> assign_slots(const std::vector<HostSpec>& hosts, int num_proc, bool beyond_slots = false);

}  // namespace hvd::launcher
