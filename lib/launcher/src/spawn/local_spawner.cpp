// Local workers: one `hvdrun --agent` child per worker, in its own process
// group, stdin a socket from us (spec frame, then control bytes; closing it
// kills the worker), stdout/stderr pipes drained by one reader thread.
#include "hvd/launcher/spawn/local_spawner.h"

#include "hvd/common/error.h"
#include "hvd/common/io.h"
#include "hvd/common/job_env.h"
#include "hvd/launcher/process/subprocess.h"
#include "hvd/launcher/spawn/agent.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <mutex>
#include <thread>

extern char** environ;

namespace hvd::launcher {

std::string self_executable() {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) throw IoError(fmt::format("cannot resolve /proc/self/exe: {}", std::strerror(errno)));
  return std::string(buf, static_cast<std::size_t>(n));
}

namespace {

/// After the agent exits, how long its pipes may stay open (a worker's
/// escaped grandchild holding them) before we stop reading and report.
constexpr auto kDrainAfterExit = std::chrono::milliseconds(2000);
constexpr std::size_t kReadChunk = 64 * 1024;

class LocalSpawner final : public Spawner {
 public:
  explicit LocalSpawner(LocalSpawnerOptions options) : options_(std::move(options)) {
    if (options_.agent_command.empty()) options_.agent_command = {self_executable(), "--agent"};
  }
  ~LocalSpawner() override { shutdown(); }

  void launch(const std::vector<WorkerSpec>& workers, EventSink& sink, Deadline deadline) override;
  void signal(int rank, int sig) override;
  void shutdown() override;

 private:
  struct Agent {
    int rank = -1;
    Subprocess process;  // reaped by the reader thread under control_mutex_
    UniqueFd control;  // our end of the agent's stdin
    UniqueFd out, err;
    Clock::time_point reaped_at;
    bool reported = false;
  };

  void start_agent(const WorkerSpec& worker, Deadline deadline);
  void reader_loop();
  void try_reap(Agent& a);

  LocalSpawnerOptions options_;
  std::vector<std::string> agent_env_;

  EventSink* sink_ = nullptr;
  std::vector<std::unique_ptr<Agent>> agents_;  // fixed once the reader runs
  std::mutex control_mutex_;  // control fds: signal() vs shutdown()
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
  sink_ = &sink;

  // The agent inherits our environment plus the kill grace (the worker's own
  // environment travels in the spec frame, not here).
  const std::string grace_prefix = std::string(job_env::kKillGraceMs) + "=";
  for (char** e = environ; e && *e; ++e) {
    if (std::strncmp(*e, grace_prefix.c_str(), grace_prefix.size()) != 0) agent_env_.emplace_back(*e);
  }
  agent_env_.push_back(fmt::format("{}{}", grace_prefix, options_.kill_grace.count()));

  try {
    for (const WorkerSpec& w : workers) start_agent(w, deadline);
  } catch (...) {
    // Whatever started is reaped and reported by the reader; shutdown()
    // (the caller's job after a LaunchError) stops it.
    reader_ = std::thread([this] { reader_loop(); });
    throw;
  }
  reader_ = std::thread([this] { reader_loop(); });
}

void LocalSpawner::start_agent(const WorkerSpec& worker, Deadline deadline) {
  auto fail = [](const std::string& what) {
    return LaunchError("localhost", fmt::format("localhost: {}: {}", what, std::strerror(errno)));
  };
  int control[2], out[2], err[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, control) != 0) throw fail("socketpair failed");
  UniqueFd control0(control[0]), control1(control[1]);
  if (::pipe2(out, O_CLOEXEC) != 0) throw fail("pipe failed");
  UniqueFd out0(out[0]), out1(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) throw fail("pipe failed");
  UniqueFd err0(err[0]), err1(err[1]);

  SpawnOptions spawn;
  spawn.argv = options_.agent_command;
  spawn.env = agent_env_;
  spawn.new_process_group = true;  // terminal Ctrl-C reaches hvdrun only; it forwards
  spawn.parent_death_signal = options_.parent_death_signal;  // extra guard; the socket EOF is the main one
  spawn.stdin_fd = ChildFd::from(control1.get());
  spawn.stdout_fd = ChildFd::from(out1.get());
  spawn.stderr_fd = ChildFd::from(err1.get());
  auto agent = std::make_unique<Agent>();
  agent->rank = worker.slot.rank;
  try {
    agent->process = Subprocess::spawn(spawn);
  } catch (const SpawnError& e) {
    throw LaunchError("localhost", fmt::format("localhost: cannot start the hvdrun agent '{}': {}",
                                               options_.agent_command[0], std::strerror(e.error_number())));
  } catch (const IoError& e) {
    throw LaunchError("localhost", fmt::format("localhost: {}", e.what()));
  }
  control1.reset();
  out1.reset();
  err1.reset();

  set_nonblocking(out0.get(), true);
  set_nonblocking(err0.get(), true);
  agent->control = std::move(control0);
  agent->out = std::move(out0);
  agent->err = std::move(err0);
  Agent& a = *agent;
  agents_.push_back(std::move(agent));

  try {
    write_frame(a.control.get(), encode_agent_spec(worker), deadline);
  } catch (const TimeoutError&) {
    throw LaunchError("localhost", "localhost: the hvdrun agent did not accept the worker spec within --start-timeout");
  } catch (const IoError& e) {
    // The agent died at once; its stderr and exit status tell why.
    spdlog::debug("rank {}: could not send the spec to the agent: {}", worker.slot.rank, e.what());
  }
}

void LocalSpawner::try_reap(Agent& a) {
  // Under the lock: shutdown() may signal the agent from another thread,
  // and must never do so once its pid is free for reuse.
  std::lock_guard<std::mutex> lock(control_mutex_);
  if (a.process.reaped()) return;
  if (a.process.try_reap()) a.reaped_at = Clock::now();
}

void LocalSpawner::reader_loop() {
  std::vector<char> buf(kReadChunk);
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Agent*, int>> who;  // 0 out, 1 err, 2 pidfd
    bool need_tick = false;
    auto now = Clock::now();
    int timeout = -1;
    std::size_t pending = 0;
    for (auto& ap : agents_) {
      Agent& a = *ap;
      if (a.reported) continue;
      ++pending;
      if (a.out) {
        fds.push_back({a.out.get(), POLLIN, 0});
        who.emplace_back(&a, 0);
      }
      if (a.err) {
        fds.push_back({a.err.get(), POLLIN, 0});
        who.emplace_back(&a, 1);
      }
      if (!a.process.reaped()) {
        if (a.process.pidfd() >= 0) {
          fds.push_back({a.process.pidfd(), POLLIN, 0});
          who.emplace_back(&a, 2);
        } else
          need_tick = true;
      } else {
        auto left = std::chrono::duration_cast<std::chrono::milliseconds>(a.reaped_at + kDrainAfterExit - now).count();
        int t = left < 0 ? 0 : static_cast<int>(left) + 1;
        timeout = timeout < 0 ? t : std::min(timeout, t);
      }
    }
    if (pending == 0) break;
    if (need_tick) timeout = timeout < 0 ? 100 : std::min(timeout, 100);
    int rc = ::poll(fds.data(), fds.size(), timeout);
    if (rc < 0 && errno != EINTR) {
      spdlog::error("local spawner: poll failed: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    for (std::size_t i = 0; rc > 0 && i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto [a, kind] = who[i];
      if (kind == 2) {
        try_reap(*a);
        continue;
      }
      UniqueFd& fd = kind == 0 ? a->out : a->err;
      ssize_t n = ::read(fd.get(), buf.data(), buf.size());
      if (n > 0) {
        sink_->on_output(a->rank, kind == 0 ? Stream::Stdout : Stream::Stderr, buf.data(), static_cast<std::size_t>(n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        fd.reset();
      }
    }
    now = Clock::now();
    for (auto& ap : agents_) {
      Agent& a = *ap;
      if (a.reported) continue;
      if (!a.process.reaped() && (a.process.pidfd() < 0 || (!a.out && !a.err))) try_reap(a);
      if (!a.process.reaped()) continue;
      bool drained = !a.out && !a.err;
      if (!drained && now < a.reaped_at + kDrainAfterExit) continue;
      a.out.reset();
      a.err.reset();
      WorkerExit e;
      e.rank = a.rank;
      e.status = exit_status_of(a.process.wait_status());
      e.signal = signal_of(a.process.wait_status());
      {
        std::lock_guard<std::mutex> lock(control_mutex_);
        a.control.reset();
        a.reported = true;
      }
      sink_->on_exit(e);
    }
  }
  std::lock_guard<std::mutex> lock(done_mutex_);
  reader_done_ = true;
  done_cv_.notify_all();
}

void LocalSpawner::signal(int rank, int sig) {
  char byte = control_byte_for(sig);
  if (byte == 0) {
    spdlog::debug("rank {}: signal {} cannot be forwarded through the agent", rank, sig);
    return;
  }
  std::lock_guard<std::mutex> lock(control_mutex_);
  for (auto& a : agents_) {
    if (a->rank != rank || a->reported || !a->control) continue;
    // Never block on a stuck agent: a full socket buffer means it is not
    // reading, and closing the socket (shutdown) will still reach it.
    ssize_t n = ::send(a->control.get(), &byte, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n != 1) spdlog::debug("rank {}: could not deliver signal {} to the agent: {}", rank, sig, std::strerror(errno));
  }
}

void LocalSpawner::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  {
    // EOF on every agent's stdin: each SIGTERMs its worker, SIGKILLs after the grace.
    std::lock_guard<std::mutex> lock(control_mutex_);
    for (auto& a : agents_) a->control.reset();
  }
  if (!reader_.joinable()) return;
  {
    std::unique_lock<std::mutex> lock(done_mutex_);
    auto bound = options_.kill_grace + std::chrono::seconds(3);
    if (!done_cv_.wait_for(lock, bound, [&] { return reader_done_; })) {
      // An agent that ignores its own protocol: kill it (the worker's group
      // is the agent's to kill; this is the last resort).
      spdlog::warn("local agents did not exit within {} ms of shutdown; killing them",
                   std::chrono::duration_cast<std::chrono::milliseconds>(bound).count());
      std::lock_guard<std::mutex> control_lock(control_mutex_);
      for (auto& a : agents_) {
        if (!a->reported) a->process.signal(SIGKILL);
      }
    }
  }
  reader_.join();
}

}  // namespace

std::unique_ptr<Spawner> make_local_spawner(const LocalSpawnerOptions& options) {
  return std::make_unique<LocalSpawner>(options);
}

}  // namespace hvd::launcher
