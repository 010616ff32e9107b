// The timeline (lib/collective/src/timeline.h): the writer keeps the file a
// valid JSON array at every moment (also after SIGKILL), and a Context
// records Horovod's activities per tensor.
#include "timeline.h"

#include "hvd/collective/context.h"
#include "hvd/collective/errors.h"
#include "hvd/common/error.h"
#include "hvd/store/memory_store.h"

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <sstream>
#include <thread>

namespace fs = std::filesystem;
using hvd::collective::detail::Timeline;
using hvd::collective::detail::TimelineRecord;
using hvd::collective::detail::TimelineWriter;
using hvd::collective::detail::TimelineWriterOptions;
using nlohmann::json;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "hvd-timeline-XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

json load(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());  // throws on anything but one valid JSON value
}

/// tensor name -> pid, from the process_name metadata.
std::map<std::string, int> pids(const json& trace) {
  std::map<std::string, int> out;
  for (const json& e : trace) {
    if (e.value("ph", "") == "M" && e.value("name", "") == "process_name" && e["pid"].get<int>() > 0) {
      out[e["args"]["name"].get<std::string>()] = e["pid"].get<int>();
    }
  }
  return out;
}

/// Names of the 'B' events of one pid, in file order.
std::vector<std::string> begins(const json& trace, int pid) {
  std::vector<std::string> out;
  for (const json& e : trace) {
    if (e.value("ph", "") == "B" && e["pid"].get<int>() == pid) out.push_back(e["name"].get<std::string>());
  }
  return out;
}

bool contains(const std::vector<std::string>& v, const std::string& s) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

TimelineRecord rec(char phase, std::string tensor, std::string name, int64_t ts) {
  TimelineRecord r;
  r.phase = phase;
  r.tensor = std::move(tensor);
  r.name = std::move(name);
  r.ts_us = ts;
  return r;
}

}  // namespace

TEST_CASE("timeline writer: a JSON array with metadata and tensors as processes with escaped names", "[timeline]") {
  TempDir dir;
  const fs::path file = dir.path / "t.json";
  {
    TimelineWriter w(file.string(), 1234567, TimelineWriterOptions{});
    // Valid before any event.
    json empty = load(file);
    REQUIRE(empty.is_array());
    CHECK(empty[0]["args"]["start_time_since_epoch_in_micros"] == 1234567);
    REQUIRE(w.push(rec('B', "grad \"a\"\n", "ALLREDUCE", 5)));
    REQUIRE(w.push(rec('E', "grad \"a\"\n", "", 9)));
    REQUIRE(w.push(rec('B', "b", "BROADCAST", 10)));
    REQUIRE(w.push(rec('i', "", "CYCLE_START", 11)));
    w.close();
    CHECK(w.written() == 4);
    CHECK(w.dropped() == 0);
  }
  json t = load(file);
  auto p = pids(t);
  REQUIRE(p.size() == 2);
  REQUIRE(p.count("grad \"a\"\n") == 1);
  CHECK(p.at("grad \"a\"\n") == 1);
  CHECK(p.at("b") == 2);
  CHECK(begins(t, 1) == std::vector<std::string>{"ALLREDUCE"});
  CHECK(begins(t, 2) == std::vector<std::string>{"BROADCAST"});
  int marks = 0, ends = 0;
  for (const json& e : t) {
    if (e.value("ph", "") == "i") {
      ++marks;
      CHECK(e["name"] == "CYCLE_START");
      CHECK(e["ts"] == 11);
    }
    if (e.value("ph", "") == "E") {
      ++ends;
      CHECK(e["ts"] == 9);
    }
  }
  CHECK(marks == 1);
  CHECK(ends == 1);
}

TEST_CASE("timeline writer: the file loads while open and is flushed within the interval", "[timeline]") {
  TempDir dir;
  const fs::path file = dir.path / "t.json";
  TimelineWriterOptions o;
  o.flush_interval = std::chrono::milliseconds(20);
  TimelineWriter w(file.string(), 0, o);
  for (int i = 0; i < 3; ++i) REQUIRE(w.push(rec('X', "t" + std::to_string(i), "0", i)));
  json t;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    t = load(file);  // valid at every read
  } while (pids(t).size() < 3 && std::chrono::steady_clock::now() < deadline);
  CHECK(pids(t).size() == 3);
  w.close();
}

TEST_CASE("timeline writer: a full queue drops and counts instead of blocking", "[timeline]") {
  TempDir dir;
  TimelineWriterOptions o;
  o.queue_capacity = 4;
  o.flush_interval = std::chrono::seconds(30);  // nothing drains until close
  TimelineWriter w((dir.path / "t.json").string(), 0, o);
  int accepted = 0;
  for (int i = 0; i < 10; ++i) accepted += w.push(rec('X', "t", "0", i)) ? 1 : 0;
  CHECK(accepted == 4);
  CHECK(w.dropped() == 6);
  w.close();
  CHECK(w.written() == 4);
  json t = load(dir.path / "t.json");
  int events = 0;
  for (const json& e : t) events += e.value("ph", "") == "X";
  CHECK(events == 4);
}

TEST_CASE("timeline writer: an unwritable path is an IoError naming it", "[timeline]") {
  Timeline tl;
  try {
    tl.start("/nonexistent-dir-hvd/t.json", false);
    FAIL("no error");
  } catch (const hvd::IoError& e) {
    CHECK(std::string(e.what()).find("/nonexistent-dir-hvd/t.json") != std::string::npos);
  }
  CHECK_FALSE(tl.active());
}

TEST_CASE("timeline: SIGKILL of the writing process leaves a file that loads as JSON", "[timeline]") {
  TempDir dir;
  const fs::path file = dir.path / "t.json";
  // Several kill times, so the kill lands at different points of the
  // writer's cycle (mid-batch included).
  for (int delay_ms : {120, 235, 350}) {
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      Timeline tl;
      TimelineWriterOptions o;
      o.flush_interval = std::chrono::milliseconds(5);
      tl.start(file.string(), true, o);
      // Bounded, so a parent that fails before its kill leaves no orphan.
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      for (uint64_t i = 0; std::chrono::steady_clock::now() < give_up; ++i) {
        const std::string name = "tensor." + std::to_string(i % 50);
        tl.negotiate_rank_ready(name, "ALLREDUCE", 0);
        tl.negotiate_rank_ready(name, "ALLREDUCE", 1);
        tl.negotiated(name, "ALLREDUCE", 64);
        tl.activity_start(name, "ALLREDUCE");
        tl.end(name, "\"dtype\": \"float32\"");
        tl.mark_cycle();
        // About 5,000 operations a second (45,000 records), far above what
        // a job's rank 0 records, but leaving the writer idle between
        // batches as in a job (see the residual window in timeline.cpp).
        if (i % 8 == 7) std::this_thread::sleep_for(std::chrono::microseconds(1500));
      }
      _exit(0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    REQUIRE(kill(child, SIGKILL) == 0);
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));
    INFO("killed after " << delay_ms << " ms");
    json t;
    REQUIRE_NOTHROW(t = load(file));
    REQUIRE(t.is_array());
    CHECK(pids(t).size() == 50);
    CHECK(t.size() > 200);
  }
}

TEST_CASE("timeline: a Context records negotiation and queue and fusion copies and the collective", "[timeline]") {
  TempDir dir;
  const fs::path file = dir.path / "ctx.json";
  const fs::path second = dir.path / "second.json";
  hvd::collective::Settings s;
  s.timeline_path = file.string();
  s.timeline_mark_cycles = true;
  int fused_pair = -1, pairs = 0;
  {
    hvd::collective::Context ctx(s, nullptr, nullptr);
    CHECK(ctx.timeline_active());
    std::vector<float> a(16, 1.0f), b(8, 2.0f), c(4, 3.0f);
    hvd::collective::BroadcastArgs bc;
    bc.name = "weights";
    bc.input = bc.output = c.data();
    bc.shape = {4};
    ctx.broadcast_async(bc).wait();
    // Pairs submitted back to back until one lands in one cycle (the first
    // submission may wake the thread before the second arrives): fused.
    for (int i = 0; i < 50 && fused_pair < 0; ++i, ++pairs) {
      const uint64_t before = ctx.stats().fused_responses;
      std::vector<hvd::collective::Handle> hs;
      for (auto* v : {&a, &b}) {
        hvd::collective::AllreduceArgs args;
        args.name = fmt::format("grad.{}.{}", v == &a ? "a" : "b", i);
        args.input = args.output = v->data();
        args.shape = {static_cast<int64_t>(v->size())};
        hs.push_back(ctx.allreduce_async(args));
      }
      for (auto& h : hs) h.wait();
      if (ctx.stats().fused_responses > before) fused_pair = i;
    }
    REQUIRE(fused_pair >= 0);
    // Restarted at run time into another file, without cycle marks.
    ctx.start_timeline(second.string(), false);
    hvd::collective::AllreduceArgs args;
    args.name = "late";
    args.input = args.output = c.data();
    args.shape = {4};
    ctx.allreduce_async(args).wait();
    ctx.stop_timeline();
    CHECK_FALSE(ctx.timeline_active());
    args.name = "after.stop";
    ctx.allreduce_async(args).wait();
  }
  json t = load(file);
  auto p = pids(t);
  REQUIRE(p.count("weights") == 1);
  CHECK(p.count("late") == 0);
  CHECK(p.size() == static_cast<std::size_t>(1 + 2 * pairs));
  for (int i = 0; i < pairs; ++i) {
    for (const char* ab : {"a", "b"}) {
      const std::string name = fmt::format("grad.{}.{}", ab, i);
      INFO(name);
      REQUIRE(p.count(name) == 1);
      auto bs = begins(t, p.at(name));
      CHECK(bs.front() == "NEGOTIATE_ALLREDUCE");
      CHECK(contains(bs, "QUEUE"));
      CHECK(contains(bs, "ALLREDUCE"));
      // The fused pair went through the fusion buffer; the others did not.
      CHECK(contains(bs, "MEMCPY_IN_FUSION_BUFFER") == (i == fused_pair));
      CHECK(contains(bs, "MEMCPY_OUT_FUSION_BUFFER") == (i == fused_pair));
    }
  }
  auto wb = begins(t, p.at("weights"));
  CHECK(wb.front() == "NEGOTIATE_BROADCAST");
  CHECK(contains(wb, "BROADCAST"));
  // Every B has its E (per pid), the rank-0 tick is there, cycles are marked.
  std::map<int, int> depth;
  int ticks = 0, marks = 0;
  for (const json& e : t) {
    const std::string ph = e.value("ph", "");
    if (ph == "B") ++depth[e["pid"].get<int>()];
    if (ph == "E") CHECK(--depth[e["pid"].get<int>()] >= 0);
    if (ph == "X" && e["name"] == "0") ++ticks;
    if (ph == "i" && e["name"] == "CYCLE_START") ++marks;
  }
  for (auto& [pid, d] : depth) CHECK(d == 0);
  CHECK(ticks == 1 + 2 * pairs);
  CHECK(marks >= 1);

  json t2 = load(second);
  auto p2 = pids(t2);
  CHECK(p2.size() == 1);
  CHECK(p2.count("late") == 1);
  for (const json& e : t2) CHECK(e.value("ph", "") != "i");
}

TEST_CASE("timeline: two ranks - rank 0 records both ranks and a mismatch ends with its error", "[timeline]") {
  TempDir dir;
  const fs::path file = dir.path / "two.json";
  auto store = std::make_shared<hvd::store::InMemoryStore>();
  std::vector<std::unique_ptr<hvd::collective::Context>> ctx(2);
  {
    std::vector<std::future<void>> fs;
    for (int r = 0; r < 2; ++r) {
      fs.push_back(std::async(std::launch::async, [&, r] {
        hvd::collective::Settings s;
        s.rank = r;
        s.size = 2;
        s.local_rank = r;
        s.local_size = 2;
        s.secret = "test-secret";
        s.start_timeout = std::chrono::seconds(10);
        s.cycle_time = std::chrono::microseconds(500);
        s.timeline_path = file.string();  // every rank is given it; only rank 0 writes
        ctx[r] = hvd::collective::Context::create(s, store);
      }));
    }
    for (auto& f : fs) f.get();
  }
  CHECK(ctx[0]->timeline_active());
  CHECK_FALSE(ctx[1]->timeline_active());
  {
    std::vector<std::future<void>> fs;
    for (int r = 0; r < 2; ++r) {
      fs.push_back(std::async(std::launch::async, [&, r] {
        std::vector<float> v(8, 1.0f);
        hvd::collective::AllreduceArgs good;
        good.name = "good";
        good.input = good.output = v.data();
        good.shape = {8};
        ctx[r]->allreduce_async(good).wait();
        hvd::collective::AllreduceArgs bad = good;
        bad.name = "bad";
        bad.shape = {r == 0 ? 8 : 4};
        CHECK_THROWS_AS(ctx[r]->allreduce_async(bad).wait(), hvd::collective::MismatchError);
      }));
    }
    for (auto& f : fs) f.get();
  }
  ctx[1].reset();
  ctx[0].reset();
  json t = load(file);
  auto p = pids(t);
  REQUIRE(p.count("good") == 1);
  REQUIRE(p.count("bad") == 1);
  for (const char* name : {"good", "bad"}) {
    std::multiset<std::string> ticks;
    for (const json& e : t) {
      if (e.value("ph", "") == "X" && e["pid"] == p.at(name)) ticks.insert(e["name"].get<std::string>());
    }
    CHECK(ticks == std::multiset<std::string>{"0", "1"});
  }
  CHECK(contains(begins(t, p.at("good")), "ALLREDUCE"));
  std::string error;
  for (const json& e : t) {
    if (e.value("ph", "") == "E" && e["pid"] == p.at("bad") && e.contains("args")) {
      error = e["args"].value("error", "");
    }
  }
  CHECK(error.find("tensor 'bad' mismatch") != std::string::npos);
}
