// --events-file writer: every line one complete JSON object, strings
// escaped, concurrent writers never interleave, bad paths are clear errors.
#include "hvd/launcher/supervise/event_log.h"
#include "hvd/common/error.h"

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using hvd::launcher::EventLog;
using hvd::launcher::EventValue;

namespace {

struct TempPath {
  std::string path;
  TempPath() {
    char tmpl[] = "/tmp/hvd_events_XXXXXX";
    int fd = ::mkstemp(tmpl);
    REQUIRE(fd >= 0);
    ::close(fd);
    path = tmpl;
  }
  ~TempPath() { ::unlink(path.c_str()); }
};

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line));  // throws on a broken line
  return out;
}

}  // namespace

TEST_CASE("event log: fields of every kind, escaped, one object per line", "[events]") {
  TempPath f;
  {
    EventLog log(f.path);
    log.emit("job_start", {{"mode", "static"},
                           {"np", 2},
                           {"ok", true},
                           {"big", 1ull << 40},
                           {"ranks", std::vector<int>{0, 1}},
                           {"hosts", std::vector<std::string>{"a:1", "b\"c:2"}},
                           {"none", EventValue::null()},
                           {"world", EventValue::raw(R"({"version":3})")}});
    log.emit("log", {{"message", std::string("line1\nline2\t\"quoted\" \\ \x01")}});
  }
  auto lines = read_lines(f.path);
  REQUIRE(lines.size() == 2);
  const auto& a = lines[0];
  CHECK(a["event"] == "job_start");
  CHECK(a["time"].get<std::string>().size() == 24);  // 2026-11-23T09:35:27.213Z
  CHECK(a["time"].get<std::string>().back() == 'Z');
  CHECK(a["mode"] == "static");
  CHECK(a["np"] == 2);
  CHECK(a["ok"] == true);
  CHECK(a["big"] == (1ull << 40));
  CHECK(a["ranks"] == nlohmann::json::array({0, 1}));
  CHECK(a["hosts"][1] == "b\"c:2");
  CHECK(a["none"].is_null());
  CHECK(a["world"]["version"] == 3);
  CHECK(lines[1]["message"] == std::string("line1\nline2\t\"quoted\" \\ \x01"));
}

TEST_CASE("event log: the file is truncated when opened", "[events]") {
  TempPath f;
  { std::ofstream(f.path) << "old junk\n"; }
  {
    EventLog log(f.path);
    log.emit("x", {});
  }
  auto lines = read_lines(f.path);
  REQUIRE(lines.size() == 1);
  CHECK(lines[0]["event"] == "x");
}

TEST_CASE("event log: concurrent writers never interleave lines", "[events]") {
  TempPath f;
  {
    EventLog log(f.path);
    std::vector<std::thread> threads;
    for (int t = 0; t < 8; ++t) {
      threads.emplace_back([&log, t] {
        const std::string pad(500, static_cast<char>('a' + t));
        for (int i = 0; i < 200; ++i) log.emit("tick", {{"thread", t}, {"i", i}, {"pad", pad}});
      });
    }
    for (auto& th : threads) th.join();
  }
  auto lines = read_lines(f.path);
  REQUIRE(lines.size() == 8 * 200);
  std::set<std::pair<int, int>> seen;
  for (const auto& l : lines) {
    const int t = l["thread"];
    CHECK(l["pad"].get<std::string>() == std::string(500, static_cast<char>('a' + t)));
    seen.insert({t, l["i"].get<int>()});
  }
  CHECK(seen.size() == 8 * 200);
}

TEST_CASE("event log: a path that cannot be opened is an IoError naming it", "[events]") {
  try {
    EventLog log("/nonexistent-dir/events.jsonl");
    FAIL("opened a file in a missing directory");
  } catch (const hvd::IoError& e) {
    CHECK(std::string(e.what()) ==
          "cannot open --events-file '/nonexistent-dir/events.jsonl': No such file or directory");
  }
}

TEST_CASE("event log: a failing write is reported once and the job goes on", "[events]") {
  if (::access("/dev/full", W_OK) != 0) {
    WARN("SKIPPED: /dev/full is not writable here");
    return;
  }
  std::ostringstream captured;
  auto previous = spdlog::default_logger();
  spdlog::set_default_logger(
      std::make_shared<spdlog::logger>("capture", std::make_shared<spdlog::sinks::ostream_sink_mt>(captured)));
  {
    EventLog log("/dev/full");
    log.emit("a", {{"n", 1}});  // ENOSPC: one warning, then events are dropped
    log.emit("b", {{"n", 2}});
    log.emit("c", {{"n", 3}});
  }
  spdlog::set_default_logger(previous);
  const std::string text = captured.str();
  CHECK(text.find("--events-file '/dev/full': write failed (No space left on device); no more events are recorded") !=
        std::string::npos);
  CHECK(text.find("write failed") == text.rfind("write failed"));  // once
}
