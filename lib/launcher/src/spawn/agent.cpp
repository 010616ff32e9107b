// The hvdrun agent (protocol in agent.h). Single-threaded on purpose: one
// poll() loop over stdin and a signalfd sees every event (control byte, EOF,
// SIGCHLD, signals to us). The worker starts through Subprocess.
#include "hvd/launcher/spawn/agent.h"

#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/io.h"
#include "hvd/common/job_env.h"
#include "hvd/launcher/process/signal_guard.h"
#include "hvd/launcher/process/signals.h"
#include "hvd/launcher/process/subprocess.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <optional>
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
  std::string path;  // the worker's PATH, for the command search
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

  // 2. Signals (and SIGCHLD) arrive on the SignalGuard's signalfd, SIGPIPE
  // is ignored; the child gets a clean mask back.
  std::optional<SignalGuard> signals;
  try {
    signals.emplace(std::initializer_list<int>{SIGCHLD});
  } catch (const IoError& e) {
    agent_error(e.what());
    return kAgentFailure;
  }

  SpawnOptions options;
  options.argv = spec.argv;
  options.env = spec.env;
  // The worker's PATH finds the command, not ours.
  options.search_path = spec.path.empty() ? std::string("/usr/local/bin:/usr/bin:/bin") : spec.path;
  options.cwd = spec.cwd;
  options.new_process_group = true;
  // Should the agent itself die abruptly (OOM killer, kill -9), the worker
  // must not live on unsupervised.
  options.parent_death_signal = SIGKILL;
  options.stdin_fd = ChildFd::dev_null();
  Subprocess child;
  try {
    child = Subprocess::spawn(options);
  } catch (const SpawnError& e) {
    const std::string& cmd = spec.argv[0];
    std::string line;
    if (e.stage() == SpawnError::Stage::Chdir) {
      char host[256] = "this host";
      ::gethostname(host, sizeof host - 1);
      line = fmt::format("hvdrun: cannot change to directory '{}' on {}: {}\n", spec.cwd, host,
                         std::strerror(e.error_number()));
    } else if (e.stage() == SpawnError::Stage::Exec) {
      line = e.error_number() == ENOENT
                 ? fmt::format("hvdrun: {}: command not found\n", cmd)
                 : fmt::format("hvdrun: {}: cannot execute: {}\n", cmd, std::strerror(e.error_number()));
    } else {
      agent_error(e.what());
      return kAgentFailure;
    }
    ssize_t ignored = ::write(2, line.data(), line.size());
    (void)ignored;
    return e.exit_status();
  } catch (const std::exception& e) {
    agent_error(e.what());
    return kAgentFailure;
  }

  // 3. Supervise: control bytes, EOF, signals, the child's exit.
  bool stdin_open = true;
  bool terminating = false;
  Clock::time_point kill_at = Clock::time_point::max();
  int exit_code = kAgentFailure;

  auto begin_termination = [&](const char* why) {
    if (terminating) return;
    terminating = true;
    child.signal_group(SIGTERM);
    kill_at = Clock::now() + grace;
    (void)why;
  };

  for (;;) {
    struct pollfd fds[2];
    int n = 0;
    fds[n++] = {signals->fd(), POLLIN, 0};
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
      child.signal_group(SIGKILL);
      kill_at = Clock::time_point::max();
    }
    if (rc <= 0) continue;

    if (stdin_open && (fds[1].revents & (POLLIN | POLLHUP | POLLERR))) {
      char buf[256];
      ssize_t r = ::read(0, buf, sizeof buf);
      if (r > 0) {
        for (ssize_t i = 0; i < r; ++i) {
          int sig = control_signal(buf[i]);
          if (sig != 0) child.signal_group(sig);
        }
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        // The launcher is gone (or closed us on purpose): no orphans.
        stdin_open = false;
        begin_termination("stdin closed");
      }
    }

    if (fds[0].revents & POLLIN) {
      bool child_done = false;
      while (const int sig = signals->wait(std::chrono::milliseconds(0))) {
        if (sig == SIGCHLD && !child_done) {
          // Look without reaping: the zombie leader keeps its process-group
          // id reserved while we kill what is left of the group.
          child_done = child.exited();
        } else {
          begin_termination("signalled");
        }
      }
      if (child_done) {
        // Whatever the worker left in its group goes with it.
        exit_code = exit_status_of(child.kill_group_and_reap());
        return exit_code;
      }
    }
  }
}

}  // namespace hvd::launcher
