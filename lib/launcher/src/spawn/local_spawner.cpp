// Local workers: one `hvdrun-agent` child per launch, in its own process
// group; its stdin a socket from us (Hello, Spawn frames, Done, then Signal
// frames; closing it stops every worker), its stdout a pipe of Output and
// Exit frames drained by one reader thread (agent_client.h).
#include "hvd/launcher/spawn/local_spawner.h"

#include "hvd/common/error.h"
#include "hvd/common/io.h"
#include "hvd/launcher/process/signals.h"
#include "hvd/launcher/process/subprocess.h"
#include "hvd/launcher/spawn/agent.h"
#include "hvd/launcher/spawn/agent_client.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

namespace hvd::launcher {

std::string self_executable() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw IoError(fmt::format("cannot resolve /proc/self/exe: {}", std::strerror(errno)));
  return std::string(buf, static_cast<std::size_t>(n));
}

std::string local_agent_path() {
  std::string self = self_executable();
  return self.substr(0, self.rfind('/') + 1) + kAgentProgram;
}

namespace {

/// After the agent exits, how long its stdout may stay open (srun, or a
/// process that inherited it) before we stop reading and report.
constexpr auto kDrainAfterExit = std::chrono::milliseconds(2000);
/// How long a Signal frame may wait for room in the agent's stdin.
constexpr auto kSignalWriteTimeout = std::chrono::milliseconds(2000);
constexpr std::size_t kReadChunk = 64 * 1024;

class LocalSpawner final : public Spawner {
 public:
  explicit LocalSpawner(LocalSpawnerOptions options) : options_(std::move(options)) {
    if (options_.agent_command.empty()) options_.agent_command = {local_agent_path()};
  }
  ~LocalSpawner() override { shutdown(); }

  void launch(const std::vector<WorkerSpec>& workers, EventSink& sink, Deadline deadline) override;
  void signal(int rank, int sig) override;
  void shutdown() override;

 private:
  void reader_loop();
  /// Closes the agent's stdin (it then stops every worker). Under control_mutex_.
  void close_control_locked() { control_.reset(); }

  LocalSpawnerOptions options_;
  std::optional<AgentClient> client_;
  Subprocess agent_;  // reaped by the reader thread under control_mutex_
  UniqueFd out_;  // the agent's stdout
  std::mutex control_mutex_;  // control_ and agent_: signal() vs shutdown() vs the reader
  UniqueFd control_;  // our end of the agent's stdin
  std::thread reader_;
  std::mutex done_mutex_;
  std::condition_variable done_cv_;
  bool reader_done_ = false;
  bool launched_ = false;
  bool shut_down_ = false;
};

void LocalSpawner::launch(const std::vector<WorkerSpec>& workers, EventSink& sink, Deadline deadline) {
  HVD_ENFORCE(!launched_, "LocalSpawner::launch may be called once");
  launched_ = true;
  const std::string& host = options_.host;
  // Framed before anything starts: a worker that cannot be framed starts nothing.
  const std::string frames = agent_launch_frames(host, workers, options_.kill_grace);

  auto fail = [&](const std::string& what) {
    return LaunchError(host, fmt::format("{}: {}: {}", host, what, std::strerror(errno)));
  };
  int control[2], out[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control) != 0) throw fail("socketpair failed");
  UniqueFd control0(control[0]), control1(control[1]);
  if (::pipe2(out, O_CLOEXEC) != 0) throw fail("pipe failed");
  UniqueFd out0(out[0]), out1(out[1]);

  SpawnOptions spawn;
  spawn.argv = options_.agent_command;
  spawn.new_process_group = true;  // terminal Ctrl-C reaches hvdrun only; it forwards
  spawn.parent_death_signal = options_.parent_death_signal;  // extra guard; the socket EOF is the main one
  spawn.stdin_fd = ChildFd::from(control1.get());
  spawn.stdout_fd = ChildFd::from(out1.get());
  // The agent's own errors (one "hvdrun-agent: ..." line) go where hvdrun's do.
  spawn.stderr_fd = ChildFd::inherit();
  try {
    agent_ = Subprocess::spawn(spawn);
  } catch (const SpawnError& e) {
    throw LaunchError(host, fmt::format("{}: cannot start the hvdrun agent '{}': {}", host, options_.agent_command[0],
                                        std::strerror(e.error_number())));
  } catch (const IoError& e) {
    throw LaunchError(host, fmt::format("{}: {}", host, e.what()));
  }
  control1.reset();
  out1.reset();
  set_nonblocking(out0.get(), true);
  out_ = std::move(out0);
  control_ = std::move(control0);
  client_.emplace(host, sink, workers);
  // The reader runs while we send: the agent may already write output.
  reader_ = std::thread([this] { reader_loop(); });

  std::lock_guard<std::mutex> lock(control_mutex_);
  try {
    write_all(control_.get(), frames.data(), frames.size(), deadline);
  } catch (const TimeoutError&) {
    close_control_locked();
    throw LaunchError(host, fmt::format("{}: the hvdrun agent did not accept its workers within --start-timeout", host));
  } catch (const IoError& e) {
    // The agent died at once; its stderr and exit status tell why, and the
    // reader reports every worker as lost.
    spdlog::debug("{}: could not send the workers to the agent: {}", host, e.what());
  }
}

void LocalSpawner::reader_loop() {
  std::vector<char> buf(kReadChunk);
  std::optional<Clock::time_point> reaped_at;
  for (;;) {
    if (reaped_at && (!out_ || Clock::now() >= *reaped_at + kDrainAfterExit)) break;
    pollfd fds[2];
    nfds_t n = 0;
    int out_at = -1, pid_at = -1;
    if (out_) {
      out_at = static_cast<int>(n);
      fds[n++] = {out_.get(), POLLIN, 0};
    }
    if (!reaped_at && agent_.pidfd() >= 0) {
      pid_at = static_cast<int>(n);
      fds[n++] = {agent_.pidfd(), POLLIN, 0};
    }
    int timeout = -1;
    if (reaped_at) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*reaped_at + kDrainAfterExit - Clock::now());
      timeout = left.count() < 0 ? 0 : static_cast<int>(left.count()) + 1;
    } else if (pid_at < 0) {
      timeout = 100;  // no pidfd: look for the agent's exit on a timer
    }
    int rc = ::poll(fds, n, timeout);
    if (rc < 0 && errno != EINTR) {
      spdlog::error("{}: local spawner: poll failed: {}", options_.host, std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (out_at >= 0 && rc > 0 && fds[out_at].revents != 0) {
      ssize_t r = ::read(out_.get(), buf.data(), buf.size());
      if (r > 0) {
        if (!client_->on_bytes(buf.data(), static_cast<std::size_t>(r))) {
          // The stream is unusable: stop the agent's workers, stop reading.
          spdlog::debug("{}: {}", options_.host, client_->error());
          std::lock_guard<std::mutex> lock(control_mutex_);
          close_control_locked();
          out_.reset();
        }
      } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
        out_.reset();
      }
    }
    if (!reaped_at && (pid_at < 0 || (rc > 0 && fds[pid_at].revents != 0))) {
      // Under the lock: shutdown() may signal the agent from another thread,
      // and must never do so once its pid is free for reuse.
      std::lock_guard<std::mutex> lock(control_mutex_);
      if (agent_.try_reap()) reaped_at = Clock::now();
    }
  }
  out_.reset();
  const int ws = agent_.wait_status();
  const int sig = signal_of(ws);
  const std::string why = sig != 0 ? fmt::format("the hvdrun agent on {} was killed by {}", options_.host,
                                                 signal_name(sig))
                                   : fmt::format("the hvdrun agent on {} exited with status {} without reporting it",
                                                 options_.host, exit_status_of(ws));
  client_->finish(exit_status_of(ws), sig, why);
  {
    std::lock_guard<std::mutex> lock(control_mutex_);
    close_control_locked();
  }
  std::lock_guard<std::mutex> lock(done_mutex_);
  reader_done_ = true;
  done_cv_.notify_all();
}

void LocalSpawner::signal(int rank, int sig) {
  const std::string frame = agent_signal_frame(rank, sig);
  if (frame.empty()) {
    spdlog::debug("rank {}: signal {} cannot be forwarded through the agent", rank, sig);
    return;
  }
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (!control_) return;
  try {
    // Bounded: an agent that stops reading its stdin is stuck; closing it
    // (it then stops every worker) is all that is left to do.
    write_all(control_.get(), frame.data(), frame.size(), Deadline::after(kSignalWriteTimeout));
  } catch (const std::exception& e) {
    spdlog::warn("{}: could not deliver {} to rank {} through the agent ({}); stopping the agent's workers",
                 options_.host, signal_name(sig), rank, e.what());
    close_control_locked();
  }
}

void LocalSpawner::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  {
    // EOF on the agent's stdin: it SIGTERMs every worker, SIGKILLs after the grace.
    std::lock_guard<std::mutex> lock(control_mutex_);
    close_control_locked();
  }
  if (!reader_.joinable()) return;
  {
    std::unique_lock<std::mutex> lock(done_mutex_);
    auto bound = options_.kill_grace + std::chrono::seconds(3);
    if (!done_cv_.wait_for(lock, bound, [&] { return reader_done_; })) {
      // An agent that ignores its own protocol: kill it (its workers' leaders
      // die with it: their parent-death signal is SIGKILL).
      spdlog::warn("the hvdrun agent on {} did not exit within {} ms of shutdown; killing it", options_.host,
                   std::chrono::duration_cast<std::chrono::milliseconds>(bound).count());
      std::lock_guard<std::mutex> control_lock(control_mutex_);
      if (!agent_.reaped()) agent_.signal(SIGKILL);
    }
  }
  reader_.join();
}

}  // namespace

std::unique_ptr<Spawner> make_local_spawner(const LocalSpawnerOptions& options) {
  return std::make_unique<LocalSpawner>(options);
}

}  // namespace hvd::launcher
