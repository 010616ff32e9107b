#pragma once
/// Rank placement: a pure function, the same as horovodrun's
/// get_host_assignments for a static job of `num_proc` ranks.
///
/// Ranks fill hosts in the order given, each host up to its slots. For each
/// rank: local_rank is its index on its host, local_size the number of ranks
/// on that host; cross_rank is the index of its host among the hosts that
/// have a rank at this local_rank, cross_size the number of such hosts. (With
/// uneven slots cross_size differs between local ranks: hierarchical
/// collectives rely on exactly this definition.)
#include <vector>

#include "hvd/launcher/plan/job_plan.h"

namespace hvd::launcher {

/// Throws hvd::InvalidArgument when num_proc < 1, when there are no hosts, or
/// when num_proc exceeds the total slots:
/// "-np 5 but only 4 slots on 2 hosts (a:2, b:2)".
std::vector<SlotAssignment> assign_slots(const std::vector<HostSpec>& hosts, int num_proc);

}  // namespace hvd::launcher
