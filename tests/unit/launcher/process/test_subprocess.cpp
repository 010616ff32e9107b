// Subprocess with real processes: exec failures, PATH search, descriptors,
// process groups, parent-death signal, killing and reaping.
#include "hvd/launcher/process/subprocess.h"

#include "hvd/launcher/process/signals.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

using namespace hvd::launcher;
using namespace std::chrono_literals;
using hvd::Deadline;

namespace {

/// A pipe whose ends close at scope exit; both ends close-on-exec.
struct Pipe {
  hvd::UniqueFd read, write;
  Pipe() {
    int fds[2];
    REQUIRE(::pipe2(fds, O_CLOEXEC) == 0);
    read.reset(fds[0]);
    write.reset(fds[1]);
  }
};

/// Everything until EOF (bounded: a test never hangs on a leaked write end).
std::string read_all(int fd, std::chrono::milliseconds limit = 10s) {
  const Deadline deadline = Deadline::after(limit);
  std::string out;
  char buf[4096];
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    int rc = ::poll(&p, 1, deadline.poll_timeout_ms());
    REQUIRE(rc >= 0);
    if (rc == 0) FAIL("no EOF within the limit; read so far: " << out);
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    REQUIRE(n >= 0);
    if (n == 0) return out;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

/// Reads one line (without the newline).
std::string read_line(int fd) {
  std::string line;
  char c;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 10000) == 1);
    REQUIRE(::read(fd, &c, 1) == 1);
    if (c == '\n') return line;
    line += c;
  }
}

/// Spawns `options` with stdout on `out` (whose write end we then close).
Subprocess spawn_to(SpawnOptions options, Pipe& out) {
  options.stdout_fd = ChildFd::from(out.write.get());
  Subprocess child = Subprocess::spawn(options);
  out.write.reset();
  return child;
}

/// Runs `options` with stdout on a pipe; returns stdout and the wait status.
std::pair<std::string, int> run(SpawnOptions options) {
  Pipe out;
  Subprocess child = spawn_to(std::move(options), out);
  std::string text = read_all(out.read.get());
  auto status = child.reap_until(Deadline::after(10s));
  REQUIRE(status.has_value());
  return {text, *status};
}

std::pair<std::string, int> run_sh(const std::string& script) {
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", script};
  return run(options);
}

/// A fresh directory removed at scope exit.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/hvd_subprocess_testXXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }
  /// Writes `name` with `content` and mode `mode`; returns its path.
  std::string file(const std::string& name, const std::string& content, mode_t mode) const {
    std::string p = path_ + "/" + name;
    std::ofstream(p) << content;
    REQUIRE(::chmod(p.c_str(), mode) == 0);
    return p;
  }

 private:
  std::string path_;
};

/// Gone, or a zombie nobody reaps (PID 1 in a container may not).
bool dead(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return true;
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto close_paren = all.rfind(')');
  return close_paren != std::string::npos && close_paren + 2 < all.size() && all[close_paren + 2] == 'Z';
}

bool dead_within(pid_t pid, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < until) {
    if (dead(pid)) return true;
    std::this_thread::sleep_for(10ms);
  }
  return dead(pid);
}

template <typename Fn>
SpawnError spawn_error(Fn&& fn) {
  try {
    fn();
  } catch (const SpawnError& e) {
    return e;
  }
  FAIL("no SpawnError");
  throw;  // unreachable
}

}  // namespace

TEST_CASE("Subprocess: a program that is not found is SpawnError with status 127", "[subprocess]") {
  SpawnOptions options;
  options.argv = {"hvd-no-such-program-anywhere", "x"};
  SpawnError e = spawn_error([&] { Subprocess::spawn(options); });
  CHECK(e.stage() == SpawnError::Stage::Exec);
  CHECK(e.error_number() == ENOENT);
  CHECK(e.exit_status() == 127);
  CHECK(std::string(e.what()) == "hvd-no-such-program-anywhere: command not found");

  options.argv = {"/nonexistent/dir/prog"};
  e = spawn_error([&] { Subprocess::spawn(options); });
  CHECK(e.error_number() == ENOENT);
  CHECK(e.exit_status() == 127);
  CHECK(std::string(e.what()).find("/nonexistent/dir/prog") != std::string::npos);
  // The failed child was reaped before spawn threw.
  CHECK(::waitpid(-1, nullptr, WNOHANG) == -1);
  CHECK(errno == ECHILD);
}

TEST_CASE("Subprocess: a file that is not executable is SpawnError with status 126", "[subprocess]") {
  TempDir dir;
  const std::string path = dir.file("plain", "echo never\n", 0644);
  SpawnOptions options;
  options.argv = {path};
  SpawnError e = spawn_error([&] { Subprocess::spawn(options); });
  CHECK(e.stage() == SpawnError::Stage::Exec);
  CHECK(e.error_number() == EACCES);
  CHECK(e.exit_status() == 126);

  // Found only without permission on the search path: EACCES, not "not found".
  options.argv = {"plain"};
  options.search_path = dir.path();
  e = spawn_error([&] { Subprocess::spawn(options); });
  CHECK(e.error_number() == EACCES);
  CHECK(e.exit_status() == 126);
}

TEST_CASE("Subprocess: a missing working directory is SpawnError naming it", "[subprocess]") {
  SpawnOptions options;
  options.argv = {"/bin/true"};
  options.cwd = "/nonexistent/hvd-cwd";
  SpawnError e = spawn_error([&] { Subprocess::spawn(options); });
  CHECK(e.stage() == SpawnError::Stage::Chdir);
  CHECK(e.error_number() == ENOENT);
  CHECK(e.exit_status() == 1);
  CHECK(std::string(e.what()).find("/nonexistent/hvd-cwd") != std::string::npos);

  options.cwd = "/";
  options.argv = {"/bin/sh", "-c", "pwd"};
  CHECK(run(options).first == "/\n");
}

TEST_CASE("Subprocess: the environment is exactly the given one, or ours", "[subprocess]") {
  SpawnOptions options;
  options.argv = {"/usr/bin/env"};
  options.env = std::vector<std::string>{"HVD_A=1", "HVD_B=two words"};
  CHECK(run(options).first == "HVD_A=1\nHVD_B=two words\n");

  REQUIRE(::setenv("HVD_SUBPROCESS_INHERITED", "from-parent", 1) == 0);
  options.env.reset();
  options.argv = {"/bin/sh", "-c", "echo \"$HVD_SUBPROCESS_INHERITED\""};
  CHECK(run(options).first == "from-parent\n");
  ::unsetenv("HVD_SUBPROCESS_INHERITED");
}

TEST_CASE("Subprocess: a program name is searched in search_path, else the env's PATH", "[subprocess]") {
  TempDir dir;
  dir.file("hvd-only-here", "#!/bin/sh\necho found \"$1\"\n", 0755);
  SpawnOptions options;
  options.argv = {"hvd-only-here", "arg"};
  options.env = std::vector<std::string>{"PATH=/usr/bin:/bin"};
  // Not on the env's PATH (nor ours).
  CHECK(spawn_error([&] { Subprocess::spawn(options); }).exit_status() == 127);

  options.search_path = "/nonexistent:" + dir.path();
  CHECK(run(options).first == "found arg\n");

  // Without search_path: the PATH of the given environment, not ours.
  options.search_path.reset();
  options.env = std::vector<std::string>{"PATH=" + dir.path()};
  CHECK(run(options).first == "found arg\n");

  // A directory with a non-executable copy first: the search goes on.
  TempDir first;
  first.file("hvd-only-here", "echo wrong\n", 0644);
  options.env.reset();
  options.search_path = first.path() + ":" + dir.path();
  CHECK(run(options).first == "found arg\n");
}

TEST_CASE("Subprocess: a script without #! runs through /bin/sh", "[subprocess]") {
  TempDir dir;
  const std::string path = dir.file("no-shebang", "echo \"via sh: $0 $1 $2\"\n", 0755);
  SpawnOptions options;
  options.argv = {path, "a", "b c"};
  CHECK(run(options).first == "via sh: " + path + " a b c\n");

  options.argv = {"no-shebang", "x"};
  options.search_path = dir.path();
  CHECK(run(options).first == "via sh: " + path + " x \n");
}

TEST_CASE("Subprocess: stdin is /dev/null unless told otherwise", "[subprocess]") {
  auto [text, status] = run_sh("readlink /proc/self/fd/0; cat; echo done");
  CHECK(text == "/dev/null\ndone\n");
  CHECK(exit_status_of(status) == 0);

  Pipe in;
  SpawnOptions options;
  options.argv = {"/bin/cat"};
  options.stdin_fd = ChildFd::from(in.read.get());
  Pipe out;
  Subprocess child = spawn_to(options, out);
  in.read.reset();
  REQUIRE(::write(in.write.get(), "piped\n", 6) == 6);
  in.write.reset();
  CHECK(read_all(out.read.get()) == "piped\n");
  CHECK(exit_status_of(child.reap()) == 0);
}

TEST_CASE("Subprocess: stdout and stderr go to the pipes given", "[subprocess]") {
  Pipe out, err;
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", "echo to-out; echo to-err >&2"};
  options.stdout_fd = ChildFd::from(out.write.get());
  options.stderr_fd = ChildFd::from(err.write.get());
  Subprocess child = Subprocess::spawn(options);
  out.write.reset();
  err.write.reset();
  CHECK(read_all(out.read.get()) == "to-out\n");
  CHECK(read_all(err.read.get()) == "to-err\n");
  CHECK(exit_status_of(child.reap()) == 0);
}

TEST_CASE("Subprocess: program runs a file other than argv[0], which is only the name shown", "[subprocess]") {
  Pipe out;
  SpawnOptions options;
  options.program = "/bin/sh";
  options.argv = {"shown-name", "-c", "echo $0; tr '\\0' ' ' </proc/$$/cmdline"};
  options.stdout_fd = ChildFd::from(out.write.get());
  Subprocess child = Subprocess::spawn(options);
  out.write.reset();
  CHECK(read_all(out.read.get()) == "shown-name\nshown-name -c echo $0; tr '\\0' ' ' </proc/$$/cmdline ");
  CHECK(exit_status_of(child.reap()) == 0);
  // A missing program is reported by its own name.
  options.program = "/nonexistent/dir/prog";
  options.stdout_fd = ChildFd::inherit();
  SpawnError e = spawn_error([&] { Subprocess::spawn(options); });
  CHECK(e.exit_status() == 127);
  CHECK(std::string(e.what()).find("/nonexistent/dir/prog") != std::string::npos);
}

TEST_CASE("Subprocess: standard descriptors can be swapped", "[subprocess]") {
  // Our own 1 and 2 become pipes for a moment; the child gets them crossed.
  // Sources below 3 must not overwrite each other in the child.
  Pipe a, b;
  hvd::UniqueFd saved1(::dup(1)), saved2(::dup(2));
  REQUIRE(saved1);
  REQUIRE(saved2);
  ::dup2(a.write.get(), 1);
  ::dup2(b.write.get(), 2);
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", "echo one; echo two >&2"};
  options.stdout_fd = ChildFd::from(2);
  options.stderr_fd = ChildFd::from(1);
  std::optional<Subprocess> child;
  std::string error;
  try {
    child.emplace(Subprocess::spawn(options));
  } catch (const std::exception& e) {
    error = e.what();
  }
  ::dup2(saved1.get(), 1);
  ::dup2(saved2.get(), 2);
  a.write.reset();
  b.write.reset();
  REQUIRE(error == "");
  CHECK(read_all(b.read.get()) == "one\n");
  CHECK(read_all(a.read.get()) == "two\n");
  CHECK(exit_status_of(child->reap()) == 0);
}

TEST_CASE("Subprocess: keep_fds are kept, every other descriptor is closed", "[subprocess]") {
  // Neither is close-on-exec: without Subprocess closing it, `leak` would
  // reach the child.
  hvd::UniqueFd leak(::open("/dev/null", O_RDONLY));
  REQUIRE(leak);
  int raw[2];
  REQUIRE(::pipe(raw) == 0);
  hvd::UniqueFd leak_read(raw[0]), leak_write(raw[1]);
  // The kept one *is* close-on-exec; the child clears the flag.
  Pipe kept;
  const int k = kept.write.get();

  SpawnOptions options;
  // ls lists the shell's table from outside (a listing of its own would
  // open a directory at the lowest free number).
  options.argv = {"/bin/sh", "-c", "ls /proc/$$/fd; echo via-kept >&" + std::to_string(k)};
  options.keep_fds = {k};
  auto [text, status] = run(options);
  kept.write.reset();
  CHECK(exit_status_of(status) == 0);
  std::set<int> open_fds;
  std::istringstream words(text);
  for (int fd; words >> fd;) open_fds.insert(fd);
  INFO("the child's descriptors: " << text);
  CHECK(open_fds.count(0));
  CHECK(open_fds.count(1));
  CHECK(open_fds.count(2));
  CHECK(open_fds.count(k));
  CHECK_FALSE(open_fds.count(leak.get()));
  CHECK_FALSE(open_fds.count(leak_read.get()));
  CHECK_FALSE(open_fds.count(leak_write.get()));
  CHECK(open_fds.size() == 4);
  CHECK(read_all(kept.read.get()) == "via-kept\n");
}

TEST_CASE("Subprocess: descriptors that are not open are refused before fork", "[subprocess]") {
  SpawnOptions options;
  options.argv = {"/bin/true"};
  options.keep_fds = {987654};
  CHECK_THROWS_AS(Subprocess::spawn(options), hvd::InvalidArgument);
  options.keep_fds = {1};
  CHECK_THROWS_AS(Subprocess::spawn(options), hvd::InvalidArgument);
  options.keep_fds.clear();
  options.stdout_fd = ChildFd::from(987654);
  CHECK_THROWS_AS(Subprocess::spawn(options), hvd::InvalidArgument);
  options.argv.clear();
  options.stdout_fd = ChildFd::inherit();
  CHECK_THROWS_AS(Subprocess::spawn(options), hvd::InvalidArgument);
}

TEST_CASE("Subprocess: the child leads its own process group", "[subprocess]") {
  SpawnOptions options;
  options.argv = {"/bin/sleep", "30"};
  Subprocess child = Subprocess::spawn(options);
  CHECK(::getpgid(child.pid()) == child.pid());
  CHECK(child.pidfd() >= 0);
  CHECK_FALSE(child.exited());
  child.kill_group_and_reap();

  options.new_process_group = false;
  Subprocess same_group = Subprocess::spawn(options);
  CHECK(::getpgid(same_group.pid()) == ::getpgrp());
  // Without its own group the group calls act on the child alone.
  CHECK(signal_of(same_group.kill_group_and_reap()) == SIGKILL);
}

TEST_CASE("Subprocess: signals are back to defaults in the child", "[subprocess]") {
  // Blocked and ignored here; a worker must still die of them.
  sigset_t set, old;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  REQUIRE(::pthread_sigmask(SIG_BLOCK, &set, &old) == 0);
  struct sigaction ign {
  }, old_usr1{};
  ign.sa_handler = SIG_IGN;
  ::sigaction(SIGUSR1, &ign, &old_usr1);
  auto [text, status] = run_sh("grep -E '^Sig(Blk|Ign)' /proc/self/status");
  ::sigaction(SIGUSR1, &old_usr1, nullptr);
  ::pthread_sigmask(SIG_SETMASK, &old, nullptr);
  CHECK(text == "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n");
  CHECK(exit_status_of(status) == 0);
}

TEST_CASE("Subprocess: the parent-death signal fires when the spawning thread exits", "[subprocess]") {
  Subprocess child;
  std::thread spawner([&] {
    SpawnOptions options;
    options.argv = {"/bin/sleep", "30"};
    options.parent_death_signal = SIGTERM;
    child = Subprocess::spawn(options);
  });
  spawner.join();
  REQUIRE(child.valid());
  auto status = child.reap_until(Deadline::after(5s));
  REQUIRE(status.has_value());
  CHECK(signal_of(*status) == SIGTERM);
}

TEST_CASE("Subprocess: kill_group_and_reap kills a grandchild in the group", "[subprocess]") {
  Pipe out;
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", "sleep 30 & echo $!; wait"};
  Subprocess child = spawn_to(options, out);
  const pid_t grandchild = std::stoi(read_line(out.read.get()));
  REQUIRE(::getpgid(grandchild) == child.pid());
  const int status = child.kill_group_and_reap();
  CHECK(signal_of(status) == SIGKILL);
  CHECK(child.reaped());
  CHECK(dead_within(grandchild, 5s));
  // Idempotent, and nothing is signalled once reaped.
  CHECK(child.kill_group_and_reap() == status);
  CHECK(child.wait_status() == status);
}

TEST_CASE("Subprocess: terminate_group escalates to SIGKILL for a child that traps TERM", "[subprocess]") {
  Pipe out;
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"};
  Subprocess stubborn = spawn_to(options, out);
  REQUIRE(read_line(out.read.get()) == "ready");
  const auto start = std::chrono::steady_clock::now();
  const int status = stubborn.terminate_group(300ms);
  const auto took = std::chrono::steady_clock::now() - start;
  CHECK(signal_of(status) == SIGKILL);
  CHECK(took >= 300ms);
  CHECK(took < 5s);

  // One that obeys SIGTERM is not made to wait for the grace.
  options.argv = {"/bin/sleep", "30"};
  Subprocess obedient = Subprocess::spawn(options);
  const auto start2 = std::chrono::steady_clock::now();
  CHECK(signal_of(obedient.terminate_group(10s)) == SIGTERM);
  CHECK(std::chrono::steady_clock::now() - start2 < 5s);
}

TEST_CASE("Subprocess: the destructor kills and reaps a child nobody reaped", "[subprocess]") {
  pid_t pid;
  const auto start = std::chrono::steady_clock::now();
  {
    SpawnOptions options;
    options.argv = {"/bin/sleep", "30"};
    Subprocess child = Subprocess::spawn(options);
    pid = child.pid();
    Subprocess moved = std::move(child);  // the moved-from one owns nothing
    CHECK_FALSE(child.valid());
    CHECK(moved.pid() == pid);
  }
  CHECK(std::chrono::steady_clock::now() - start < 5s);
  // Reaped: no longer our child.
  CHECK(::waitpid(pid, nullptr, WNOHANG) == -1);
  CHECK(errno == ECHILD);
}

TEST_CASE("Subprocess: reap_until times out, then succeeds", "[subprocess]") {
  SpawnOptions options;
  options.argv = {"/bin/sh", "-c", "sleep 0.5; exit 3"};
  Subprocess child = Subprocess::spawn(options);
  const auto start = std::chrono::steady_clock::now();
  CHECK_FALSE(child.reap_until(Deadline::after(100ms)).has_value());
  CHECK(std::chrono::steady_clock::now() - start >= 100ms);
  CHECK_FALSE(child.reaped());
  CHECK_FALSE(child.try_reap().has_value());
  auto status = child.reap_until(Deadline::after(10s));
  REQUIRE(status.has_value());
  CHECK(child.reaped());
  CHECK(child.pidfd() == -1);
  CHECK(exit_status_of(*status) == 3);
  CHECK(child.try_reap() == status);
}

TEST_CASE("Subprocess: exited() sees the exit without reaping", "[subprocess]") {
  SpawnOptions options;
  options.argv = {"/bin/true"};
  Subprocess child = Subprocess::spawn(options);
  pollfd p{child.pidfd(), POLLIN, 0};
  REQUIRE(::poll(&p, 1, 10000) == 1);
  CHECK(child.exited());
  CHECK_FALSE(child.reaped());
  // Still a zombie, so still our child.
  siginfo_t info{};
  CHECK(::waitid(P_PID, static_cast<id_t>(child.pid()), &info, WEXITED | WNOHANG | WNOWAIT) == 0);
  CHECK(exit_status_of(child.reap()) == 0);
}

TEST_CASE("exit_status_of and signal_of read wait statuses as a shell does", "[subprocess]") {
  auto [text, exited] = run_sh("exit 42");
  CHECK(exit_status_of(exited) == 42);
  CHECK(signal_of(exited) == 0);
  auto [text2, killed] = run_sh("kill -KILL $$");
  CHECK(exit_status_of(killed) == 128 + SIGKILL);
  CHECK(signal_of(killed) == SIGKILL);
  auto [text3, ok] = run_sh("true");
  CHECK(exit_status_of(ok) == 0);
  CHECK(signal_of(ok) == 0);
}

TEST_CASE("signal_name names signals for messages", "[signals]") {
  CHECK(signal_name(SIGKILL) == "SIGKILL");
  CHECK(signal_name(SIGTERM) == "SIGTERM");
  CHECK(signal_name(SIGINT) == "SIGINT");
  CHECK(signal_name(SIGSEGV) == "SIGSEGV");
  CHECK(signal_name(0) == "signal 0");
  CHECK(signal_name(SIGRTMIN + 1) == "signal " + std::to_string(SIGRTMIN + 1));
}

TEST_CASE("forwarded_signals is SIGINT, SIGTERM and SIGHUP", "[signals]") {
  sigset_t set = forwarded_signals();
  for (int sig = 1; sig < NSIG; ++sig) {
    INFO("signal " << sig);
    const bool expected = sig == SIGINT || sig == SIGTERM || sig == SIGHUP;
    CHECK((sigismember(&set, sig) == 1) == expected);
  }
}
