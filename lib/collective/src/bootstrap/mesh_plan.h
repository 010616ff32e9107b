#pragma once
// Which links a communicator forms at init (the rest form at first use),
// and the set-up limits on an oversubscribed host. Pure functions, unit
// tested (tests/unit/collective/bootstrap/test_mesh_plan.cpp).
#include <chrono>
#include <vector>

namespace hvd::collective::detail {

/// Up to this many ranks every link forms at init: the small-message
/// algorithms (direct allreduce/allgather, algorithms/common.h
/// kSmallMaxRanks) talk to every peer at once.
inline constexpr int kEagerMeshMaxRanks = 8;

/// The peers `rank` links to during connect_comm, ascending: every other
/// rank up to kEagerMeshMaxRanks ranks, else its two ring neighbours (the
/// negotiation and the ring allreduce/allgather use only those). Every
/// other link forms the first time an algorithm asks for it.
std::vector<int> eager_peers(int rank, int size);

/// The silent-peer limit for links of a rank whose host runs `local_ranks`
/// ranks on `cpus` CPUs: `base` while there is a CPU per rank, else `base`
/// times the oversubscription (local_ranks / cpus, rounded up), at most
/// `cap` (and never below base). A starved but healthy peer (its kernel
/// answers probes late when 256 ranks share 2 cores) must not look dead.
std::chrono::milliseconds scaled_peer_timeout(std::chrono::milliseconds base, int local_ranks, int cpus,
                                              std::chrono::milliseconds cap = std::chrono::seconds(60));

}  // namespace hvd::collective::detail
