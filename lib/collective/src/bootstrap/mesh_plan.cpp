#include "bootstrap/mesh_plan.h"

#include <algorithm>

namespace hvd::collective::detail {

std::vector<int> eager_peers(int rank, int size) {
  std::vector<int> out;
  if (size < 2 || rank < 0 || rank >= size) return out;
  if (size <= kEagerMeshMaxRanks) {
    for (int p = 0; p < size; ++p) {
      if (p != rank) out.push_back(p);
    }
    return out;
  }
  out.push_back((rank + size - 1) % size);
  out.push_back((rank + 1) % size);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::chrono::milliseconds scaled_peer_timeout(std::chrono::milliseconds base, int local_ranks, int cpus,
                                              std::chrono::milliseconds cap) {
  if (base.count() <= 0) return base;  // 0: the limit is off
  cpus = std::max(cpus, 1);
  if (local_ranks <= cpus) return base;
  const long long factor = (static_cast<long long>(local_ranks) + cpus - 1) / cpus;
  const auto scaled = std::chrono::milliseconds(base.count() * factor);
  return std::max(base, std::min(scaled, cap));
}

}  // namespace hvd::collective::detail
