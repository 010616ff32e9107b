#include "hvd/launcher/plan/placement.h"

#include <fmt/format.h>

#include <map>

#include "hvd/common/error.h"
#include "hvd/launcher/hosts/hosts.h"

namespace hvd::launcher {

std::vector<SlotAssignment> assign_slots(const std::vector<HostSpec>& hosts, int num_proc) {
  if (num_proc < 1) throw InvalidArgument(fmt::format("-np must be at least 1, not {}", num_proc));
  if (hosts.empty()) throw InvalidArgument("no hosts to place ranks on");
  long total = total_slots(hosts);
  if (num_proc > total) {
    throw InvalidArgument(fmt::format("-np {} but only {} slot{} on {} host{} ({})", num_proc, total,
                                      total == 1 ? "" : "s", hosts.size(), hosts.size() == 1 ? "" : "s",
                                      format_hosts(hosts)));
  }

  // Pass 1: fill hosts in order; hosts_at_local[l] lists, in host order, the
  // hosts that received a rank at local rank l.
  struct HostRanks {
    size_t host_index;
    std::vector<int> ranks;
  };
  std::vector<HostRanks> per_host;
  std::map<int, std::vector<size_t>> hosts_at_local;
  int rank = 0;
  for (size_t h = 0; h < hosts.size() && rank < num_proc; ++h) {
    HostRanks hr{h, {}};
    for (int local = 0; local < hosts[h].slots && rank < num_proc; ++local) {
      hr.ranks.push_back(rank++);
      hosts_at_local[local].push_back(h);
    }
    per_host.push_back(std::move(hr));
  }

  // Pass 2: one assignment per rank, in rank order (hosts were filled in
  // order, so iterating hosts then local ranks yields ascending ranks).
  std::vector<SlotAssignment> out;
  out.reserve(static_cast<size_t>(num_proc));
  for (const auto& hr : per_host) {
    const int local_size = static_cast<int>(hr.ranks.size());
    for (int local = 0; local < local_size; ++local) {
      const auto& cross_hosts = hosts_at_local[local];
      SlotAssignment slot;
      slot.hostname = hosts[hr.host_index].name;
      slot.rank = hr.ranks[static_cast<size_t>(local)];
      slot.local_rank = local;
      slot.local_size = local_size;
      slot.cross_size = static_cast<int>(cross_hosts.size());
      for (size_t i = 0; i < cross_hosts.size(); ++i) {
        if (cross_hosts[i] == hr.host_index) slot.cross_rank = static_cast<int>(i);
      }
      out.push_back(slot);
    }
  }
  return out;
}

}  // namespace hvd::launcher
