// Subprocess: fork/exec for the whole launcher (contract in subprocess.h).
//
// spawn() builds an ExecPlan -- argv, envp, the candidate paths of the PATH
// search, the /bin/sh fallback argv, which descriptors go where and which
// stay -- then forks. The child (run_child) only reads the plan and makes
// async-signal-safe calls; its one write into the plan is a pointer store
// into its own copy of the /bin/sh argv.
#include "hvd/launcher/process/subprocess.h"

#include "hvd/launcher/process/signals.h"

#include <fmt/format.h>
#ifndef HVD_LEAN_PROCESS
#include <spdlog/spdlog.h>
#endif

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

extern char** environ;

namespace hvd::launcher {

namespace {

/// The lean agent (HVD_LEAN_PROCESS: no spdlog) writes the line itself.
void warn_status_lost(pid_t pid) {
#ifdef HVD_LEAN_PROCESS
  const std::string line = fmt::format("hvdrun-agent: process {} was reaped elsewhere; its exit status is lost\n", pid);
  ssize_t ignored = ::write(2, line.data(), line.size());
  (void)ignored;
#else
  spdlog::warn("process {} was reaped elsewhere; its exit status is lost", pid);
#endif
}

/// execvp's list when PATH is unset (glibc's _CS_PATH).
constexpr const char* kDefaultSearchPath = "/bin:/usr/bin";
/// The fallback loop closes at most this many descriptors (the kernel's
/// default fs.nr_open) when close_range is missing and RLIMIT_NOFILE is
/// unlimited.
constexpr unsigned kMaxFallbackFds = 1u << 20;

/// What the child writes to the close-on-exec report pipe when it fails.
struct ChildReport {
  int stage;  // a SpawnError::Stage
  int error;  // errno
};

/// Everything the child touches, built before fork.
struct ExecPlan {
  std::vector<std::string> argv_storage;
  std::vector<char*> argv;
  std::vector<std::string> env_storage;
  std::vector<char*> envp;
  /// The paths execve tries, in order.
  std::vector<std::string> candidates;
  /// True when `candidates` come from a PATH search (go on after ENOENT).
  bool searched = false;
  /// {"/bin/sh", <candidate>, argv[1..], nullptr}: a script without #!.
  std::string shell = "/bin/sh";
  std::vector<char*> shell_argv;
  /// Source descriptor for 0, 1, 2; -1 leaves it as inherited.
  int std_source[3] = {-1, -1, -1};
  /// keep_fds: their FD_CLOEXEC is cleared in the child.
  std::vector<int> keep;
  /// Sorted, unique: keep_fds and the report pipe; everything else >= 3 is
  /// closed.
  std::vector<int> survivors;
  unsigned fallback_fd_limit = 0;
  const char* cwd = nullptr;
  bool new_process_group = true;
  int parent_death_signal = 0;
  pid_t parent = -1;
};

std::vector<char*> pointers_to(std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (auto& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

/// The value of NAME in a NAME=value list (the first entry, as getenv).
std::optional<std::string> lookup(const std::vector<std::string>& env, const std::string& name) {
  for (const auto& entry : env) {
    if (entry.size() > name.size() && entry.compare(0, name.size(), name) == 0 && entry[name.size()] == '=') {
      return entry.substr(name.size() + 1);
    }
  }
  return std::nullopt;
}

const char* stream_name(int fd) { return fd == 0 ? "stdin" : fd == 1 ? "stdout" : "stderr"; }

void require_open(int fd, const std::string& what) {
  if (fd < 0 || ::fcntl(fd, F_GETFD) < 0) {
    throw InvalidArgument(fmt::format("cannot start a process: {} (descriptor {}) is not open", what, fd));
  }
}

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  // pidfd_open sets close-on-exec itself.
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  return -1;
#endif
}

// ---- the child: async-signal-safe calls only ----

[[noreturn]] void child_fail(int report_fd, SpawnError::Stage stage, int error) {
  ChildReport report{static_cast<int>(stage), error};
  ssize_t ignored = ::write(report_fd, &report, sizeof report);
  (void)ignored;
  ::_exit(stage == SpawnError::Stage::Exec ? (error == ENOENT ? 127 : 126) : 1);
}

[[noreturn]] void run_child(ExecPlan& plan, int report_fd) {
  using Stage = SpawnError::Stage;
  if (plan.new_process_group) ::setpgid(0, 0);
  if (plan.parent_death_signal != 0) {
    ::prctl(PR_SET_PDEATHSIG, plan.parent_death_signal);
    // The parent may have died before prctl: then nothing would fire.
    if (::getppid() != plan.parent) ::_exit(1);
  }
  reset_signals_for_exec();

  // Standard descriptors. Sources below 3 move up first, so one dup2 never
  // overwrites the source of another.
  int source[3];
  for (int i = 0; i < 3; ++i) {
    source[i] = plan.std_source[i];
    if (source[i] >= 0 && source[i] < 3) {
      source[i] = ::fcntl(source[i], F_DUPFD_CLOEXEC, 3);
      if (source[i] < 0) child_fail(report_fd, Stage::Setup, errno);
    }
  }
  for (int i = 0; i < 3; ++i) {
    if (source[i] < 0) continue;
    int rc;
    do {
      rc = ::dup2(source[i], i);  // the copy loses FD_CLOEXEC
    } while (rc < 0 && errno == EINTR);
    if (rc < 0) child_fail(report_fd, Stage::Setup, errno);
  }
  for (int fd : plan.keep) {
    if (::fcntl(fd, F_SETFD, 0) < 0) child_fail(report_fd, Stage::Setup, errno);
  }
  unsigned low = 3;
  for (int fd : plan.survivors) {
    const unsigned keep = static_cast<unsigned>(fd);
    if (keep > low) hvd::close_fd_range(low, keep - 1, plan.fallback_fd_limit);
    low = keep + 1;
  }
  hvd::close_fd_range(low, ~0U, plan.fallback_fd_limit);

  if (plan.cwd != nullptr && ::chdir(plan.cwd) != 0) child_fail(report_fd, Stage::Chdir, errno);

  int error = ENOENT;
  for (const std::string& candidate : plan.candidates) {
    char* path = const_cast<char*>(candidate.c_str());
    ::execve(path, plan.argv.data(), plan.envp.data());
    const int e = errno;
    if (e == ENOEXEC) {  // no #! line: a shell script, as execvp runs it
      plan.shell_argv[1] = path;
      ::execve(plan.shell.c_str(), plan.shell_argv.data(), plan.envp.data());
      error = errno;
      break;
    }
    if (!plan.searched) {
      error = e;
      break;
    }
    if (e == EACCES) {
      error = EACCES;  // reported unless a later directory has the program
    } else if (e != ENOENT && e != ENOTDIR && e != ESTALE && e != ENODEV && e != ETIMEDOUT) {
      error = e;  // a real error: report it rather than search on
      break;
    }
  }
  child_fail(report_fd, Stage::Exec, error);
}

}  // namespace

// ---- SpawnError ----

int SpawnError::exit_status() const {
  if (stage_ == Stage::Exec) return errno_ == ENOENT ? 127 : 126;
  return 1;
}

// ---- spawn ----

Subprocess Subprocess::spawn(const SpawnOptions& options) {
  if (options.argv.empty()) throw InvalidArgument("cannot start a process: empty command");
  const std::string& program = options.program.empty() ? options.argv[0] : options.program;
  if (program.empty()) {
    throw SpawnError(SpawnError::Stage::Exec, ENOENT, "cannot start a process: empty program name");
  }

  ExecPlan plan;
  plan.argv_storage = options.argv;
  plan.argv = pointers_to(plan.argv_storage);
  if (options.env) {
    plan.env_storage = *options.env;
  } else {
    for (char** e = environ; e && *e; ++e) plan.env_storage.emplace_back(*e);
  }
  plan.envp = pointers_to(plan.env_storage);

  if (program.find('/') != std::string::npos) {
    plan.candidates.push_back(program);
  } else {
    plan.searched = true;
    std::string path;
    if (options.search_path) {
      path = *options.search_path;
    } else {
      path = lookup(plan.env_storage, "PATH").value_or(kDefaultSearchPath);
    }
    std::size_t start = 0;
    for (;;) {
      const std::size_t end = path.find(':', start);
      std::string dir = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
      plan.candidates.push_back((dir.empty() ? std::string(".") : dir) + "/" + program);
      if (end == std::string::npos) break;
      start = end + 1;
    }
  }
  plan.shell_argv.push_back(plan.shell.data());
  plan.shell_argv.push_back(nullptr);  // the candidate, set in the child
  for (std::size_t i = 1; i < plan.argv_storage.size(); ++i) plan.shell_argv.push_back(plan.argv_storage[i].data());
  plan.shell_argv.push_back(nullptr);

  // Descriptors: checked here, so the child's dup2 calls cannot fail on a
  // caller's mistake.
  UniqueFd dev_null;
  const ChildFd* wiring[3] = {&options.stdin_fd, &options.stdout_fd, &options.stderr_fd};
  for (int i = 0; i < 3; ++i) {
    switch (wiring[i]->kind) {
      case ChildFd::Kind::Inherit: break;
      case ChildFd::Kind::DevNull:
        if (!dev_null) {
          dev_null.reset(::open("/dev/null", O_RDWR | O_CLOEXEC));
          if (!dev_null) throw IoError(fmt::format("cannot open /dev/null: {}", std::strerror(errno)));
        }
        plan.std_source[i] = dev_null.get();
        break;
      case ChildFd::Kind::Fd:
        require_open(wiring[i]->fd, fmt::format("the descriptor for the child's {}", stream_name(i)));
        plan.std_source[i] = wiring[i]->fd;
        break;
    }
  }
  for (int fd : options.keep_fds) {
    if (fd < 3) {
      throw InvalidArgument(
          fmt::format("cannot start a process: keep_fds holds {} (0, 1, 2 are wired separately)", fd));
    }
    require_open(fd, "a descriptor in keep_fds");
    plan.keep.push_back(fd);
  }

  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) throw IoError(fmt::format("pipe failed: {}", std::strerror(errno)));
  UniqueFd report_read(report[0]), report_write(report[1]);
  plan.survivors = plan.keep;
  plan.survivors.push_back(report_write.get());
  std::sort(plan.survivors.begin(), plan.survivors.end());
  plan.survivors.erase(std::unique(plan.survivors.begin(), plan.survivors.end()), plan.survivors.end());
  struct rlimit limit {};
  plan.fallback_fd_limit = kMaxFallbackFds;
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < kMaxFallbackFds) {
    plan.fallback_fd_limit = static_cast<unsigned>(limit.rlim_cur);
  }
  plan.cwd = options.cwd.empty() ? nullptr : options.cwd.c_str();
  plan.new_process_group = options.new_process_group;
  plan.parent_death_signal = options.parent_death_signal;
  plan.parent = ::getpid();

  const pid_t pid = ::fork();
  if (pid < 0) throw IoError(fmt::format("fork failed: {}", std::strerror(errno)));
  if (pid == 0) run_child(plan, report_write.get());

  // Both sides set the group, so signal_group works whoever runs first
  // (EACCES once the child has exec'd: it did it itself).
  if (options.new_process_group) ::setpgid(pid, pid);
  report_write.reset();
  Subprocess child;
  child.pid_ = pid;
  child.group_leader_ = options.new_process_group;

  ChildReport failure{};
  ssize_t got;
  do {
    got = ::read(report_read.get(), &failure, sizeof failure);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    const int e = errno;
    child.kill_group_and_reap();
    throw IoError(fmt::format("cannot start '{}': reading its exec report failed: {}", program, std::strerror(e)));
  }
  if (got == static_cast<ssize_t>(sizeof failure)) {
    child.reap();
    const auto stage = static_cast<SpawnError::Stage>(failure.stage);
    std::string message;
    switch (stage) {
      case SpawnError::Stage::Setup:
        message = fmt::format("cannot start '{}': setting up its descriptors failed: {}", program,
                              std::strerror(failure.error));
        break;
      case SpawnError::Stage::Chdir:
        message = fmt::format("cannot start '{}': cannot change to directory '{}': {}", program, options.cwd,
                              std::strerror(failure.error));
        break;
      case SpawnError::Stage::Exec:
        message = plan.searched && failure.error == ENOENT
                      ? fmt::format("{}: command not found", program)
                      : fmt::format("{}: cannot execute: {}", program, std::strerror(failure.error));
        break;
    }
    throw SpawnError(stage, failure.error, message);
  }
  // got == 0: exec succeeded and closed the pipe.
  child.pidfd_.reset(open_pidfd(pid));
  return child;
}

// ---- lifetime ----

Subprocess::Subprocess(Subprocess&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      pidfd_(std::move(other.pidfd_)),
      group_leader_(other.group_leader_),
      reaped_(other.reaped_),
      status_(other.status_) {}

Subprocess& Subprocess::operator=(Subprocess&& other) noexcept {
  if (this != &other) {
    if (valid() && !reaped_) kill_group_and_reap();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::move(other.pidfd_);
    group_leader_ = other.group_leader_;
    reaped_ = other.reaped_;
    status_ = other.status_;
  }
  return *this;
}

Subprocess::~Subprocess() {
  if (valid() && !reaped_) kill_group_and_reap();
}

// ---- waiting ----

void Subprocess::record(int status) {
  reaped_ = true;
  status_ = status;
  pidfd_.reset();
}

bool Subprocess::exited() const {
  HVD_ENFORCE(valid(), "exited() on an empty Subprocess");
  if (reaped_) return true;
  siginfo_t info{};
  int rc;
  do {
    rc = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOHANG | WNOWAIT);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) return errno == ECHILD;  // reaped elsewhere: try_reap says so
  return info.si_pid == pid_;
}

std::optional<int> Subprocess::try_reap() {
  HVD_ENFORCE(valid(), "try_reap() on an empty Subprocess");
  if (reaped_) return status_;
  int status = 0;
  pid_t w;
  do {
    w = ::waitpid(pid_, &status, WNOHANG);
  } while (w < 0 && errno == EINTR);
  if (w == pid_) {
    record(status);
    return status;
  }
  if (w < 0 && errno == ECHILD) {
    warn_status_lost(pid_);
    record(0);
    return 0;
  }
  return std::nullopt;
}

int Subprocess::reap() {
  HVD_ENFORCE(valid(), "reap() on an empty Subprocess");
  if (reaped_) return status_;
  int status = 0;
  pid_t w;
  do {
    w = ::waitpid(pid_, &status, 0);
  } while (w < 0 && errno == EINTR);
  if (w == pid_) {
    record(status);
  } else {
    warn_status_lost(pid_);
    record(0);
  }
  return status_;
}

bool Subprocess::wait_exited_until(Deadline deadline) const {
  for (;;) {
    if (exited()) return true;
    if (deadline.expired()) return false;
    int timeout = deadline.poll_timeout_ms();
    if (pidfd_) {
      pollfd fd{pidfd_.get(), POLLIN, 0};
      ::poll(&fd, 1, timeout);
    } else {
      // No pidfd: look again every 10 ms.
      ::poll(nullptr, 0, timeout < 0 ? 10 : std::min(timeout, 10));
    }
  }
}

std::optional<int> Subprocess::reap_until(Deadline deadline) {
  HVD_ENFORCE(valid(), "reap_until() on an empty Subprocess");
  if (!wait_exited_until(deadline)) return std::nullopt;
  return reap();
}

// ---- signals ----

void Subprocess::signal(int sig) const {
  if (!valid() || reaped_) return;
  ::kill(pid_, sig);
}

void Subprocess::signal_group(int sig) const {
  if (!valid() || reaped_) return;
  ::kill(group_leader_ ? -pid_ : pid_, sig);
}

int Subprocess::kill_group_and_reap() {
  if (!valid()) return 0;
  if (reaped_) return status_;
  // The leader as well, in case it left its group: reap() must not block.
  if (group_leader_) ::kill(-pid_, SIGKILL);
  ::kill(pid_, SIGKILL);
  const int status = reap();
  if (group_leader_) {
    // Members that are our children too (we are a subreaper or PID 1).
    int ignored;
    while (::waitpid(-pid_, &ignored, WNOHANG) > 0) {
    }
  }
  return status;
}

int Subprocess::terminate_group(std::chrono::milliseconds grace) {
  HVD_ENFORCE(valid(), "terminate_group() on an empty Subprocess");
  if (reaped_) return status_;
  signal_group(SIGTERM);
  wait_exited_until(Deadline::after(grace));
  return kill_group_and_reap();
}

// ---- statuses ----

int exit_status_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

int signal_of(int wait_status) { return WIFSIGNALED(wait_status) ? WTERMSIG(wait_status) : 0; }

}  // namespace hvd::launcher
