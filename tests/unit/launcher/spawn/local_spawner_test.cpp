// The local spawner and the agent with real processes (/bin/sh workers).
#include "hvd/launcher/spawn/local_spawner.h"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <csignal>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

using namespace hvd::launcher;
using namespace std::chrono_literals;

namespace {

/// Collects output and exits; wait() blocks (bounded) until all exits arrived.
class RecordingSink : public EventSink {
 public:
  void on_output(int rank, Stream s, const char* data, std::size_t len) override {
    std::lock_guard<std::mutex> lock(mutex_);
    CHECK_FALSE(exits_.count(rank));  // output never follows the exit
    (s == Stream::Stdout ? out_ : err_)[rank].append(data, len);
  }
  void on_exit(const WorkerExit& e) override {
    std::lock_guard<std::mutex> lock(mutex_);
    CHECK_FALSE(exits_.count(e.rank));  // exactly once
    exits_[e.rank] = e;
    cv_.notify_all();
  }
  bool wait(std::size_t n, std::chrono::milliseconds timeout = 10s) {
    std::unique_lock<std::mutex> lock(mutex_);
    return cv_.wait_for(lock, timeout, [&] { return exits_.size() >= n; });
  }
  std::string out(int rank) {
    std::lock_guard<std::mutex> l(mutex_);
    return out_[rank];
  }
  std::string err(int rank) {
    std::lock_guard<std::mutex> l(mutex_);
    return err_[rank];
  }
  WorkerExit exit(int rank) {
    std::lock_guard<std::mutex> l(mutex_);
    return exits_.at(rank);
  }
  std::size_t exits() {
    std::lock_guard<std::mutex> l(mutex_);
    return exits_.size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::map<int, std::string> out_, err_;
  std::map<int, WorkerExit> exits_;
};

std::string unique_token() {
  std::random_device rd;
  return "hvdtok" + std::to_string(::getpid()) + "_" + std::to_string(rd());
}

WorkerSpec sh(int rank, const std::string& script, const std::string& token = "") {
  WorkerSpec w;
  w.slot.rank = rank;
  w.slot.hostname = "localhost";
  w.argv = {"/bin/sh", "-c", script};
  w.env = {{"PATH", "/usr/bin:/bin"}, {"HOROVOD_RANK", std::to_string(rank)}};
  if (!token.empty()) w.env["HVD_TEST_TOKEN"] = token;
  w.cwd = "/";
  return w;
}

/// Processes whose environment carries `token` (workers and their children).
int processes_with(const std::string& token) {
  int count = 0;
  DIR* d = ::opendir("/proc");
  if (!d) return 0;
  const std::string needle = "HVD_TEST_TOKEN=" + token;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/environ", std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string env = ss.str();
    // Zombies have an empty environ: they are dead already.
    if (env.find(needle) != std::string::npos) ++count;
  }
  ::closedir(d);
  return count;
}

bool none_left(const std::string& token, std::chrono::milliseconds within) {
  auto until = hvd::Clock::now() + within;
  while (processes_with(token) > 0) {
    if (hvd::Clock::now() > until) return false;
    std::this_thread::sleep_for(20ms);
  }
  return true;
}

std::unique_ptr<Spawner> spawner(std::chrono::milliseconds grace = 3000ms) {
  LocalSpawnerOptions o;
  o.agent_command = {HVD_TEST_AGENT};
  o.kill_grace = grace;
  return make_local_spawner(o);
}

}  // namespace

TEST_CASE("LocalSpawner: output, environment, cwd and exit codes arrive per rank", "[local_spawner]") {
  RecordingSink sink;
  auto sp = spawner();
  std::vector<WorkerSpec> ws;
  ws.push_back(sh(0, "echo out $HOROVOD_RANK; echo err >&2; pwd; printf 'no newline'"));
  ws.push_back(sh(1, "echo rank $HOROVOD_RANK; exit 3"));
  ws[1].cwd = "/tmp";
  sp->launch(ws, sink, hvd::Deadline::after(5s));
  REQUIRE(sink.wait(2));
  CHECK(sink.out(0) == "out 0\n/\nno newline");
  CHECK(sink.err(0) == "err\n");
  CHECK(sink.exit(0).status == 0);
  CHECK(sink.out(1) == "rank 1\n");
  CHECK(sink.exit(1).status == 3);
  sp->shutdown();
}

TEST_CASE("LocalSpawner: the worker gets exactly the spec's environment", "[local_spawner]") {
  RecordingSink sink;
  auto sp = spawner();
  WorkerSpec w = sh(0, "");
  w.argv = {"env"};  // not via sh: dash drops names with dots
  w.env["my.dotted.name"] = "1";
  w.env["MULTI"] = "line one\nline two";
  w.env["BASH_FUNC_x%%"] = "() { echo hi; }";
  ::setenv("HVD_LAUNCHER_ONLY", "must not leak", 1);
  sp->launch({w}, sink, hvd::Deadline::after(5s));
  REQUIRE(sink.wait(1));
  ::unsetenv("HVD_LAUNCHER_ONLY");
  std::string env = sink.out(0);
  CHECK_THAT(env, Catch::Contains("my.dotted.name=1\n"));
  CHECK_THAT(env, Catch::Contains("MULTI=line one\nline two\n"));
  CHECK_THAT(env, Catch::Contains("HOROVOD_RANK=0\n"));
  CHECK_THAT(env, !Catch::Contains("HVD_LAUNCHER_ONLY"));
  CHECK_THAT(env, !Catch::Contains("HVDRUN_KILL_GRACE_MS"));
}

TEST_CASE("LocalSpawner: command not found is 127 with a clear message", "[local_spawner]") {
  RecordingSink sink;
  auto sp = spawner();
  WorkerSpec w = sh(0, "");
  w.argv = {"hvd-no-such-command-xyz", "--flag"};
  WorkerSpec w2 = sh(1, "");
  w2.argv = {"/etc/passwd"};  // exists, not executable
  WorkerSpec w3 = sh(2, "");
  w3.argv = {"echo", "found via the worker's PATH"};
  sp->launch({w, w2, w3}, sink, hvd::Deadline::after(5s));
  REQUIRE(sink.wait(3));
  CHECK(sink.exit(0).status == 127);
  CHECK(sink.err(0) == "hvdrun: hvd-no-such-command-xyz: command not found\n");
  CHECK(sink.exit(1).status == 126);
  CHECK_THAT(sink.err(1), Catch::Contains("/etc/passwd: cannot execute: Permission denied"));
  CHECK(sink.exit(2).status == 0);
  CHECK(sink.out(2) == "found via the worker's PATH\n");
}

TEST_CASE("LocalSpawner: a missing working directory fails with its name", "[local_spawner]") {
  RecordingSink sink;
  auto sp = spawner();
  WorkerSpec w = sh(0, "true");
  w.cwd = "/nonexistent/hvd-dir";
  sp->launch({w}, sink, hvd::Deadline::after(5s));
  REQUIRE(sink.wait(1));
  CHECK(sink.exit(0).status == 1);
  CHECK_THAT(sink.err(0), Catch::Contains("cannot change to directory '/nonexistent/hvd-dir'"));
}

TEST_CASE("LocalSpawner: signals reach the worker's process group", "[local_spawner]") {
  auto [sig, status] = GENERATE(std::make_pair(SIGTERM, 143), std::make_pair(SIGINT, 130), std::make_pair(SIGHUP, 129),
                                std::make_pair(SIGKILL, 137));
  RecordingSink sink;
  auto sp = spawner();
  std::string token = unique_token();
  // `exec sleep` keeps the worker a single process that dies by the signal.
  sp->launch({sh(0, "echo ready; exec sleep 30", token)}, sink, hvd::Deadline::after(5s));
  auto until = hvd::Clock::now() + 5s;
  while (sink.out(0).empty() && hvd::Clock::now() < until) std::this_thread::sleep_for(5ms);
  sp->signal(0, sig);
  REQUIRE(sink.wait(1, 5s));
  CHECK(sink.exit(0).status == status);
  CHECK(none_left(token, 2s));
  sp->shutdown();
}

TEST_CASE("LocalSpawner: shutdown kills workers that ignore SIGTERM after the grace", "[local_spawner]") {
  RecordingSink sink;
  auto sp = spawner(300ms);
  std::string token = unique_token();
  sp->launch({sh(0, "trap '' TERM; echo ready; while :; do sleep 0.05; done", token),
              sh(1, "echo ready; sleep 30 & wait", token)},
             sink, hvd::Deadline::after(5s));
  auto until = hvd::Clock::now() + 5s;
  while ((sink.out(0).empty() || sink.out(1).empty()) && hvd::Clock::now() < until) std::this_thread::sleep_for(5ms);
  REQUIRE(processes_with(token) >= 3);
  auto t0 = hvd::Clock::now();
  sp->shutdown();
  CHECK(hvd::Clock::now() - t0 < 3s);
  CHECK(sink.exits() == 2);
  CHECK(sink.exit(0).status == 128 + SIGKILL);
  CHECK(sink.exit(1).status == 128 + SIGTERM);
  CHECK(none_left(token, 2s));
}

TEST_CASE("LocalSpawner: what a worker leaves in its group dies with it", "[local_spawner]") {
  RecordingSink sink;
  auto sp = spawner();
  std::string token = unique_token();
  // The background sleep even holds the output pipes open.
  sp->launch({sh(0, "sleep 300 & echo bye", token)}, sink, hvd::Deadline::after(5s));
  REQUIRE(sink.wait(1, 5s));
  CHECK(sink.exit(0).status == 0);
  CHECK(sink.out(0) == "bye\n");
  CHECK(none_left(token, 2s));
  sp->shutdown();
}

TEST_CASE("LocalSpawner: an agent whose launcher vanishes kills its worker", "[local_spawner]") {
  // Closing the control socket is what the kernel does when hvdrun dies.
  RecordingSink sink;
  auto sp = spawner(300ms);
  std::string token = unique_token();
  sp->launch({sh(0, "echo ready; sleep 30", token)}, sink, hvd::Deadline::after(5s));
  auto until = hvd::Clock::now() + 5s;
  while (sink.out(0).empty() && hvd::Clock::now() < until) std::this_thread::sleep_for(5ms);
  sp.reset();  // destructor == shutdown: closes stdin of the agent
  CHECK(sink.exits() == 1);
  CHECK(none_left(token, 2s));
}

/// PIDs of the live children of `parent` whose argv[0] is `argv0`.
std::vector<pid_t> children_running(pid_t parent, const std::string& argv0) {
  std::vector<pid_t> out;
  DIR* d = ::opendir("/proc");
  while (dirent* e = d ? ::readdir(d) : nullptr) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    std::getline(stat, line);
    auto close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    std::ifstream cmd(std::string("/proc/") + e->d_name + "/cmdline");
    std::string first;
    std::getline(cmd, first, '\0');
    if (ppid == parent && state != 'Z' && first == argv0) out.push_back(std::atoi(e->d_name));
  }
  if (d) ::closedir(d);
  return out;
}

/// PIDs of our own children running the test agent.
std::vector<pid_t> our_agents() { return children_running(::getpid(), HVD_TEST_AGENT); }

TEST_CASE("Agent: a worker does not outlive its agent, whether it is terminated or killed", "[agent]") {
  // SIGTERM: the agent stops its worker and reports 143; SIGKILL: the
  // worker's parent-death signal takes it down and 137 is reported.
  for (int sig : {SIGTERM, SIGKILL}) {
    INFO("signal " << sig);
    RecordingSink sink;
    auto sp = spawner();
    std::string token = unique_token();
    sp->launch({sh(0, "echo ready; exec sleep 30", token)}, sink, hvd::Deadline::after(5s));
    auto until = hvd::Clock::now() + 5s;
    while (sink.out(0).empty() && hvd::Clock::now() < until) std::this_thread::sleep_for(5ms);
    auto agents = our_agents();
    REQUIRE(agents.size() == 1);
    ::kill(agents[0], sig);
    REQUIRE(sink.wait(1, 5s));
    CHECK(sink.exit(0).status == 128 + sig);
    CHECK(none_left(token, 2s));
    sp->shutdown();
  }
}

/// The guard process of agent `agent` (argv[0] "hvdrun-agent-guard"), or 0.
pid_t guard_of(pid_t agent) {
  auto found = children_running(agent, "hvdrun-agent-guard");
  return found.empty() ? 0 : found[0];
}

/// guard_of, waiting up to 5 s (the guard is forked, then execs itself).
pid_t wait_guard(pid_t agent) {
  auto until = hvd::Clock::now() + 5s;
  pid_t g = 0;
  while ((g = guard_of(agent)) == 0 && hvd::Clock::now() < until) std::this_thread::sleep_for(5ms);
  return g;
}

/// Whether `pid` has exited within `limit` (a zombie not yet reaped by
/// whoever inherited it counts as exited).
bool gone_within(pid_t pid, std::chrono::milliseconds limit) {
  auto until = hvd::Clock::now() + limit;
  while (hvd::Clock::now() < until) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    std::getline(stat, line);
    const auto close = line.rfind(')');
    if (close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z') return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

TEST_CASE("Agent: what a worker started does not outlive a killed agent, and its guard ends with the agent", "[agent]") {
  // The worker's shell starts a background sleep in its group, then waits.
  // The parent-death signal takes the shell down when the agent is killed;
  // the agent's guard kills the rest of the group.
  SECTION("kill -9 of the agent") {
    RecordingSink sink;
    auto sp = spawner();
    std::string token = unique_token();
    sp->launch({sh(0, "sleep 30 & echo ready; wait", token)}, sink, hvd::Deadline::after(5s));
    auto until = hvd::Clock::now() + 5s;
    while (sink.out(0).empty() && hvd::Clock::now() < until) std::this_thread::sleep_for(5ms);
    auto agents = our_agents();
    REQUIRE(agents.size() == 1);
    const pid_t guard = wait_guard(agents[0]);
    REQUIRE(guard > 0);
    ::kill(agents[0], SIGKILL);
    REQUIRE(sink.wait(1, 5s));
    CHECK(none_left(token, 2s));
    CHECK(gone_within(guard, 5s));
    sp->shutdown();
  }
  SECTION("a normal end: the guard ends too, killing nothing") {
    RecordingSink sink;
    auto sp = spawner();
    sp->launch({sh(0, "echo ready; sleep 0.5")}, sink, hvd::Deadline::after(5s));
    auto agents = our_agents();
    REQUIRE(agents.size() == 1);
    const pid_t guard = wait_guard(agents[0]);
    REQUIRE(guard > 0);
    REQUIRE(sink.wait(1, 5s));
    CHECK(sink.exit(0).status == 0);
    sp->shutdown();
    CHECK(gone_within(guard, 5s));
  }
}

TEST_CASE("LocalSpawner: large output arrives complete", "[local_spawner]") {
  RecordingSink sink;
  auto sp = spawner();
  sp->launch({sh(0, "head -c 3000000 /dev/zero; head -c 1000000 /dev/zero >&2")}, sink, hvd::Deadline::after(5s));
  REQUIRE(sink.wait(1));
  CHECK(sink.out(0).size() == 3000000);
  CHECK(sink.err(0).size() == 1000000);
}

TEST_CASE("LocalSpawner: an agent that cannot start is a LaunchError", "[local_spawner]") {
  RecordingSink sink;
  LocalSpawnerOptions o;
  o.agent_command = {"/nonexistent/hvdrun-agent"};
  auto sp = make_local_spawner(o);
  CHECK_THROWS_AS(sp->launch({sh(0, "true")}, sink, hvd::Deadline::after(5s)), LaunchError);
  sp->shutdown();
  CHECK(sink.exits() == 0);
}

TEST_CASE("Agent: a malformed frame is refused with a one-line error", "[agent]") {
  RecordingSink sink;
  // The agent itself as a worker, fed bytes by /bin/sh: the old JSON spec,
  // an unknown frame type, Done before Hello.
  const std::map<std::string, std::string> cases = {
      {"{argv: [true]}", "hvdrun-agent: from the launcher: bad frame length "},
      {"\\001\\000\\000\\000Z", "hvdrun-agent: from the launcher: bad frame: unknown type 'Z' (0x5a)\n"},
      {"\\001\\000\\000\\000D", "hvdrun-agent: the launcher's first frame is Done, not Hello\n"},
  };
  auto sp = spawner();
  std::vector<WorkerSpec> ws;
  for (const auto& [bytes, message] : cases) {
    ws.push_back(sh(static_cast<int>(ws.size()), "printf '" + bytes + "' | " + HVD_TEST_AGENT + " >/dev/null"));
  }
  sp->launch(ws, sink, hvd::Deadline::after(5s));
  REQUIRE(sink.wait(cases.size()));
  int rank = 0;
  for (const auto& [bytes, message] : cases) {
    INFO(bytes);
    CHECK(sink.exit(rank).status == 125);
    const std::string err = sink.err(rank);
    CHECK_THAT(err, Catch::StartsWith(message));
    CHECK(std::count(err.begin(), err.end(), '\n') == 1);
    ++rank;
  }
}

TEST_CASE("Agent: arguments are refused", "[agent]") {
  RecordingSink sink;
  auto sp = spawner();
  sp->launch({sh(0, std::string(HVD_TEST_AGENT) + " --agent </dev/null")}, sink, hvd::Deadline::after(5s));
  REQUIRE(sink.wait(1));
  CHECK(sink.exit(0).status == 2);
  CHECK_THAT(sink.err(0), Catch::StartsWith("hvdrun-agent: takes no arguments"));
}

TEST_CASE("LocalSpawner: one agent starts all of a launch's workers", "[local_spawner]") {
  RecordingSink sink;
  auto sp = spawner();
  std::string token = unique_token();
  std::vector<WorkerSpec> ws;
  for (int r = 0; r < 8; ++r) ws.push_back(sh(r, "echo ready; exec sleep 30", token));
  sp->launch(ws, sink, hvd::Deadline::after(5s));
  auto until = hvd::Clock::now() + 5s;
  auto all_ready = [&] {
    for (int r = 0; r < 8; ++r) {
      if (sink.out(r).empty()) return false;
    }
    return true;
  };
  while (!all_ready() && hvd::Clock::now() < until) std::this_thread::sleep_for(5ms);
  REQUIRE(all_ready());
  CHECK(our_agents().size() == 1);
  CHECK(processes_with(token) == 8);
  sp->shutdown();
  CHECK(sink.exits() == 8);
  CHECK(none_left(token, 2s));
}

TEST_CASE("LocalSpawner: a signal reaches one worker of the agent, not the others", "[local_spawner]") {
  // Elastic mode stops single workers: Spawner::signal(serial, sig).
  RecordingSink sink;
  auto sp = spawner(300ms);
  std::string token = unique_token();
  std::vector<WorkerSpec> ws;
  for (int r = 0; r < 3; ++r) ws.push_back(sh(r, "echo ready; exec sleep 30", token));
  sp->launch(ws, sink, hvd::Deadline::after(5s));
  auto until = hvd::Clock::now() + 5s;
  while ((sink.out(0).empty() || sink.out(1).empty() || sink.out(2).empty()) && hvd::Clock::now() < until) {
    std::this_thread::sleep_for(5ms);
  }
  sp->signal(1, SIGTERM);
  REQUIRE(sink.wait(1, 5s));
  CHECK(sink.exit(1).status == 128 + SIGTERM);
  CHECK(sink.exit(1).lost_reason.empty());
  std::this_thread::sleep_for(100ms);
  CHECK(sink.exits() == 1);
  CHECK(processes_with(token) == 2);
  sp->signal(1, SIGKILL);  // already gone: nothing happens
  sp->signal(0, SIGUSR1);  // not carried: nothing happens
  sp->signal(2, SIGKILL);
  REQUIRE(sink.wait(2, 5s));
  CHECK(sink.exit(2).status == 128 + SIGKILL);
  sp->shutdown();
  CHECK(sink.exit(0).status == 128 + SIGTERM);
  CHECK(none_left(token, 2s));
}

TEST_CASE("LocalSpawner: starting workers is fast", "[local_spawner]") {
  RecordingSink sink;
  auto sp = spawner();
  std::vector<WorkerSpec> ws;
  for (int r = 0; r < 4; ++r) ws.push_back(sh(r, "true"));
  ws[0].argv = {"/bin/true"};
  auto t0 = hvd::Clock::now();
  sp->launch(ws, sink, hvd::Deadline::after(5s));
  REQUIRE(sink.wait(4));
  auto took = hvd::Clock::now() - t0;
  // Generous for a loaded 2-core CI box; typical is a few milliseconds.
  CHECK(took < 1s);
  sp->shutdown();
}
