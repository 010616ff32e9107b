#include <random>
#include <tuple>

#include "../test_util.h"
#include "hvd/launcher/plan/placement.h"

using namespace hvd::launcher;
using hvd_test::invalid_message;

namespace {

// (host, rank, local_rank, local_size, cross_rank, cross_size)
using Row = std::tuple<std::string, int, int, int, int, int>;

std::vector<Row> rows(const std::vector<SlotAssignment>& slots) {
  std::vector<Row> out;
  for (const auto& s : slots) {
    out.emplace_back(s.hostname, s.rank, s.local_rank, s.local_size, s.cross_rank, s.cross_size);
  }
  return out;
}

/// The rule straight from its words, in O(n^2), to check place_ranks on
/// lists it was not written for: local_rank = ranks before r on r's host;
/// local_size = ranks on r's host; cross_rank = index of r's host among the
/// hosts with a rank at r's local_rank, ordered by that rank; cross_size =
/// number of those hosts.
std::vector<Row> by_definition(const std::vector<std::string>& rank_hosts) {
  const int n = static_cast<int>(rank_hosts.size());
  auto local_rank_of = [&](int r) {
    int l = 0;
    for (int q = 0; q < r; ++q) l += rank_hosts[q] == rank_hosts[r];
    return l;
  };
  std::vector<Row> out;
  for (int r = 0; r < n; ++r) {
    const int local = local_rank_of(r);
    int local_size = 0;
    for (int q = 0; q < n; ++q) local_size += rank_hosts[q] == rank_hosts[r];
    std::vector<std::string> hosts_at_local;
    for (int q = 0; q < n; ++q) {
      if (local_rank_of(q) == local) hosts_at_local.push_back(rank_hosts[q]);
    }
    int cross = 0;
    while (hosts_at_local[cross] != rank_hosts[r]) ++cross;
    out.emplace_back(rank_hosts[r], r, local, local_size, cross, static_cast<int>(hosts_at_local.size()));
  }
  return out;
}

}  // namespace

TEST_CASE("placement: one host", "[placement]") {
  auto slots = assign_slots({{"localhost", 4}}, 3);
  CHECK(rows(slots) ==
        std::vector<Row>{{"localhost", 0, 0, 3, 0, 1}, {"localhost", 1, 1, 3, 0, 1}, {"localhost", 2, 2, 3, 0, 1}});
}

TEST_CASE("placement: even hosts fill in order", "[placement]") {
  auto slots = assign_slots({{"a", 2}, {"b", 2}}, 4);
  CHECK(rows(slots) ==
        std::vector<Row>{{"a", 0, 0, 2, 0, 2}, {"a", 1, 1, 2, 0, 2}, {"b", 2, 0, 2, 1, 2}, {"b", 3, 1, 2, 1, 2}});
}

TEST_CASE("placement: uneven slots a:2 b:1 c:3 with np 5", "[placement]") {
  auto slots = assign_slots({{"a", 2}, {"b", 1}, {"c", 3}}, 5);
  // local rank 0 exists on a, b, c; local rank 1 on a and c; local rank 2
  // is not used (np stops at 5).
  CHECK(rows(slots) == std::vector<Row>{{"a", 0, 0, 2, 0, 3},
                                        {"a", 1, 1, 2, 0, 2},
                                        {"b", 2, 0, 1, 1, 3},
                                        {"c", 3, 0, 2, 2, 3},
                                        {"c", 4, 1, 2, 1, 2}});
}

TEST_CASE("placement: uneven slots all used", "[placement]") {
  auto slots = assign_slots({{"a", 2}, {"b", 1}, {"c", 3}}, 6);
  CHECK(rows(slots) == std::vector<Row>{{"a", 0, 0, 2, 0, 3},
                                        {"a", 1, 1, 2, 0, 2},
                                        {"b", 2, 0, 1, 1, 3},
                                        {"c", 3, 0, 3, 2, 3},
                                        {"c", 4, 1, 3, 1, 2},
                                        {"c", 5, 2, 3, 0, 1}});
}

TEST_CASE("placement: fewer ranks than slots leaves later hosts empty", "[placement]") {
  auto slots = assign_slots({{"a", 4}, {"b", 4}}, 3);
  CHECK(rows(slots) == std::vector<Row>{{"a", 0, 0, 3, 0, 1}, {"a", 1, 1, 3, 0, 1}, {"a", 2, 2, 3, 0, 1}});
}

TEST_CASE("placement: beyond the slots (mpirun decides) ranks go round the hosts again", "[placement]") {
  // hvdrun's own launch refuses; under mpirun the plan goes on and -H keeps
  // the slots as given (mpi_launch_test), so mpirun refuses or oversubscribes.
  CHECK_THROWS(assign_slots({{"a", 2}}, 3));
  auto one = assign_slots({{"a", 2}}, 3, /*beyond_slots=*/true);
  CHECK(rows(one) == std::vector<Row>{{"a", 0, 0, 3, 0, 1}, {"a", 1, 1, 3, 0, 1}, {"a", 2, 2, 3, 0, 1}});
  auto two = assign_slots({{"a", 1}, {"b", 1}}, 4, true);
  REQUIRE(two.size() == 4);
  CHECK(two[2].hostname == "a");
  CHECK(two[3].hostname == "b");
  // Within the slots the result is the same either way.
  CHECK(rows(assign_slots({{"a", 2}, {"b", 2}}, 3, true)) == rows(assign_slots({{"a", 2}, {"b", 2}}, 3)));
}

TEST_CASE("placement: invariants over a grid of layouts", "[placement]") {
  std::vector<std::vector<HostSpec>> layouts = {
      {{"a", 1}}, {{"a", 3}, {"b", 1}, {"c", 2}}, {{"a", 1}, {"b", 1}, {"c", 1}, {"d", 1}}, {{"a", 5}, {"b", 7}}};
  for (const auto& hosts : layouts) {
    long total = 0;
    for (const auto& h : hosts) total += h.slots;
    for (int np = 1; np <= total; ++np) {
      auto slots = assign_slots(hosts, np);
      REQUIRE(slots.size() == static_cast<size_t>(np));
      for (int r = 0; r < np; ++r) {
        const auto& s = slots[static_cast<size_t>(r)];
        CHECK(s.rank == r);
        CHECK(s.local_rank < s.local_size);
        CHECK(s.cross_rank < s.cross_size);
        // cross_size equals the number of ranks with this local_rank.
        int same_local = 0;
        for (const auto& o : slots) same_local += o.local_rank == s.local_rank;
        CHECK(s.cross_size == same_local);
      }
    }
  }
}

TEST_CASE("placement: too few slots and bad -np", "[placement]") {
  CHECK(invalid_message([] {
          assign_slots({{"a", 2}, {"b", 2}}, 5);
        }) == "-np 5 but only 4 slots on 2 hosts (a:2, b:2)");
  CHECK(invalid_message([] { assign_slots({{"a", 1}}, 2); }) == "-np 2 but only 1 slot on 1 host (a:1)");
  CHECK(invalid_message([] { assign_slots({{"a", 1}}, 0); }) == "-np must be at least 1, not 0");
  CHECK(invalid_message([] { assign_slots({}, 1); }) == "no hosts to place ranks on");
}

// ---- place_ranks: the host of each rank, in rank order (elastic worlds) ----

TEST_CASE("place_ranks: elastic member lists interleaved by host keep ranks as positions", "[placement]") {
  // A re-formed world lists survivors first, then newcomers: a host's ranks
  // need not be contiguous. a: ranks 0 2 4 (local 0 1 2); b: 1; c: 3.
  CHECK(rows(place_ranks({"a", "b", "a", "c", "a"})) == std::vector<Row>{{"a", 0, 0, 3, 0, 3},
                                                                         {"b", 1, 0, 1, 1, 3},
                                                                         {"a", 2, 1, 3, 0, 1},
                                                                         {"c", 3, 0, 1, 2, 3},
                                                                         {"a", 4, 2, 3, 0, 1}});
  // w1 a, w3 b, w4 b, then w5 restarted on a: at local rank 1 host b comes
  // first (its rank there is lower), so cross ranks differ per local rank.
  CHECK(rows(place_ranks({"a", "b", "b", "a"})) ==
        std::vector<Row>{{"a", 0, 0, 2, 0, 2}, {"b", 1, 0, 2, 1, 2}, {"b", 2, 1, 2, 0, 2}, {"a", 3, 1, 2, 1, 2}});
  CHECK(place_ranks({}).empty());
}

TEST_CASE("placement: static and elastic give the same ranks for the same host layout", "[placement]") {
  // a:2 b:1 c:3 with uneven slots, as -H gives it and as a world lists it.
  const std::vector<Row> expected = {{"a", 0, 0, 2, 0, 3}, {"a", 1, 1, 2, 0, 2}, {"b", 2, 0, 1, 1, 3},
                                     {"c", 3, 0, 3, 2, 3}, {"c", 4, 1, 3, 1, 2}, {"c", 5, 2, 3, 0, 1}};
  CHECK(rows(assign_slots({{"a", 2}, {"b", 1}, {"c", 3}}, 6)) == expected);
  CHECK(rows(place_ranks({"a", "a", "b", "c", "c", "c"})) == expected);
}

TEST_CASE("place_ranks matches the rule's definition on random interleavings", "[placement]") {
  std::mt19937 rng(15);
  const std::vector<std::string> names{"a", "b", "c", "d"};
  for (int round = 0; round < 500; ++round) {
    std::vector<std::string> rank_hosts(rng() % 21);
    for (auto& h : rank_hosts) h = names[rng() % names.size()];
    INFO("round " << round);
    CHECK(rows(place_ranks(rank_hosts)) == by_definition(rank_hosts));
  }
}

TEST_CASE("assign_slots matches the rule's definition on a grid of uneven layouts", "[placement]") {
  std::vector<std::vector<HostSpec>> layouts = {
      {{"a", 3}, {"b", 1}, {"c", 2}}, {{"a", 1}, {"b", 4}, {"c", 1}, {"d", 3}}, {{"x", 2}, {"y", 5}}};
  for (const auto& hosts : layouts) {
    std::vector<std::string> filled;
    for (const auto& h : hosts) filled.insert(filled.end(), static_cast<size_t>(h.slots), h.name);
    for (int np = 1; np <= static_cast<int>(filled.size()); ++np) {
      INFO(format_hosts(hosts) << " np " << np);
      CHECK(rows(assign_slots(hosts, np)) == by_definition({filled.begin(), filled.begin() + np}));
    }
  }
}
