#include "hvd/launcher/plan/placement.h"

#include <fmt/format.h>

#include <map>

#include "hvd/common/error.h"
#include "hvd/launcher/hosts/hosts.h"

namespace hvd::launcher {

std::vector<SlotAssignment> place_ranks(const std::vector<std::string>& rank_hosts) {
  std::vector<SlotAssignment> out(rank_hosts.size());
  // Pass 1, in rank order: local_rank = ranks seen so far on the same host.
  std::map<std::string, int> ranks_on_host;
  for (size_t r = 0; r < rank_hosts.size(); ++r) {
    SlotAssignment& slot = out[r];
    slot.hostname = rank_hosts[r];
    slot.rank = static_cast<int>(r);
    slot.local_rank = ranks_on_host[slot.hostname]++;
  }
  // Pass 2, in rank order: a host has one rank per local rank, so the hosts
  // seen so far at this local rank are the ranks seen so far with it.
  std::map<int, int> hosts_at_local;
  for (auto& slot : out) {
    slot.local_size = ranks_on_host[slot.hostname];
    slot.cross_rank = hosts_at_local[slot.local_rank]++;
  }
  for (auto& slot : out) slot.cross_size = hosts_at_local[slot.local_rank];
  return out;
}

std::vector<SlotAssignment> assign_slots(const std::vector<HostSpec>& hosts, int num_proc, bool beyond_slots) {
  if (num_proc < 1) throw InvalidArgument(fmt::format("-np must be at least 1, not {}", num_proc));
  if (hosts.empty()) throw InvalidArgument("no hosts to place ranks on");
  long total = total_slots(hosts);
  if (num_proc > total && !beyond_slots) {
    throw InvalidArgument(fmt::format("-np {} but only {} slot{} on {} host{} ({})", num_proc, total,
                                      total == 1 ? "" : "s", hosts.size(), hosts.size() == 1 ? "" : "s",
                                      format_hosts(hosts)));
  }
  // Fill hosts in order, each up to its slots.
  std::vector<std::string> rank_hosts;
  rank_hosts.reserve(static_cast<size_t>(num_proc));
  for (const auto& host : hosts) {
    for (int s = 0; s < host.slots && static_cast<int>(rank_hosts.size()) < num_proc; ++s) {
      rank_hosts.push_back(host.name);
    }
  }
  while (static_cast<int>(rank_hosts.size()) < num_proc) {  // beyond_slots only
    for (const auto& host : hosts) {
      if (static_cast<int>(rank_hosts.size()) == num_proc) break;
      rank_hosts.push_back(host.name);
    }
  }
  return place_ranks(rank_hosts);
}

}  // namespace hvd::launcher
