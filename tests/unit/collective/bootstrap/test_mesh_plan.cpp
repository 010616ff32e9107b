// The communicator's set-up plan (src/bootstrap/mesh_plan.h): which links
// form at init, and the silent-peer limit on an oversubscribed host.
#include "bootstrap/mesh_plan.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

using hvd::collective::detail::eager_peers;
using hvd::collective::detail::kEagerMeshMaxRanks;
using hvd::collective::detail::scaled_peer_timeout;
using namespace std::chrono_literals;

TEST_CASE("small jobs link every pair at init", "[mesh_plan]") {
  CHECK(eager_peers(0, 1).empty());
  CHECK(eager_peers(0, 2) == std::vector<int>{1});
  CHECK(eager_peers(1, 2) == std::vector<int>{0});
  CHECK(eager_peers(2, 4) == std::vector<int>{0, 1, 3});
  CHECK(eager_peers(7, kEagerMeshMaxRanks) == std::vector<int>{0, 1, 2, 3, 4, 5, 6});
}

TEST_CASE("larger jobs link only the ring neighbours at init", "[mesh_plan]") {
  for (int n : {kEagerMeshMaxRanks + 1, 64, 256, 1000}) {
    std::size_t total = 0;
    for (int r = 0; r < n; ++r) {
      const std::vector<int> peers = eager_peers(r, n);
      INFO("rank " << r << " of " << n);
      REQUIRE(peers.size() == 2);
      CHECK(std::set<int>(peers.begin(), peers.end()) == std::set<int>{(r + n - 1) % n, (r + 1) % n});
      total += peers.size();
      // Symmetric: every link is planned by both of its ranks.
      for (int p : peers) {
        const std::vector<int> back = eager_peers(p, n);
        CHECK(std::find(back.begin(), back.end(), r) != back.end());
      }
    }
    CHECK(total == 2 * static_cast<std::size_t>(n));  // linear in the job, not quadratic
  }
}

TEST_CASE("out-of-range ranks plan nothing", "[mesh_plan]") {
  CHECK(eager_peers(-1, 4).empty());
  CHECK(eager_peers(4, 4).empty());
}

TEST_CASE("the silent-peer limit grows with oversubscription, capped", "[mesh_plan]") {
  CHECK(scaled_peer_timeout(1500ms, 2, 2) == 1500ms);  // a CPU per rank
  CHECK(scaled_peer_timeout(1500ms, 1, 16) == 1500ms);
  CHECK(scaled_peer_timeout(1500ms, 3, 2) == 3000ms);  // 1.5x rounds up to 2
  CHECK(scaled_peer_timeout(1500ms, 8, 2) == 6000ms);
  CHECK(scaled_peer_timeout(1500ms, 256, 2) == 60000ms);  // 128x, capped
  CHECK(scaled_peer_timeout(1500ms, 256, 2, 10s) == 10000ms);
  CHECK(scaled_peer_timeout(0ms, 256, 2) == 0ms);  // off stays off
  CHECK(scaled_peer_timeout(90000ms, 256, 2) == 90000ms);  // never below the base
  CHECK(scaled_peer_timeout(1500ms, 4, 0) == 6000ms);  // no CPU count: one CPU
}
