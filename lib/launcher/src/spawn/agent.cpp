// The hvdrun agent (protocol in agent.h). Single-threaded on purpose: after
// fork() the child may allocate freely, and one poll() loop over stdin and a
// signalfd sees every event (control byte, EOF, SIGCHLD, signals to us).
#include "hvd/launcher/spawn/agent.h"

#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/io.h"
#include "hvd/common/job_env.h"
#include "hvd/launcher/job/run_internal.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace hvd::launcher {

namespace {

constexpr std::size_t kMaxSpecBytes = 16u << 20;
constexpr int kAgentFailure = kAgentFailureStatus;

struct Spec {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // NAME=value
  std::string cwd;
  std::string path;              // the worker's PATH, for the command search
};

void agent_error(const std::string& message) {
  std::string line = "hvdrun agent: " + message + "\n";
  ssize_t ignored = ::write(2, line.data(), line.size());
  (void)ignored;
}

Spec parse_spec(const std::string& payload) {
  nlohmann::json j = nlohmann::json::parse(payload);  // throws on garbage
  Spec spec;
  if (!j.is_object()) throw InvalidArgument("the spec is not a JSON object");
  const auto& argv = j.at("argv");
  if (!argv.is_array() || argv.empty()) throw InvalidArgument("'argv' must be a non-empty array of strings");
  for (const auto& a : argv) spec.argv.push_back(a.get<std::string>());
  if (j.contains("env")) {
    for (const auto& [name, value] : j.at("env").items()) {
      if (name.empty() || name.find('=') != std::string::npos) {
        throw InvalidArgument(fmt::format("invalid environment variable name '{}'", name));
      }
      std::string v = value.get<std::string>();
      if (name == "PATH") spec.path = v;
      spec.env.push_back(name + "=" + v);
    }
  }
  if (j.contains("cwd")) spec.cwd = j.at("cwd").get<std::string>();
  return spec;
}

/// What the exec'ing child reports back through its close-on-exec pipe.
struct ChildFailure {
  int stage;  // 1: chdir, 2: exec
  int error;
};

[[noreturn]] void child_fail(int fd, int stage, int error) {
  ChildFailure f{stage, error};
  ssize_t ignored = ::write(fd, &f, sizeof f);
  (void)ignored;
  ::_exit(stage == 2 && error == ENOENT ? 127 : 126);
}

/// execvp with the *worker's* PATH (glibc's execvpe searches the caller's),
/// falling back to /bin/sh for scripts without a #! line as execvp does.
void exec_with_path(const Spec& spec, char* const* argv, char* const* envp) {
  const std::string& cmd = spec.argv[0];
  if (cmd.find('/') != std::string::npos) {
    ::execve(cmd.c_str(), argv, envp);
    if (errno == ENOEXEC) {
      std::vector<char*> sh{const_cast<char*>("/bin/sh")};
      for (char* const* a = argv; *a; ++a) sh.push_back(*a);
      sh.push_back(nullptr);
      ::execve("/bin/sh", sh.data(), envp);
    }
    return;
  }
  std::string path = spec.path.empty() ? "/usr/local/bin:/usr/bin:/bin" : spec.path;
  int saved = ENOENT;
  std::size_t start = 0;
  for (;;) {
    std::size_t end = path.find(':', start);
    std::string dir = path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    std::string full = (dir.empty() ? std::string(".") : dir) + "/" + cmd;
    ::execve(full.c_str(), argv, envp);
    if (errno == ENOEXEC) {
      std::vector<char*> sh{const_cast<char*>("/bin/sh"), full.data()};
      for (char* const* a = argv + 1; *a; ++a) sh.push_back(*a);
      sh.push_back(nullptr);
      ::execve("/bin/sh", sh.data(), envp);
      return;
    }
    if (errno == EACCES) saved = EACCES;
    else if (errno != ENOENT && errno != ENOTDIR) return;  // a real error: report it
    if (end == std::string::npos) break;
    start = end + 1;
  }
  errno = saved;
}

int status_to_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return kAgentFailure;
}

int control_signal(char byte) {
  switch (byte) {
    case 'I': return SIGINT;
    case 'T': return SIGTERM;
    case 'H': return SIGHUP;
    case 'K': return SIGKILL;
    default: return 0;
  }
}

}  // namespace

std::string encode_agent_spec(const WorkerSpec& worker) {
  nlohmann::json j;
  j["argv"] = worker.argv;
  j["env"] = nlohmann::json::object();
  for (const auto& [name, value] : worker.env) j["env"][name] = value;
  j["cwd"] = worker.cwd;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int agent_main(int argc, char** argv) {
  (void)argc;
  (void)argv;
  std::chrono::milliseconds grace{3000};
  try {
    grace = std::chrono::milliseconds(env::get_int_or(job_env::kKillGraceMs, 3000));
  } catch (const std::exception& e) {
    agent_error(e.what());
  }

  // 1. The spec. Bounded in size and time: a launcher that connects and then
  //    says nothing must not leave an agent behind forever.
  Spec spec;
  try {
    spec = parse_spec(read_frame(0, kMaxSpecBytes, Deadline::after(std::chrono::seconds(60))));
  } catch (const std::exception& e) {
    agent_error(fmt::format("could not read the worker spec from stdin: {}", e.what()));
    return kAgentFailure;
  }

  // 2. Signals arrive on a signalfd; the child gets a clean mask back.
  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : {SIGCHLD, SIGTERM, SIGHUP, SIGINT}) sigaddset(&handled, sig);
  sigset_t old_mask;
  ::sigprocmask(SIG_BLOCK, &handled, &old_mask);
  UniqueFd sfd(::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!sfd) {
    agent_error(fmt::format("signalfd failed: {}", std::strerror(errno)));
    return kAgentFailure;
  }
  ::signal(SIGPIPE, SIG_IGN);

  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    agent_error(fmt::format("pipe failed: {}", std::strerror(errno)));
    return kAgentFailure;
  }

  std::vector<char*> child_argv;
  for (auto& a : spec.argv) child_argv.push_back(a.data());
  child_argv.push_back(nullptr);
  std::vector<char*> child_env;
  for (auto& e : spec.env) child_env.push_back(e.data());
  child_env.push_back(nullptr);

  const pid_t agent_pid = ::getpid();
  pid_t child = ::fork();
  if (child < 0) {
    agent_error(fmt::format("fork failed: {}", std::strerror(errno)));
    return kAgentFailure;
  }
  if (child == 0) {
    ::close(report[0]);
    ::setpgid(0, 0);
    // Should the agent itself die abruptly (OOM killer, kill -9), the worker
    // must not live on unsupervised.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != agent_pid) ::_exit(kAgentFailure);
    reset_signals_for_exec();
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) {
      ::dup2(devnull, 0);
      if (devnull != 0) ::close(devnull);
    }
    if (!spec.cwd.empty() && ::chdir(spec.cwd.c_str()) != 0) child_fail(report[1], 1, errno);
    exec_with_path(spec, child_argv.data(), child_env.data());
    child_fail(report[1], 2, errno);
  }
  // Both sides set the group so killpg() works no matter who runs first.
  ::setpgid(child, child);
  ::close(report[1]);

  ChildFailure failure{0, 0};
  ssize_t got;
  do {
    got = ::read(report[0], &failure, sizeof failure);
  } while (got < 0 && errno == EINTR);
  ::close(report[0]);
  if (got == static_cast<ssize_t>(sizeof failure)) {
    int status = 0;
    while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {}
    const std::string& cmd = spec.argv[0];
    if (failure.stage == 1) {
      char host[256] = "this host";
      ::gethostname(host, sizeof host - 1);
      std::string line = fmt::format("hvdrun: cannot change to directory '{}' on {}: {}\n", spec.cwd, host,
                                     std::strerror(failure.error));
      ssize_t ignored = ::write(2, line.data(), line.size());
      (void)ignored;
      return 1;
    }
    std::string line = failure.error == ENOENT
                           ? fmt::format("hvdrun: {}: command not found\n", cmd)
                           : fmt::format("hvdrun: {}: cannot execute: {}\n", cmd, std::strerror(failure.error));
    ssize_t ignored = ::write(2, line.data(), line.size());
    (void)ignored;
    return failure.error == ENOENT ? 127 : 126;
  }

  // 3. Supervise: control bytes, EOF, signals, the child's exit.
  bool stdin_open = true;
  bool terminating = false;
  Clock::time_point kill_at = Clock::time_point::max();
  int exit_code = kAgentFailure;

  auto begin_termination = [&](const char* why) {
    if (terminating) return;
    terminating = true;
    ::killpg(child, SIGTERM);
    kill_at = Clock::now() + grace;
    (void)why;
  };

  for (;;) {
    struct pollfd fds[2];
    int n = 0;
    fds[n++] = {sfd.get(), POLLIN, 0};
    if (stdin_open) fds[n++] = {0, POLLIN, 0};
    int timeout = -1;
    if (kill_at != Clock::time_point::max()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(kill_at - Clock::now()).count();
      timeout = left < 0 ? 0 : static_cast<int>(left) + 1;
    }
    int rc = ::poll(fds, n, timeout);
    if (rc < 0 && errno != EINTR) {
      agent_error(fmt::format("poll failed: {}", std::strerror(errno)));
      begin_termination("poll");
    }
    if (kill_at != Clock::time_point::max() && Clock::now() >= kill_at) {
      ::killpg(child, SIGKILL);
      kill_at = Clock::time_point::max();
    }
    if (rc <= 0) continue;

    if (stdin_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      char buf[256];
      ssize_t r = ::read(0, buf, sizeof buf);
      if (r > 0) {
        for (ssize_t i = 0; i < r; ++i) {
          int sig = control_signal(buf[i]);
          if (sig != 0) ::killpg(child, sig);
        }
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        // The launcher is gone (or closed us on purpose): no orphans.
        stdin_open = false;
        begin_termination("stdin closed");
      }
    }

    if (fds[0].revents & POLLIN) {
      struct signalfd_siginfo si;
      bool child_done = false;
      while (::read(sfd.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        if (si.ssi_signo == SIGCHLD && !child_done) {
          // Look without reaping: the zombie leader keeps its process-group
          // id reserved while we kill what is left of the group.
          siginfo_t info{};
          if (::waitid(P_PID, static_cast<id_t>(child), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
              info.si_pid == child) {
            child_done = true;
          }
        } else {
          begin_termination("signalled");
        }
      }
      if (child_done) {
        // Whatever the worker left in its group goes with it.
        ::killpg(child, SIGKILL);
        int status = 0;
        while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {}
        exit_code = status_to_code(status);
        return exit_code;
      }
    }
  }
}

}  // namespace hvd::launcher
