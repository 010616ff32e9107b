#include <tuple>

#include "hvd/launcher/plan/placement.h"
#include "../test_util.h"

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
