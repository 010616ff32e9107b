// The hvdrun agent (agent.h, protocol in agent_protocol.h). Single-threaded
// on purpose: one poll() loop over stdin, a signalfd (SIGCHLD and the
// signals sent to the agent) and every worker's stdout and stderr pipes
// sees every event. Workers start through Subprocess. No logging library:
// the agent's own errors are one "hvdrun-agent: ..." line on its stderr and
// an Error frame.
#include "hvd/launcher/spawn/agent.h"

#include "hvd/common/error.h"
#include "hvd/common/io.h"
#include "hvd/launcher/process/signal_guard.h"
#include "hvd/launcher/process/subprocess.h"
#include "hvd/launcher/spawn/agent_protocol.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace hvd::launcher {

namespace {

/// After a worker's leader exits (and its group is killed), how long its
/// pipes may stay open -- an escaped process holding them -- before the
/// agent stops reading and reports the exit.
constexpr auto kDrainAfterExit = std::chrono::milliseconds(2000);
/// How long the agent waits for its first frame: a launcher that connects
/// and then says nothing must not leave an agent behind forever.
constexpr auto kHelloTimeout = std::chrono::seconds(60);
constexpr std::size_t kReadChunk = 64 * 1024;

void agent_error(const std::string& message) {
  std::string line = "hvdrun-agent: " + message + "\n";
  ssize_t ignored = ::write(2, line.data(), line.size());
  (void)ignored;
}

/// The guard: a small process the agent starts first (the agent binary
/// again, argv[0] "hvdrun-agent-guard"), in a session of its own, that
/// outlives an agent killed abruptly (kill -9, the out-of-memory killer)
/// and then kills what is left of its workers' process groups. The agent's
/// PR_SET_PDEATHSIG reaches each worker's leader only; a process the
/// worker started (a data loader, a shell's background job) would
/// otherwise live on, orphaned. The agent tells it, over a pipe whose end
/// only the agent holds, "+PGID" for each worker started, "-PGID" once a
/// worker's group is killed and reaped, and "bye" when it ends normally;
/// end of file without "bye" means the agent died.
constexpr const char* kGuardArgv0 = "hvdrun-agent-guard";
constexpr const char* kGuardFlag = "--guard-workers";

/// The guard's loop: `fd` is the read end of the agent's pipe.
int guard_main(int fd) {
  ::setsid();  // out of the agent's process group and session
  ::signal(SIGHUP, SIG_IGN);
  ::signal(SIGINT, SIG_IGN);
  ::signal(SIGPIPE, SIG_IGN);
  std::set<pid_t> groups;
  std::string pending;
  char buf[512];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<std::size_t>(n));
    std::size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      const std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (line == "bye") return 0;
      if (line.size() < 2 || (line[0] != '+' && line[0] != '-')) continue;
      char* end = nullptr;
      const long g = std::strtol(line.c_str() + 1, &end, 10);
      if (end == nullptr || *end != '\0' || g <= 1) continue;
      if (line[0] == '+') {
        groups.insert(static_cast<pid_t>(g));
      } else {
        groups.erase(static_cast<pid_t>(g));
      }
    }
  }
  // The agent is gone without saying goodbye: nothing of its workers may stay.
  for (pid_t g : groups) ::kill(-g, SIGKILL);
  return 0;
}

/// Starts the guard (this binary again, through Subprocess: descriptors
/// and signal mask as for a worker, stdin, stdout and stderr on /dev/null
/// so it never holds the agent's stdout or stderr open past the agent's
/// end, and not a process-group leader, so its setsid() succeeds). Returns
/// the write end of its pipe; invalid when it could not start (the agent
/// then works as before, without it).
UniqueFd start_guard(Subprocess& guard) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return UniqueFd();
  UniqueFd rd(p[0]), wr(p[1]);
  SpawnOptions options;
  options.program = "/proc/self/exe";
  options.argv = {kGuardArgv0, kGuardFlag, std::to_string(rd.get())};
  options.new_process_group = false;
  options.stdout_fd = ChildFd::dev_null();
  options.stderr_fd = ChildFd::dev_null();
  options.keep_fds = {rd.get()};
  try {
    guard = Subprocess::spawn(options);
  } catch (const std::exception& e) {
    agent_error(std::string("cannot start the guard of its workers: ") + e.what());
    return UniqueFd();
  }
  return wr;
}

struct Worker {
  std::uint32_t id = 0;
  Subprocess process;
  UniqueFd out, err;
  bool exited = false;  // leader gone, group killed and reaped
  int wait_status = 0;
  Clock::time_point exited_at;
  bool reported = false;
  // A start failure: reported as Output on stderr plus Exit.
  std::string failure_text;
  int failure_status = 0;
};

class Agent {
 public:
  int run();

 private:
  void send(const AgentMessage& m);
  void on_stdin_readable();
  void on_message(AgentMessage m);
  void spawn(agent_msg::Spawn s);
  void on_signals();
  void read_pipe(Worker& w, int stream);
  void report_finished();
  void begin_termination();
  void fail(const std::string& message);
  Worker* find(std::uint32_t id);

  void tell_guard(char what, pid_t group);

  std::optional<SignalGuard> signals_;
  UniqueFd guard_;
  Subprocess guard_process_;
  AgentFrameReader reader_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::chrono::milliseconds grace_{3000};
  bool hello_ = false;
  bool done_ = false;  // Done received: no more workers
  bool stdin_open_ = true;
  bool stdout_open_ = true;
  bool terminating_ = false;
  bool failed_ = false;
  Clock::time_point kill_at_ = Clock::time_point::max();
  Clock::time_point hello_by_ = Clock::now() + kHelloTimeout;
  std::vector<char> buf_ = std::vector<char>(kReadChunk);
};

void Agent::send(const AgentMessage& m) {
  if (!stdout_open_) return;
  try {
    const std::string frame = encode_agent_message(m);
    write_all(1, frame.data(), frame.size());
  } catch (const std::exception&) {
    // hvdrun is gone (EPIPE): nobody to report to; stop the workers.
    stdout_open_ = false;
    begin_termination();
  }
}

void Agent::tell_guard(char what, pid_t group) {
  if (!guard_) return;
  const std::string line = what + std::to_string(group) + "\n";
  if (::write(guard_.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) guard_.reset();
}

Worker* Agent::find(std::uint32_t id) {
  for (auto& w : workers_) {
    if (w->id == id) return w.get();
  }
  return nullptr;
}

void Agent::begin_termination() {
  if (terminating_) return;
  terminating_ = true;
  for (auto& w : workers_) {
    if (!w->exited && w->process.valid()) w->process.signal_group(SIGTERM);
  }
  kill_at_ = Clock::now() + grace_;
}

void Agent::fail(const std::string& message) {
  agent_error(message);
  send(agent_msg::Error{message});
  failed_ = true;
  stdin_open_ = false;  // the stream cannot be trusted any further
  begin_termination();
}

void Agent::spawn(agent_msg::Spawn s) {
  if (find(s.id) != nullptr) {
    fail("the launcher sent a second Spawn for worker " + std::to_string(s.id));
    return;
  }
  auto w = std::make_unique<Worker>();
  w->id = s.id;
  Worker& worker = *w;
  workers_.push_back(std::move(w));

  std::string path;
  for (const auto& e : s.env) {
    if (e.rfind("PATH=", 0) == 0) path = e.substr(5);
  }
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
    fail(std::string("pipe failed: ") + std::strerror(errno));
    return;
  }
  UniqueFd out0(out[0]), out1(out[1]), err0(err[0]), err1(err[1]);
  SpawnOptions options;
  options.argv = s.argv;
  options.env = s.env;
  // The worker's PATH finds the command, not ours.
  options.search_path = path.empty() ? std::string("/usr/local/bin:/usr/bin:/bin") : path;
  options.cwd = s.cwd;
  options.new_process_group = true;
  // Should the agent itself die abruptly (OOM killer, kill -9), the worker
  // must not live on unsupervised.
  options.parent_death_signal = SIGKILL;
  options.stdin_fd = ChildFd::dev_null();
  options.stdout_fd = ChildFd::from(out1.get());
  options.stderr_fd = ChildFd::from(err1.get());
  try {
    worker.process = Subprocess::spawn(options);
  } catch (const SpawnError& e) {
    const std::string& cmd = s.argv[0];
    if (e.stage() == SpawnError::Stage::Chdir) {
      char host[256] = "this host";
      ::gethostname(host, sizeof host - 1);
      worker.failure_text = "hvdrun: cannot change to directory '" + s.cwd + "' on " + host + ": " +
                            std::strerror(e.error_number()) + "\n";
    } else if (e.stage() == SpawnError::Stage::Exec) {
      worker.failure_text = e.error_number() == ENOENT
                                ? "hvdrun: " + cmd + ": command not found\n"
                                : "hvdrun: " + cmd + ": cannot execute: " + std::strerror(e.error_number()) + "\n";
    } else {
      worker.failure_text = std::string("hvdrun-agent: ") + e.what() + "\n";
    }
    worker.failure_status = e.exit_status();
    worker.exited = true;
    worker.exited_at = Clock::now();
    return;
  } catch (const std::exception& e) {
    worker.failure_text = std::string("hvdrun-agent: ") + e.what() + "\n";
    worker.failure_status = kAgentFailureStatus;
    worker.exited = true;
    worker.exited_at = Clock::now();
    return;
  }
  tell_guard('+', worker.process.pid());
  set_nonblocking(out0.get(), true);
  set_nonblocking(err0.get(), true);
  worker.out = std::move(out0);
  worker.err = std::move(err0);
  if (terminating_) worker.process.signal_group(SIGTERM);
}

void Agent::on_message(AgentMessage m) {
  if (!hello_ && !std::holds_alternative<agent_msg::Hello>(m)) {
    fail(std::string("the launcher's first frame is ") + agent_message_name(m) + ", not Hello");
    return;
  }
  if (auto* h = std::get_if<agent_msg::Hello>(&m)) {
    if (hello_) return fail("the launcher sent Hello twice");
    if (h->version != kAgentProtocolVersion) {
      return fail("the launcher speaks agent protocol version " + std::to_string(h->version) +
                  ", this hvdrun-agent version " + std::to_string(kAgentProtocolVersion) +
                  ": install the same hvdrun on every host");
    }
    hello_ = true;
    grace_ = std::chrono::milliseconds(h->value);
    send(agent_msg::Hello{kAgentProtocolVersion, static_cast<std::uint32_t>(::getpid())});
  } else if (auto* s = std::get_if<agent_msg::Spawn>(&m)) {
    if (done_) return fail("the launcher sent a Spawn after Done");
    spawn(std::move(*s));
  } else if (auto* k = std::get_if<agent_msg::Signal>(&m)) {
    Worker* w = find(k->id);
    // A worker that already exited (or never started) has nothing to signal.
    if (w != nullptr && !w->exited && w->process.valid()) w->process.signal_group(k->sig);
  } else if (std::holds_alternative<agent_msg::Done>(m)) {
    done_ = true;
  } else {
    fail(std::string("the launcher sent a ") + agent_message_name(m) + " frame, which only the agent sends");
  }
}

void Agent::on_stdin_readable() {
  ssize_t r = ::read(0, buf_.data(), buf_.size());
  if (r < 0 && (errno == EINTR || errno == EAGAIN)) return;
  if (r <= 0) {
    // The launcher is gone (or closed us on purpose): no orphans.
    stdin_open_ = false;
    if (reader_.pending() > 0 && !failed_) agent_error("the launcher's stream ended inside a frame");
    begin_termination();
    return;
  }
  reader_.feed(buf_.data(), static_cast<std::size_t>(r));
  try {
    while (stdin_open_) {
      auto m = reader_.next();
      if (!m) break;
      on_message(std::move(*m));
    }
  } catch (const AgentProtocolError& e) {
    fail(std::string("from the launcher: ") + e.what());
  }
}

void Agent::on_signals() {
  bool child = false;
  while (const int sig = signals_->wait(std::chrono::milliseconds(0))) {
    if (sig == SIGCHLD) {
      child = true;
    } else {
      begin_termination();
    }
  }
  if (!child) return;
  for (auto& w : workers_) {
    // Look without reaping first: the zombie leader keeps its process-group
    // id reserved while we kill what is left of the group.
    if (w->exited || !w->process.valid() || !w->process.exited()) continue;
    const pid_t group = w->process.pid();
    w->wait_status = w->process.kill_group_and_reap();
    tell_guard('-', group);
    w->exited = true;
    w->exited_at = Clock::now();
  }
}

void Agent::read_pipe(Worker& w, int stream) {
  UniqueFd& fd = stream == 1 ? w.out : w.err;
  ssize_t n = ::read(fd.get(), buf_.data(), buf_.size());
  if (n > 0) {
    send(agent_msg::Output{w.id, stream, std::string(buf_.data(), static_cast<std::size_t>(n))});
  } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
    fd.reset();
  }
}

void Agent::report_finished() {
  const auto now = Clock::now();
  for (auto& wp : workers_) {
    Worker& w = *wp;
    if (w.reported || !w.exited) continue;
    if ((w.out || w.err) && now < w.exited_at + kDrainAfterExit) continue;
    w.out.reset();
    w.err.reset();
    w.reported = true;
    if (!w.failure_text.empty()) {
      send(agent_msg::Output{w.id, 2, w.failure_text});
      send(agent_msg::Exit{w.id, static_cast<std::uint32_t>(w.failure_status), 0});
    } else {
      send(agent_msg::Exit{w.id, static_cast<std::uint32_t>(exit_status_of(w.wait_status)),
                           static_cast<std::uint32_t>(signal_of(w.wait_status))});
    }
  }
}

int Agent::run() {
  // Signals (and SIGCHLD) arrive on the SignalGuard's signalfd, SIGPIPE is
  // ignored; workers get a clean mask back.
  try {
    signals_.emplace(std::initializer_list<int>{SIGCHLD});
  } catch (const std::exception& e) {
    agent_error(e.what());
    return kAgentFailureStatus;
  }
  guard_ = start_guard(guard_process_);
  for (;;) {
    report_finished();
    const bool all_reported =
        std::all_of(workers_.begin(), workers_.end(), [](const auto& w) { return w->reported; });
    if (all_reported && (done_ || !stdin_open_ || failed_)) break;

    std::vector<pollfd> fds;
    std::vector<std::pair<Worker*, int>> who;  // (worker, stream); nullptr: 0 signals, 1 stdin
    fds.push_back({signals_->fd(), POLLIN, 0});
    who.emplace_back(nullptr, 0);
    if (stdin_open_) {
      fds.push_back({0, POLLIN, 0});
      who.emplace_back(nullptr, 1);
    }
    auto now = Clock::now();
    Clock::time_point wake = kill_at_;
    if (!hello_ && stdin_open_) wake = std::min(wake, hello_by_);
    for (auto& w : workers_) {
      if (w->out) {
        fds.push_back({w->out.get(), POLLIN, 0});
        who.emplace_back(w.get(), 1);
      }
      if (w->err) {
        fds.push_back({w->err.get(), POLLIN, 0});
        who.emplace_back(w.get(), 2);
      }
      if (w->exited && !w->reported) wake = std::min(wake, w->exited_at + kDrainAfterExit);
    }
    int timeout = -1;
    if (wake != Clock::time_point::max()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(wake - now).count();
      timeout = left < 0 ? 0 : static_cast<int>(left) + 1;
    }
    int rc = ::poll(fds.data(), fds.size(), timeout);
    if (rc < 0 && errno != EINTR) {
      agent_error(std::string("poll failed: ") + std::strerror(errno));
      begin_termination();
    }
    now = Clock::now();
    if (now >= kill_at_) {
      for (auto& w : workers_) {
        if (!w->exited && w->process.valid()) w->process.signal_group(SIGKILL);
      }
      kill_at_ = Clock::time_point::max();
    }
    if (!hello_ && stdin_open_ && now >= hello_by_) {
      fail("the launcher sent nothing for 60 s");
      continue;
    }
    for (std::size_t i = 0; rc > 0 && i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto [w, kind] = who[i];
      if (w == nullptr) {
        if (kind == 0) {
          on_signals();
        } else if (stdin_open_) {
          on_stdin_readable();
        }
      } else if ((kind == 1 && w->out) || (kind == 2 && w->err)) {
        read_pipe(*w, kind);
      }
    }
  }
  if (guard_) {
    const char bye[] = "bye\n";
    ssize_t ignored = ::write(guard_.get(), bye, sizeof bye - 1);
    (void)ignored;
  }
  guard_.reset();
  if (guard_process_.valid()) guard_process_.reap();  // it ends at "bye" or at end of file
  return failed_ ? kAgentFailureStatus : 0;
}

}  // namespace

int agent_main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], kGuardFlag) == 0) return guard_main(std::atoi(argv[2]));
  if (argc > 1) {
    agent_error(
        "takes no arguments: hvdrun starts it and speaks to it over stdin and stdout (docs/design.md, \"The agent\")");
    return 2;
  }
  return Agent().run();
}

}  // namespace hvd::launcher
