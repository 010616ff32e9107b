// The SSH spawner: one thread per host. Each host thread first connects,
// authenticates and starts one channel per worker (the "start" phase, bounded
// by launch()'s deadline), then waits for launch() to say go -- only when
// every host started -- and becomes that host's I/O loop: it owns the libssh2
// session, polls its socket and a wake-up eventfd, forwards channel output
// and exits to the sink and writes queued control bytes. A vanished host is
// noticed by the kernel (TCP keepalive, ssh::set_liveness_checks).
#include "hvd/launcher/spawn/ssh/ssh_spawner.h"

#include "hvd/common/error.h"
#include "hvd/launcher/spawn/ssh/ssh_session.h"

#include <libssh2.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <array>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

namespace hvd::launcher {

namespace {

constexpr std::size_t kReadChunk = 32 * 1024;
constexpr auto kJoinTimeout = std::chrono::milliseconds(5000);
constexpr int kLostStatus = 255;  // what ssh itself exits with on connection errors

char control_byte(int sig) {
  switch (sig) {
    case SIGINT: return 'I';
    case SIGTERM: return 'T';
    case SIGHUP: return 'H';
    case SIGKILL: return 'K';
    default: return 0;
  }
}

int signal_number(const std::string& name) {
  static const std::map<std::string, int> table = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"ILL", SIGILL},   {"TRAP", SIGTRAP}, {"ABRT", SIGABRT},
      {"BUS", SIGBUS},   {"FPE", SIGFPE},   {"KILL", SIGKILL}, {"USR1", SIGUSR1}, {"SEGV", SIGSEGV}, {"USR2", SIGUSR2},
      {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM}, {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ}, {"SYS", SIGSYS}};
  std::string n = name.rfind("SIG", 0) == 0 ? name.substr(3) : name;
  auto it = table.find(n);
  return it == table.end() ? 0 : it->second;
}

bool is_connection_error(int rc) {
  switch (rc) {
    case LIBSSH2_ERROR_SOCKET_NONE:
    case LIBSSH2_ERROR_SOCKET_SEND:
    case LIBSSH2_ERROR_SOCKET_RECV:
    case LIBSSH2_ERROR_SOCKET_DISCONNECT:
    case LIBSSH2_ERROR_SOCKET_TIMEOUT:
    case LIBSSH2_ERROR_TIMEOUT:
    case LIBSSH2_ERROR_KEX_FAILURE:
    case LIBSSH2_ERROR_DECRYPT:
    case LIBSSH2_ERROR_BANNER_RECV:
    case LIBSSH2_ERROR_PROTO: return true;
    default: return false;
  }
}

std::string self_exe_path() {
  std::array<char, PATH_MAX> buf{};
  ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), static_cast<std::size_t>(n)) : std::string("hvdrun");
}

struct Worker {
  int rank = -1;
  std::string frame;  // the spec frame, sent once at start
  LIBSSH2_CHANNEL* channel = nullptr;
  std::string stdin_pending;  // control bytes not yet written
  bool eof = false;  // remote sent EOF (all output read)
  bool done = false;  // on_exit delivered
};

/// One host: its workers, its session and the thread that owns both.
struct Host {
  std::string name;
  std::vector<Worker> workers;
  std::unique_ptr<ssh::Session> session;
  UniqueFd wake;  // eventfd: signal()/shutdown() -> I/O thread
  std::thread thread;

  // Start phase result, and launch()'s go/abort decision.
  std::mutex mu;
  std::condition_variable cv;
  bool start_done = false;
  std::string start_error;  // empty: started
  bool cancelled_error = false;
  bool go = false;
  bool abort = false;
  bool finished = false;  // thread function returned

  // Requests for the I/O thread.
  std::deque<std::pair<int, char>> controls;  // (rank, byte)
  bool stop = false;

  void poke() {
    uint64_t one = 1;
    ssize_t n = ::write(wake.get(), &one, sizeof one);
    (void)n;
  }
};

/// The host threads' side: what they read (options, the remote command,
/// the sink) and do. Threads hold it by shared_ptr, so a thread that
/// join_all() had to abandon (stuck in a resolver that ignores deadlines)
/// never touches freed memory; such a thread has not been told to go, so it
/// never touches the sink either.
class HostRunner {
 public:
  SshSpawnerOptions options_;
  std::string remote_command_;
  EventSink* sink_ = nullptr;
  std::atomic<bool> cancel_{false};

  // ---- start phase (host thread) ------------------------------------------

  void host_main(Host& host, Deadline deadline) {
    try {
      start_host(host, deadline);
      report_start(host, "", false);
    } catch (const LaunchError& e) {
      bool was_cancel = cancel_.load();
      report_start(host, e.what(), was_cancel);
    } catch (const std::exception& e) {
      report_start(host, fmt::format("{}: {}", host.name, e.what()), cancel_.load());
    }
    bool go = false;
    {
      std::unique_lock<std::mutex> lock(host.mu);
      host.cv.wait(lock, [&] { return host.go || host.abort; });
      go = host.go && host.start_error.empty();
    }
    if (go) {
      try {
        io_loop(host);
      } catch (const std::exception& e) {
        lose_host(host, e.what());
      }
    }
    close_host(host);
    std::lock_guard<std::mutex> lock(host.mu);
    host.finished = true;
    host.cv.notify_all();
  }

  void report_start(Host& host, const std::string& error, bool cancelled) {
    if (!error.empty() && !cancelled) cancel_.store(true);  // stop the other hosts early
    std::lock_guard<std::mutex> lock(host.mu);
    host.start_error = error;
    host.cancelled_error = cancelled && !error.empty();
    host.start_done = true;
    host.cv.notify_all();
  }

  void start_host(Host& host, Deadline deadline) {
    ssh::SessionOptions so;
    so.host = host.name;
    so.port = options_.port.value_or(22);
    so.user = *options_.user;
    so.identity_file = options_.identity_file;
    so.home = options_.home;
    so.known_hosts_file = options_.known_hosts_file;
    so.strict_host_key_checking = options_.strict_host_key_checking;
    so.keepalive = options_.keepalive;
    host.session = ssh::Session::open(so, deadline, &cancel_);
    ssh::Session& s = *host.session;
    LIBSSH2_SESSION* raw = s.raw();
    spdlog::debug("{}: starting {} worker(s) with: {}", s.peer(), host.workers.size(), remote_command_);
    for (auto& w : host.workers) {
      LIBSSH2_CHANNEL* ch = nullptr;
      for (;;) {
        ch = libssh2_channel_open_session(raw);
        if (ch != nullptr) break;
        if (libssh2_session_last_errno(raw) != LIBSSH2_ERROR_EAGAIN) {
          throw LaunchError(host.name, fmt::format("{}: cannot open an SSH channel for rank {}: {}", s.peer(), w.rank,
                                                   s.last_error()));
        }
        s.wait_socket(deadline, "opening a channel");
      }
      w.channel = ch;
      int rc = s.run(deadline, "starting the remote agent",
                     [&] { return libssh2_channel_exec(ch, remote_command_.c_str()); });
      if (rc != 0) {
        throw LaunchError(host.name, fmt::format("{}: the server refused to run the agent for rank {}: {}", s.peer(),
                                                 w.rank, s.last_error()));
      }
      std::size_t off = 0;
      while (off < w.frame.size()) {
        ssize_t n = 0;
        s.run(deadline, "sending the worker spec", [&] {
          n = libssh2_channel_write(ch, w.frame.data() + off, w.frame.size() - off);
          return n == LIBSSH2_ERROR_EAGAIN ? LIBSSH2_ERROR_EAGAIN : 0;
        });
        if (n < 0) {
          throw LaunchError(host.name, fmt::format("{}: cannot send the worker spec for rank {}: {}", s.peer(), w.rank,
                                                   s.last_error()));
        }
        off += static_cast<std::size_t>(n);
      }
      w.frame.clear();
      w.frame.shrink_to_fit();
    }
  }

  // ---- I/O phase (host thread) --------------------------------------------

  void io_loop(Host& host) {
    ssh::Session& s = *host.session;
    LIBSSH2_SESSION* raw = s.raw();
    std::vector<char> buf(kReadChunk);

    for (;;) {
      bool stop = false;
      {
        std::lock_guard<std::mutex> lock(host.mu);
        stop = host.stop;
        for (auto& [rank, byte] : host.controls) {
          for (auto& w : host.workers) {
            if (w.rank == rank && !w.done) w.stdin_pending.push_back(byte);
          }
        }
        host.controls.clear();
      }
      if (stop) return;

      // Control bytes to the agents' stdin.
      for (auto& w : host.workers) {
        if (w.done || w.stdin_pending.empty()) continue;
        ssize_t n = libssh2_channel_write(w.channel, w.stdin_pending.data(), w.stdin_pending.size());
        if (n > 0) {
          w.stdin_pending.erase(0, static_cast<std::size_t>(n));
        } else if (n != LIBSSH2_ERROR_EAGAIN) {
          if (is_connection_error(static_cast<int>(n))) {
            return lose_host(host, s.connection_error());
          }
          w.stdin_pending.clear();  // the agent is gone; its exit follows
        }
      }

      // Output, EOF and exits.
      const uint64_t received_before = s.bytes_received();
      bool all_done = true;
      for (auto& w : host.workers) {
        if (w.done) continue;
        for (int stream_id : {0, SSH_EXTENDED_DATA_STDERR}) {
          for (;;) {
            ssize_t n = libssh2_channel_read_ex(w.channel, stream_id, buf.data(), buf.size());
            if (n > 0) {
              sink_->on_output(w.rank, stream_id == 0 ? Stream::Stdout : Stream::Stderr, buf.data(),
                               static_cast<std::size_t>(n));
              continue;
            }
            if (n < 0 && n != LIBSSH2_ERROR_EAGAIN && is_connection_error(static_cast<int>(n))) {
              return lose_host(host, s.connection_error());
            }
            break;
          }
        }
        if (!w.eof && libssh2_channel_eof(w.channel) == 1) {
          w.eof = true;
          spdlog::debug("rank {}: end of output", w.rank);
        }
        if (w.eof) {
          int rc = libssh2_channel_wait_closed(w.channel);
          if (rc == 0) {
            finish_worker(raw, w);
          } else if (rc != LIBSSH2_ERROR_EAGAIN) {
            if (is_connection_error(rc)) return lose_host(host, s.connection_error());
            finish_worker(raw, w);
          }
        }
        if (!w.done) all_done = false;
      }
      if (all_done) {
        spdlog::debug("{}: all workers exited; closing the connection", host.name);
        return;
      }

      // Bytes that arrived during the pass may sit in libssh2's queue, not
      // in the socket: look again before sleeping.
      if (s.bytes_received() != received_before) continue;
      const int timeout_ms = 1000;  // events wake us; this only bounds a missed wake-up
      pollfd fds[2] = {{s.fd(), static_cast<short>(POLLIN | (s.wanted_events() & POLLOUT)), 0},
                       {host.wake.get(), POLLIN, 0}};
      int prc = ::poll(fds, 2, timeout_ms);
      if (prc < 0 && errno != EINTR) {
        return lose_host(host, fmt::format("poll: {}", std::strerror(errno)));
      }
      if (fds[1].revents & POLLIN) {
        uint64_t v;
        ssize_t n = ::read(host.wake.get(), &v, sizeof v);
        (void)n;
      }
    }
  }

  void finish_worker(LIBSSH2_SESSION* raw, Worker& w) {
    WorkerExit ex;
    ex.rank = w.rank;
    char* sig_name = nullptr;
    std::size_t sig_len = 0;
    libssh2_channel_get_exit_signal(w.channel, &sig_name, &sig_len, nullptr, nullptr, nullptr, nullptr);
    if (sig_name != nullptr) {
      std::string name(sig_name, sig_len);
      libssh2_free(raw, sig_name);
      ex.signal = signal_number(name);
      ex.status = 128 + (ex.signal != 0 ? ex.signal : 0);
      if (ex.signal == 0) ex.lost_reason = fmt::format("remote agent killed by unknown signal {}", name);
    } else {
      ex.status = libssh2_channel_get_exit_status(w.channel);
      // The agent reports a worker killed by signal N as 128+N (agent.h).
      if (ex.status > 128 && ex.status < 128 + 32) ex.signal = ex.status - 128;
    }
    w.done = true;
    spdlog::debug("rank {}: remote worker finished with status {}", w.rank, ex.status);
    sink_->on_exit(ex);
  }

  /// The connection is gone: every running worker of this host is lost.
  void lose_host(Host& host, const std::string& why) {
    bool shutting_down = false;
    {
      std::lock_guard<std::mutex> lock(host.mu);
      shutting_down = host.stop;
    }
    std::string reason = shutting_down
                             ? fmt::format("shut down while the SSH connection to {} failed: {}", host.name, why)
                             : fmt::format("SSH connection to {} lost: {}", host.name, why);
    bool any = false;
    for (auto& w : host.workers) {
      if (w.done) continue;
      any = true;
      w.done = true;
      WorkerExit ex;
      ex.rank = w.rank;
      ex.status = kLostStatus;
      ex.lost_reason = reason;
      sink_->on_exit(ex);
    }
    // The supervisor reports each lost rank; one host-level line for --verbose.
    if (any && !shutting_down) spdlog::debug("{}", reason);
  }

  /// Closes channels (EOF makes each remote agent kill its worker), reports
  /// workers that were still running, and disconnects. Bounded in time.
  void close_host(Host& host) {
    if (host.session) {
      LIBSSH2_SESSION* raw = host.session->raw();
      const Deadline d = Deadline::after(std::chrono::milliseconds(1000));
      for (auto& w : host.workers) {
        if (w.channel == nullptr || w.done) continue;
        while (libssh2_channel_send_eof(w.channel) == LIBSSH2_ERROR_EAGAIN && !d.expired()) {
          pollfd p{host.session->fd(), POLLOUT, 0};
          ::poll(&p, 1, 10);
        }
        while (libssh2_channel_close(w.channel) == LIBSSH2_ERROR_EAGAIN && !d.expired()) {
          pollfd p{host.session->fd(), POLLOUT | POLLIN, 0};
          ::poll(&p, 1, 10);
        }
      }
      (void)raw;
    }
    // Workers of a started host that never reported an exit.
    bool started;
    {
      std::lock_guard<std::mutex> lock(host.mu);
      started = host.go && host.start_error.empty();
    }
    if (started) {
      for (auto& w : host.workers) {
        if (w.done) continue;
        w.done = true;
        WorkerExit ex;
        ex.rank = w.rank;
        ex.status = kLostStatus;
        ex.lost_reason = fmt::format("shut down: hvdrun closed the SSH connection to {}", host.name);
        sink_->on_exit(ex);
      }
    }
    // Channels are freed with the session.
    if (host.session) host.session->close("hvdrun: job finished");
    host.session.reset();
  }
};

class SshSpawner final : public Spawner {
 public:
  explicit SshSpawner(SshSpawnerOptions options) {
    SshSpawnerOptions& o = runner_->options_;
    o = std::move(options);
    if (o.home.empty()) o.home = ssh::default_home();
    if (!o.user) o.user = ssh::default_user();
    if (o.known_hosts_file.empty()) o.known_hosts_file = o.home + "/.ssh/known_hosts";
    std::string& cmd = runner_->remote_command_;
    if (const char* over = std::getenv("HVDRUN_REMOTE_AGENT"); over != nullptr && *over != '\0') {
      cmd = over;
    } else if (!o.agent_command.empty()) {
      cmd = ssh::shell_join(o.agent_command);
    } else {
      cmd = ssh::shell_join({self_exe_path(), "--agent"});
    }
  }

  ~SshSpawner() override { shutdown(); }

  void launch(const std::vector<WorkerSpec>& workers, EventSink& sink, Deadline deadline) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      HVD_ENFORCE(!launched_, "SshSpawner::launch may be called once");
      launched_ = true;
    }
    ssh::ensure_libssh2_initialized();
    runner_->sink_ = &sink;
    // Group by host, keeping the order in which hosts first appear.
    std::map<std::string, std::size_t> index;
    for (const auto& spec : workers) {
      const std::string& name = spec.slot.hostname;
      auto it = index.find(name);
      if (it == index.end()) {
        it = index.emplace(name, hosts_.size()).first;
        auto host = std::make_shared<Host>();
        host->name = name;
        host->wake = UniqueFd(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
        if (!host->wake) throw hvd::IoError(fmt::format("eventfd: {}", std::strerror(errno)));
        hosts_.push_back(std::move(host));
      }
      Worker w;
      w.rank = spec.slot.rank;
      w.frame = ssh::encode_spec_frame(spec);
      hosts_[it->second]->workers.push_back(std::move(w));
      rank_host_[spec.slot.rank] = it->second;
    }
    spdlog::debug("connecting to {} host(s) over SSH", hosts_.size());
    for (auto& host : hosts_) {
      host->thread = std::thread([runner = runner_, host, deadline] { runner->host_main(*host, deadline); });
    }

    // Wait for every host's start phase (the threads bound themselves by the
    // deadline; the extra second covers a resolver that ignores it).
    const auto hard_stop = deadline.is_never() ? Clock::time_point::max() : deadline.at() + std::chrono::seconds(1);
    std::string first_error;
    std::string first_error_host;
    for (auto& host : hosts_) {
      std::unique_lock<std::mutex> lock(host->mu);
      bool done = hard_stop == Clock::time_point::max()
                      ? (host->cv.wait(lock, [&] { return host->start_done; }), true)
                      : host->cv.wait_until(lock, hard_stop, [&] { return host->start_done; });
      if (!done) {
        host->start_error = fmt::format("{}: timed out while connecting", host->name);
        host->start_done = true;
      }
      if (!host->start_error.empty() && !host->cancelled_error && first_error.empty()) {
        first_error = host->start_error;
        first_error_host = host->name;
      }
    }
    if (!first_error.empty()) {
      for (auto& host : hosts_) {
        if (!host->start_error.empty() && !host->cancelled_error && host->name != first_error_host) {
          spdlog::error("{}", host->start_error);
        }
      }
      runner_->cancel_.store(true);
      release_all(/*go=*/false);
      join_all(std::chrono::milliseconds(1500));
      throw LaunchError(first_error_host, first_error);
    }
    release_all(/*go=*/true);
    spdlog::debug("started {} worker(s) on {} host(s) over SSH", workers.size(), hosts_.size());
  }

  void signal(int rank, int sig) override {
    char byte = control_byte(sig);
    if (byte == 0) {
      spdlog::debug("signal {} has no agent control byte; not forwarded to rank {}", sig, rank);
      return;
    }
    auto it = rank_host_.find(rank);
    if (it == rank_host_.end()) return;
    Host& host = *hosts_[it->second];
    std::lock_guard<std::mutex> lock(host.mu);
    if (host.finished || !host.go) return;
    host.controls.emplace_back(rank, byte);
    host.poke();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (shut_down_) return;
      shut_down_ = true;
    }
    for (auto& host : hosts_) {
      std::lock_guard<std::mutex> lock(host->mu);
      host->stop = true;
      host->abort = !host->go;
      host->cv.notify_all();
      if (host->wake) host->poke();
    }
    join_all();
  }

 private:
  void release_all(bool go) {
    for (auto& host : hosts_) {
      std::lock_guard<std::mutex> lock(host->mu);
      if (go) {
        host->go = true;
      } else {
        host->abort = true;
      }
      host->cv.notify_all();
    }
  }

  void join_all(std::chrono::milliseconds timeout = kJoinTimeout) {
    for (auto& host : hosts_) {
      if (!host->thread.joinable()) continue;
      std::unique_lock<std::mutex> lock(host->mu);
      bool finished = host->cv.wait_for(lock, timeout, [&] { return host->finished; });
      lock.unlock();
      if (finished) {
        host->thread.join();
      } else {
        // Only a resolver that ignores deadlines gets here; the thread holds
        // the runner and its host by shared_ptr, so abandoning it is safe.
        spdlog::warn("{}: SSH thread did not stop within {} ms; abandoning it", host->name, timeout.count());
        host->thread.detach();
      }
    }
  }

  std::shared_ptr<HostRunner> runner_ = std::make_shared<HostRunner>();
  std::vector<std::shared_ptr<Host>> hosts_;
  std::map<int, std::size_t> rank_host_;
  std::mutex mu_;
  bool launched_ = false;
  bool shut_down_ = false;
};

}  // namespace

std::unique_ptr<Spawner> make_ssh_spawner(const SshSpawnerOptions& options) {
  return std::make_unique<SshSpawner>(options);
}

}  // namespace hvd::launcher
