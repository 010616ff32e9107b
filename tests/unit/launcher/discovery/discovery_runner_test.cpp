// run_discovery_script against real scripts written to a temporary folder:
// output parsing, exit codes, signals, timeouts with children that keep the
// pipes open, output limits and a missing script.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "hvd/launcher/discovery/discovery.h"
#include "hvd/launcher/discovery/host_source.h"

using hvd::launcher::DiscoveryResult;
using hvd::launcher::DiscoveryScriptOptions;
using hvd::launcher::HostSpec;
using hvd::launcher::run_discovery_script;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

/// A temporary folder holding executable scripts; removed at scope exit.
class ScriptDir {
 public:
  ScriptDir() {
    std::string tmpl = (fs::temp_directory_path() / "hvd_discovery_XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    dir_ = tmpl;
  }
  ~ScriptDir() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  /// Writes an executable `name` with `body` under a #!/bin/sh line.
  std::string script(const std::string& name, const std::string& body) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << "#!/bin/sh\n" << body;
    REQUIRE(::chmod(path.c_str(), 0755) == 0);
    return path;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

 private:
  fs::path dir_;
};

DiscoveryResult run(const std::string& script, std::chrono::milliseconds timeout = std::chrono::seconds(5),
                    int default_slots = 1) {
  DiscoveryScriptOptions o;
  o.script = script;
  o.timeout = timeout;
  o.default_slots = default_slots;
  return run_discovery_script(o);
}

std::string error_of(const DiscoveryResult& r) {
  REQUIRE_FALSE(r.ok());
  CHECK(r.error->find('\n') == std::string::npos);
  return *r.error;
}

/// True once no process of group `pgid` is left (reaping any that became
/// ours: the test process is a subreaper, since PID 1 here may not reap).
bool group_gone_within(pid_t pgid, std::chrono::milliseconds limit) {
  const auto until = Clock::now() + limit;
  for (;;) {
    int status;
    while (::waitpid(-pgid, &status, WNOHANG) > 0) {
    }
    if (::kill(-pgid, 0) != 0 && errno == ESRCH) return true;
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

pid_t read_pid(const std::string& path) {
  std::ifstream in(path);
  long pid = 0;
  in >> pid;
  return static_cast<pid_t>(pid);
}

}  // namespace

TEST_CASE("discovery script: hosts, host:slots and default slots", "[discovery_runner]") {
  ScriptDir d;
  auto s = d.script("d.sh", "echo '# fleet'\necho node1\necho node2:4\necho\necho '  node3  '\n");
  auto r = run(s, std::chrono::seconds(5), 2);
  REQUIRE(r.ok());
  CHECK(r.hosts == std::vector<HostSpec>{{"node1", 2}, {"node2", 4}, {"node3", 2}});
  // A shell command, not only a path; empty output is an empty host set.
  auto cmd = run("printf 'a:3\\nb\\n'");
  REQUIRE(cmd.ok());
  CHECK(cmd.hosts == std::vector<HostSpec>{{"a", 3}, {"b", 1}});
  auto empty = run("true");
  REQUIRE(empty.ok());
  CHECK(empty.hosts.empty());
}

TEST_CASE("discovery script: non-zero exit names the code and the last stderr line", "[discovery_runner]") {
  ScriptDir d;
  auto s =
      d.script("fail.sh", "echo host1\necho 'first problem' >&2\necho 'cannot reach the API' >&2\necho >&2\nexit 2\n");
  CHECK(error_of(run(s)) == "host discovery script '" + s + "' exited with code 2: cannot reach the API");
  auto quiet = d.script("quiet.sh", "exit 3\n");
  CHECK(error_of(run(quiet)) == "host discovery script '" + quiet + "' exited with code 3 (no stderr output)");
}

TEST_CASE("discovery script: killed by a signal", "[discovery_runner]") {
  ScriptDir d;
  auto s = d.script("segv.sh", "echo host1\nkill -SEGV $$\n");
  CHECK(error_of(run(s)) == "host discovery script '" + s + "' was killed by SIGSEGV");
}

TEST_CASE("discovery script: a hang is killed with its children within timeout + 1 s", "[discovery_runner]") {
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  ScriptDir d;
  const std::string pid_file = d.path("pid");
  // The background sleep inherits stdout/stderr: reading until EOF would
  // wait for it, so the runner must stop at the deadline.
  auto s = d.script("hang.sh", "echo $$ > '" + pid_file + "'\necho host1\nsleep 30 &\nsleep 30\n");
  const auto t0 = Clock::now();
  auto r = run(s, std::chrono::milliseconds(1500));
  const auto took = Clock::now() - t0;
  CHECK(error_of(r) == "host discovery script '" + s + "' timed out after 1.5 s and was killed");
  CHECK(took >= std::chrono::milliseconds(1400));
  CHECK(took < std::chrono::milliseconds(2500));
  const pid_t pgid = read_pid(pid_file);
  REQUIRE(pgid > 1);
  CHECK(group_gone_within(pgid, std::chrono::seconds(2)));
}

TEST_CASE("discovery script: a child left holding the pipes does not delay a finished run", "[discovery_runner]") {
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  ScriptDir d;
  const std::string pid_file = d.path("pid");
  auto s = d.script("bg.sh", "echo $$ > '" + pid_file + "'\necho host1:2\nsleep 30 &\nexit 0\n");
  const auto t0 = Clock::now();
  auto r = run(s, std::chrono::seconds(10));
  CHECK(Clock::now() - t0 < std::chrono::seconds(2));
  REQUIRE(r.ok());
  CHECK(r.hosts == std::vector<HostSpec>{{"host1", 2}});
  CHECK(group_gone_within(read_pid(pid_file), std::chrono::seconds(2)));
}

TEST_CASE("discovery script: garbage output is a parse error naming the script", "[discovery_runner]") {
  ScriptDir d;
  auto s = d.script("garbage.sh", "echo node1\necho 'a b'\n");
  CHECK(error_of(run(s)) ==
        "host discovery script '" + s + "': malformed discovery output line 2 'a b': contains whitespace");
  auto bad_slots = d.script("slots.sh", "echo node1:many\n");
  CHECK(error_of(run(bad_slots)).find("malformed discovery output line 1 'node1:many'") != std::string::npos);
}

TEST_CASE("discovery script: huge output is refused and the script killed", "[discovery_runner]") {
  ScriptDir d;
  // Endless output: the runner must stop at the limit, not at the timeout.
  auto s = d.script("huge.sh", "yes node1\n");
  const auto t0 = Clock::now();
  DiscoveryScriptOptions o;
  o.script = s;
  o.timeout = std::chrono::seconds(10);
  auto r = run_discovery_script(o);
  CHECK(Clock::now() - t0 < std::chrono::seconds(5));
  CHECK(error_of(r) == "host discovery script '" + s + "' printed more than 1 MiB (a host list is expected)");
  o.max_output_bytes = 1000;
  o.script = "seq 1 1000";
  CHECK(error_of(run_discovery_script(o)) ==
        "host discovery script 'seq 1 1000' printed more than 1000 bytes (a host list is expected)");
}

TEST_CASE("discovery script: a missing script exits 127 with the shell's reason", "[discovery_runner]") {
  ScriptDir d;
  const std::string missing = d.path("no_such_script.sh");
  const std::string e = error_of(run(missing));
  INFO(e);
  CHECK(e.rfind("host discovery script '" + missing + "' exited with code 127: ", 0) == 0);
  CHECK(e.find("not found") != std::string::npos);
  // Not executable: 126.
  auto s = d.script("noexec.sh", "echo host\n");
  REQUIRE(::chmod(s.c_str(), 0644) == 0);
  CHECK(error_of(run(s)).find("exited with code 126") != std::string::npos);
}

TEST_CASE("discovery script: stdin is /dev/null and signals are reset", "[discovery_runner]") {
  // A script reading stdin must see EOF at once, never hvdrun's terminal.
  auto r = run("cat; echo node1");
  REQUIRE(r.ok());
  CHECK(r.hosts.size() == 1);
  // A blocked SIGTERM in the caller must not be inherited by the script.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGTERM);
  REQUIRE(::pthread_sigmask(SIG_BLOCK, &block, &old) == 0);
  auto killed = run("kill -TERM $$; sleep 5");
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  CHECK(error_of(killed) == "host discovery script 'kill -TERM $$; sleep 5' was killed by SIGTERM");
}

TEST_CASE("discovery script: cancel() ends a hung run at once with its children, and later runs never start",
          "[discovery_runner]") {
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  ScriptDir d;
  const std::string pid_file = d.path("pid");
  auto s = d.script("hang.sh", "echo $$ >> '" + pid_file + "'\nsleep 30 &\nsleep 30\n");
  DiscoveryScriptOptions o;
  o.script = s;
  o.timeout = std::chrono::seconds(30);
  hvd::launcher::ScriptHostSource source(o);
  std::thread canceller([&] {
    while (read_pid(pid_file) <= 1) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    source.cancel();
  });
  const auto t0 = Clock::now();
  DiscoveryResult r = source.discover();
  const auto took = Clock::now() - t0;
  canceller.join();
  CHECK(error_of(r) == "host discovery script '" + s + "' was stopped: hvdrun is shutting down");
  CHECK(took < std::chrono::seconds(3));
  const pid_t pgid = read_pid(pid_file);
  REQUIRE(pgid > 1);
  CHECK(group_gone_within(pgid, std::chrono::seconds(2)));
  // Once cancelled, a run is not even started.
  const auto t1 = Clock::now();
  CHECK(error_of(source.discover()) == "host discovery script '" + s + "' was stopped: hvdrun is shutting down");
  CHECK(Clock::now() - t1 < std::chrono::milliseconds(500));
  std::ifstream in(pid_file);
  std::string line;
  int runs = 0;
  while (std::getline(in, line)) ++runs;
  CHECK(runs == 1);
}

TEST_CASE("discovery script: a run whose caller is SIGKILLed dies with its children (the guard)",
          "[discovery_runner]") {
  // The caller is a forked copy of this test; the script and its guard are
  // its children. kill -9 of the caller must not leave the script's group
  // running under a reaper (here: this process, a subreaper).
  REQUIRE(::prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  ScriptDir d;
  const std::string pid_file = d.path("pid");
  auto s = d.script("hang.sh", "echo $$ > '" + pid_file + "'\nsleep 30 &\nsleep 30\n");
  const pid_t caller = ::fork();
  REQUIRE(caller >= 0);
  if (caller == 0) {
    DiscoveryScriptOptions o;
    o.script = s;
    o.timeout = std::chrono::seconds(30);
    run_discovery_script(o);
    ::_exit(0);
  }
  const auto until = Clock::now() + std::chrono::seconds(10);
  while (read_pid(pid_file) <= 1 && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const pid_t pgid = read_pid(pid_file);
  REQUIRE(pgid > 1);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the background sleep is up
  REQUIRE(::kill(caller, SIGKILL) == 0);
  int status = 0;
  REQUIRE(::waitpid(caller, &status, 0) == caller);
  CHECK(group_gone_within(pgid, std::chrono::seconds(3)));
  // The guard itself is gone too: nothing of the run is left as our child.
  bool no_children = false;
  for (const auto t = Clock::now() + std::chrono::seconds(3); Clock::now() < t;) {
    const pid_t p = ::waitpid(-1, &status, WNOHANG);
    if (p < 0 && errno == ECHILD) {
      no_children = true;
      break;
    }
    if (p == 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  CHECK(no_children);
}
