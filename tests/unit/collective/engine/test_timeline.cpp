// The timeline (lib/collective/src/engine/timeline.h): the writer keeps the file a
// valid JSON array at every moment (also after SIGKILL of the rank: a writer
// process writes it), and a Context records Horovod's activities per tensor.
#include "engine/timeline.h"

#include "hvd/collective/context.h"
#include "hvd/collective/errors.h"
#include "hvd/common/error.h"
#include "hvd/store/memory_store.h"

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
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

/// load() of a file that is being written: a reader makes several read()
/// calls, and a write between two of them can show it the old end followed
/// by the new bytes; such a torn read does not repeat, a broken file does.
json load_while_written(const fs::path& p) {
  for (int attempt = 1;; ++attempt) {
    try {
      return load(p);
    } catch (const json::parse_error&) {
      if (attempt == 3) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
  }
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

int count_fds(const std::string& dir) {
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir)) n += e.path().filename() != "." ? 1 : 0;
  return n;
}

/// (comm, ppid) from /proc/<pid>/stat; comm empty when it is gone.
std::pair<std::string, pid_t> comm_and_ppid(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto open = stat.find('('), close = stat.rfind(')');
  if (open == std::string::npos || close == std::string::npos) return {"", 0};
  std::istringstream rest(stat.substr(close + 2));
  std::string state;
  pid_t ppid = 0;
  rest >> state >> ppid;
  return {stat.substr(open + 1, close - open - 1), ppid};
}

/// The processes named hvd-timeline whose parent is `parent`.
std::vector<pid_t> writer_processes(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t pid = std::stoi(name);
    auto [comm, ppid] = comm_and_ppid(pid);
    if (comm == "hvd-timeline" && ppid == parent) out.push_back(pid);
  }
  return out;
}

/// RssAnon of a process, in KiB (-1 when unknown).
long rss_anon_kib(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/status", pid));
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stol(line.substr(8));
  }
  return -1;
}

/// True when this process has no child left (waitpid: ECHILD).
bool no_children() {
  int status;
  return ::waitpid(-1, &status, WNOHANG) < 0 && errno == ECHILD;
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
    t = load_while_written(file);  // valid at every read
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

TEST_CASE("timeline writer: a FIFO, a symbolic link or another non-regular target is one IoError, never a hang",
          "[timeline][security]") {
  // A FIFO used to block open(O_WRONLY) until a reader came (issue 29 item 5).
  TempDir dir;
  const std::string fifo = (dir.path / "fifo.json").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  auto error_of = [](const std::string& path) {
    auto started = std::async(std::launch::async, [path]() -> std::string {
      try {
        Timeline tl;
        tl.start(path, false);
        return "";
      } catch (const hvd::IoError& e) {
        return e.what();
      }
    });
    if (started.wait_for(std::chrono::seconds(5)) != std::future_status::ready) {
      const int reader = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // lets open() return
      std::string late = started.get();
      if (reader >= 0) ::close(reader);
      return "blocked (" + late + ")";
    }
    return started.get();
  };
  CHECK(error_of(fifo).find("hvd timeline: '" + fifo + "' is a FIFO, not a regular file") == 0);
  // A reader on the FIFO: open() would succeed, the file is still refused.
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  REQUIRE(reader >= 0);
  CHECK(error_of(fifo).find("hvd timeline: '" + fifo + "' is a FIFO, not a regular file") == 0);
  ::close(reader);
  CHECK(error_of("/dev/null").find("'/dev/null' is a character device, not a regular file") != std::string::npos);
  // A link is not followed (in a directory others write it could point anywhere).
  const fs::path target = dir.path / "target";
  std::ofstream(target) << "precious";
  fs::create_symlink(target, dir.path / "link.json");
  CHECK(error_of((dir.path / "link.json").string()).find("is a symbolic link, not a regular file") !=
        std::string::npos);
  fs::create_hard_link(target, dir.path / "hard.json");
  CHECK(error_of((dir.path / "hard.json").string()).find("has 2 hard links") != std::string::npos);
  std::ifstream in(target);
  std::string kept((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(kept == "precious");
  // An existing regular file of this user's is truncated and written.
  std::ofstream(dir.path / "old.json") << std::string(10000, 'x');
  CHECK(error_of((dir.path / "old.json").string()).empty());
  CHECK(load(dir.path / "old.json").size() == 2);
}

TEST_CASE("timeline writer: in-process (the fallback when fork fails) writes the same file", "[timeline]") {
  TempDir dir;
  const fs::path file = dir.path / "t.json";
  TimelineWriterOptions o;
  o.in_process = true;
  TimelineWriter w(file.string(), 7, o);
  CHECK(w.writer_pid() == -1);
  // Enough events to cross several pages.
  for (int i = 0; i < 2000; ++i) REQUIRE(w.push(rec(i % 2 ? 'E' : 'B', "t" + std::to_string(i % 7), "ALLREDUCE", i)));
  w.close();
  CHECK(w.written() == 2000);
  json t = load(file);
  CHECK(pids(t).size() == 7);
  CHECK(t.size() == 2 + 2 * 7 + 2000);
}

TEST_CASE("timeline writer: a writer process that only holds the file and its socket and is reaped at close",
          "[timeline]") {
  TempDir dir;
  REQUIRE(no_children());
  const int fds_before = count_fds("/proc/self/fd");
  // 64 MiB of this process's memory, resident: the writer process releases
  // its copy-on-write share of it (else every page this process writes while
  // the timeline is open would be copied).
  std::vector<char> ballast(64u << 20, 1);
  for (int round = 0; round < 3; ++round) {
    INFO("round " << round);
    Timeline tl;
    const fs::path file = dir.path / fmt::format("t{}.json", round);
    // start, stop, start again in one process, as start_timeline does
    tl.start(file.string(), true);
    tl.mark_cycle();
    tl.stop();
    tl.start(file.string(), true);
    // Named once it has set itself up: wait for it.
    std::vector<pid_t> writers;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while ((writers = writer_processes(::getpid())).empty() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    REQUIRE(writers.size() == 1);
    // Its own session (hvdrun's group kill does not reach it), and only
    // the file and the socket open: no descriptor of the rank is kept.
    CHECK(::getsid(writers[0]) == writers[0]);
    std::set<std::string> targets;
    for (const auto& e : fs::directory_iterator(fmt::format("/proc/{}/fd", writers[0]))) {
      std::error_code ec;
      targets.insert(fs::read_symlink(e.path(), ec).string());
    }
    REQUIRE(targets.size() == 2);
    CHECK(rss_anon_kib(writers[0]) < 16 * 1024);
    ballast[static_cast<std::size_t>(round) << 20] = 2;
    CHECK(targets.count(file.string()) == 1);
    CHECK(std::count_if(targets.begin(), targets.end(),
                        [](const std::string& t) { return t.rfind("socket:", 0) == 0; }) == 1);
    tl.negotiate_rank_ready("x", "ALLREDUCE", 0);
    tl.negotiated("x", "ALLREDUCE", 4);
    tl.end("x");
    tl.stop();
    CHECK(writer_processes(::getpid()).empty());
    CHECK(no_children());  // reaped: no zombie
    CHECK(count_fds("/proc/self/fd") == fds_before);
    json t = load(file);
    CHECK(pids(t).size() == 1);
  }
}

TEST_CASE("timeline writer: a killed writer process stops the timeline with the file valid", "[timeline]") {
  TempDir dir;
  const fs::path file = dir.path / "t.json";
  TimelineWriterOptions o;
  o.flush_interval = std::chrono::milliseconds(5);
  TimelineWriter w(file.string(), 0, o);
  const pid_t writer = w.writer_pid();
  REQUIRE(writer > 0);
  for (int i = 0; i < 100; ++i) REQUIRE(w.push(rec('X', "t", "0", i)));
  // Until the writer process has written them (2 metadata items each for
  // the job and for "t").
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (load_while_written(file).size() < 104 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(load(file).size() == 104);
  REQUIRE(::kill(writer, SIGKILL) == 0);
  // The next batch finds it gone: the writer reaps it and fails; pushes are
  // refused from then on, and close() returns at once.
  bool refused = false;
  for (int i = 0; i < 2000 && !refused; ++i) {
    refused = !w.push(rec('X', "t", "0", 100 + i));
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  CHECK(refused);
  CHECK(w.writer_pid() == -1);
  w.close();
  CHECK(no_children());
  CHECK(load(file).size() == 104);  // what it wrote before the kill, nothing after
}

TEST_CASE("timeline writer: close kills a writer process that does not finish in time and reaps it", "[timeline]") {
  TempDir dir;
  const fs::path file = dir.path / "t.json";
  TimelineWriterOptions o;
  o.flush_interval = std::chrono::milliseconds(5);
  o.close_timeout = std::chrono::milliseconds(300);
  TimelineWriter w(file.string(), 0, o);
  const pid_t writer = w.writer_pid();
  REQUIRE(writer > 0);
  REQUIRE(w.push(rec('X', "t", "0", 1)));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (load_while_written(file).size() < 5 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE(::kill(writer, SIGSTOP) == 0);  // stuck (as on a hung file system)
  REQUIRE(w.push(rec('X', "t", "0", 2)));
  const auto start = std::chrono::steady_clock::now();
  w.close();
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(took >= std::chrono::milliseconds(300));
  CHECK(took < std::chrono::seconds(3));
  CHECK(w.writer_pid() == -1);
  CHECK(no_children());
  CHECK(load(file).size() == 5);  // what it wrote before it stopped
}

TEST_CASE("timeline: SIGKILL of the rank at random moments with the writer saturated leaves valid JSON and no orphan",
          "[timeline]") {
  TempDir dir;
  // The writer processes of the killed ranks become this process's children
  // (a subreaper), so that they can be waited for and reaped.
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0);
  std::mt19937 rng(std::random_device{}());
  std::uniform_int_distribution<int> delay_us(0, 30000);
  constexpr int kKills = 60;
  int valid = 0;
  for (int k = 0; k < kKills; ++k) {
    const fs::path file = dir.path / fmt::format("k{}.json", k);
    const pid_t child = fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      Timeline tl;
      TimelineWriterOptions o;
      o.flush_interval = std::chrono::milliseconds(1);
      tl.start(file.string(), true, o);
      // As fast as it can (the writer busy all the time, its writes crossing
      // page boundaries often); bounded, so a parent that fails before its
      // kill leaves no orphan.
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      for (uint64_t i = 0; std::chrono::steady_clock::now() < give_up; ++i) {
        const std::string name = "tensor." + std::to_string(i % 50);
        tl.negotiate_rank_ready(name, "ALLREDUCE", 0);
        tl.negotiate_rank_ready(name, "ALLREDUCE", 1);
        tl.negotiated(name, "ALLREDUCE", 64);
        tl.activity_start(name, "ALLREDUCE");
        tl.end(name, "\"dtype\": \"float32\"");
        tl.mark_cycle();
      }
      _exit(0);
    }
    // Until the file is past its first pages, then a random moment.
    std::error_code ec;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    auto size = [&] {
      const auto n = fs::file_size(file, ec);
      return ec ? 0 : n;
    };
    while (size() < 65536 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const auto writers = writer_processes(child);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    REQUIRE(kill(child, SIGKILL) == 0);
    const auto killed = std::chrono::steady_clock::now();
    int status = 0;
    REQUIRE(waitpid(child, &status, 0) == child);
    REQUIRE(WIFSIGNALED(status));
    INFO("kill " << k);
    CHECK(writers.size() == 1);
    // The orphaned writer process exits at once (end of its socket): within
    // 1 s, with no process of the rank left.
    bool gone = false;
    while (!gone && std::chrono::steady_clock::now() < killed + std::chrono::seconds(1)) {
      while (::waitpid(-1, &status, WNOHANG) > 0) {
      }
      gone = no_children();
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHECK(gone);
    if (!gone) {
      for (pid_t w : writers) ::kill(w, SIGKILL);
      while (::waitpid(-1, &status, 0) > 0) {
      }
    }
    json t;
    CHECK_NOTHROW(t = load(file));
    if (t.is_array() && t.size() > 200) ++valid;
    fs::remove(file, ec);
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
  CHECK(valid == kKills);
}

TEST_CASE("timeline: the writer process ends with the rank even when a fork of the rank holds its socket",
          "[timeline]") {
  TempDir dir;
  const fs::path file = dir.path / "t.json";
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0);
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  const pid_t rank = fork();
  REQUIRE(rank >= 0);
  if (rank == 0) {
    ::close(ready[0]);
    Timeline tl;
    tl.start(file.string(), true);
    // A fork without exec (as a fork-start DataLoader worker): it inherits
    // the rank's end of the writer's socket and outlives the rank.
    const pid_t holder = fork();
    if (holder == 0) {
      ::close(ready[1]);
      std::this_thread::sleep_for(std::chrono::seconds(5));
      _exit(0);
    }
    (void)::write(ready[1], &holder, sizeof holder);
    std::this_thread::sleep_for(std::chrono::seconds(20));  // bounded: killed long before
    _exit(0);
  }
  ::close(ready[1]);
  pid_t holder = -1;
  REQUIRE(::read(ready[0], &holder, sizeof holder) == static_cast<ssize_t>(sizeof holder));
  ::close(ready[0]);
  std::vector<pid_t> writers;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while ((writers = writer_processes(rank)).empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  REQUIRE(writers.size() == 1);
  REQUIRE(::kill(rank, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(rank, &status, 0) == rank);
  // The writer (now this process's child) sees its parent change within
  // its 200 ms check, while the holder still has the socket open.
  const auto killed = std::chrono::steady_clock::now();
  bool gone = false;
  while (!gone && std::chrono::steady_clock::now() < killed + std::chrono::seconds(1)) {
    gone = ::waitpid(writers[0], &status, WNOHANG) == writers[0];
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  CHECK(gone);
  CHECK(comm_and_ppid(holder).second == ::getpid());  // the holder still runs
  for (pid_t p : {holder, writers[0]}) ::kill(p, SIGKILL);
  while (::waitpid(-1, &status, 0) > 0) {
  }
  ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
  CHECK_NOTHROW(load(file));
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
    // submission may wake the thread before the second arrives -- on a
    // loaded machine 50 times in a row happened once): fused.
    for (int i = 0; i < 1000 && fused_pair < 0; ++i, ++pairs) {
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
