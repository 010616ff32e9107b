// The timeline's format (engine/timeline_format.h): records to Chrome-trace
// items and where a batch's writes are cut, as pure functions: no file, no
// thread, no process.
#include "engine/timeline_format.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

using namespace hvd::collective::detail;

namespace {

TimelineRecord rec(char phase, std::string tensor, std::string name, int64_t ts, std::string args = {}) {
  TimelineRecord r;
  r.phase = phase;
  r.tensor = std::move(tensor);
  r.name = std::move(name);
  r.ts_us = ts;
  r.args = std::move(args);
  return r;
}

/// The file as it would be: the head, the items in its place, the tail.
nlohmann::json file_of(const std::string& items) {
  std::string head = timeline_head(1700000000000000);
  head.resize(head.size() - static_cast<std::size_t>(kTimelineTailLen));
  return nlohmann::json::parse(head + items + kTimelineTail);
}

}  // namespace

TEST_CASE("timeline format: the head alone is a JSON array with the job's metadata", "[timeline][format]") {
  const std::string head = timeline_head(42);
  REQUIRE(head.size() >= static_cast<std::size_t>(kTimelineTailLen));
  CHECK(head.substr(head.size() - static_cast<std::size_t>(kTimelineTailLen)) == kTimelineTail);
  const nlohmann::json j = nlohmann::json::parse(head);
  REQUIRE(j.is_array());
  REQUIRE(j.size() == 2);
  CHECK(j[0]["name"] == "process_name");
  CHECK(j[0]["pid"] == 0);
  CHECK(j[0]["args"]["start_time_since_epoch_in_micros"] == 42);
  CHECK(j[1]["name"] == "process_sort_index");
}

TEST_CASE("timeline format: tensors become processes once, events carry their pid, escapes hold",
          "[timeline][format]") {
  TimelineFormatter f;
  const std::string odd = "grad/\"w\"\n\t";
  const TimelineItems a =
      f.format({rec('B', "t0", "NEGOTIATE_ALLREDUCE", 1), rec('X', "t0", "1", 2), rec('E', "t0", "ignored", 3),
                rec('B', odd, "ALLREDUCE", 4, "\"bytes\": 8"), rec('i', "", "CYCLE_START", 5)});
  CHECK(a.too_big == 0);
  REQUIRE(a.starts.size() == 5);
  CHECK(a.starts[0] == 0);
  const TimelineItems b = f.format({rec('E', odd, "", 6, "\"ok\": true"), rec('B', "t2", "QUEUE", 7)});
  const nlohmann::json j = file_of(a.text + b.text);
  // head (2) + t0 metadata (2) + 3 events + odd's metadata (2) + 1 + cycle
  // mark, then 1 + t2's metadata (2) + 1: odd is not announced again.
  REQUIRE(j.size() == 2 + 2 + 3 + 2 + 1 + 1 + 1 + 2 + 1);
  CHECK(j[2]["args"]["name"] == "t0");
  CHECK(j[2]["pid"] == 1);
  CHECK(j[4]["ph"] == "B");
  CHECK(j[4]["name"] == "NEGOTIATE_ALLREDUCE");
  CHECK(j[4]["pid"] == 1);
  CHECK(j[5]["ph"] == "X");
  CHECK(j[5]["dur"] == 0);
  CHECK(j[6]["ph"] == "E");
  CHECK_FALSE(j[6].contains("name"));
  CHECK(j[7]["args"]["name"] == odd);
  CHECK(j[9]["pid"] == 2);
  CHECK(j[9]["args"]["bytes"] == 8);
  CHECK(j[10]["ph"] == "i");
  CHECK(j[10]["pid"] == 0);
  CHECK(j[10]["s"] == "g");
  CHECK(j[11]["pid"] == 2);
  CHECK(j[11]["args"]["ok"] == true);
  CHECK(j[12]["args"]["name"] == "t2");
  CHECK(j[14]["pid"] == 3);
  CHECK(j[14]["ts"] == 7);
}

TEST_CASE("timeline format: a unit over the maximum is left out and counted, its pid given again",
          "[timeline][format]") {
  TimelineFormatter f(300);
  const TimelineItems a =
      f.format({rec('B', "small", "A", 1), rec('B', std::string(400, 'x'), "A", 2), rec('B', "next", "A", 3)});
  CHECK(a.too_big == 1);
  REQUIRE(a.starts.size() == 2);
  const nlohmann::json j = file_of(a.text);
  REQUIRE(j.size() == 2 + 3 + 3);
  CHECK(j[4]["pid"] == 1);
  CHECK(j[5]["args"]["name"] == "next");
  CHECK(j[7]["pid"] == 2);  // the dropped tensor's pid, given again
}

TEST_CASE("timeline format: writes are cut at unit starts and stay within a page where a unit allows it",
          "[timeline][format]") {
  // Three 30-byte units starting 50 bytes before a page boundary: the first
  // fits (with the tail), the second does not, nor the third after it.
  CHECK(timeline_write_cuts(kTimelinePage - 50, 90, {0, 30, 60}) == std::vector<std::size_t>{30, 60, 90});
  // All within one page: one write.
  CHECK(timeline_write_cuts(100, 90, {0, 30, 60}) == std::vector<std::size_t>{90});
  // Nothing to write: no write.
  CHECK(timeline_write_cuts(100, 0, {}).empty());
  // A unit larger than a page goes alone.
  CHECK(timeline_write_cuts(0, 10 + 5000 + 10, {0, 10, 5010}) == std::vector<std::size_t>{10, 5010, 5020});

  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    int64_t pos = std::uniform_int_distribution<int64_t>(0, 3 * kTimelinePage)(rng);
    std::vector<std::size_t> starts;
    std::size_t size = 0;
    const int units = std::uniform_int_distribution<int>(1, 60)(rng);
    for (int u = 0; u < units; ++u) {
      starts.push_back(size);
      size += std::uniform_int_distribution<std::size_t>(1, round % 10 == 0 ? 6000 : 400)(rng);
    }
    const std::vector<std::size_t> cuts = timeline_write_cuts(pos, size, starts);
    REQUIRE(!cuts.empty());
    CHECK(cuts.back() == size);
    std::size_t from = 0;
    for (std::size_t to : cuts) {
      REQUIRE(to > from);
      if (to != size) CHECK(std::find(starts.begin(), starts.end(), to) != starts.end());
      const auto units_in =
          std::count_if(starts.begin(), starts.end(), [&](std::size_t s) { return s >= from && s < to; });
      const bool one_page =
          pos / kTimelinePage == (pos + static_cast<int64_t>(to - from) + kTimelineTailLen - 1) / kTimelinePage;
      // Several units share a write only within one page.
      if (units_in > 1) CHECK(one_page);
      pos += static_cast<int64_t>(to - from);
      from = to;
    }
  }
}
