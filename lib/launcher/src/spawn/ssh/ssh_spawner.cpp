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
#include <set>
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

/// Logs each distinct configuration warning once per process (every host
/// gets its own spawner, and elastic jobs launch again and again).
void warn_once(const std::string& line, const std::string& suffix = "") {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (seen.insert(line).second) spdlog::warn("{}{}", line, suffix);
}

void debug_once(const std::string& line) {
  static std::mutex mu;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mu);
  if (seen.insert(line).second) spdlog::debug("{}", line);
}

std::string local_hostname() {
  std::array<char, 256> buf{};
  if (::gethostname(buf.data(), buf.size() - 1) != 0) return "localhost";
  return buf.data();
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
  /// $HVDRUN_REMOTE_AGENT: used verbatim, no probing.
  std::string remote_command_override_;
  std::vector<std::string> agent_argv_;  // the agent command otherwise
  ssh::SshConfig config_;
  std::string config_error_;  // a configuration file that cannot be used
  EventSink* sink_ = nullptr;
  std::atomic<bool> cancel_{false};
  /// cancel_launch(): hvdrun is stopping (cancel_ is then set too).
  std::atomic<bool> stopping_{false};

  /// This host's connection settings: flags, then ssh_config, then defaults.
  ssh::SessionOptions session_options(const std::string& host) {
    if (!config_error_.empty()) throw LaunchError(host, fmt::format("{}: {}", host, config_error_));
    ssh::TokenValues tokens;
    tokens.home = options_.home;
    tokens.local_user = ssh::default_user();
    tokens.remote_user = options_.user.value_or(tokens.local_user);
    tokens.local_host = local_hostname();
    tokens.port = options_.port.value_or(22);
    tokens.port_from_flag = options_.port.has_value();
    ssh::HostConfig hc;
    try {
      hc = config_.resolve(host, tokens);
    } catch (const InvalidArgument& e) {
      throw LaunchError(host, fmt::format("{}: {}", host, e.what()));
    }
    // One line per keyword line, however many hosts it applies to.
    for (const auto& line : hc.unsupported) {
      warn_once(ssh::tilde_path(line, options_.home), fmt::format(" (applies to {} and maybe others)", host));
    }
    for (const auto& line : hc.ignored) debug_once(ssh::tilde_path(line, options_.home));

    ssh::SessionOptions so;
    so.host = host;
    so.hostname = hc.hostname.value_or("");
    so.port = options_.port ? *options_.port : hc.port.value_or(22);
    so.user = options_.user ? *options_.user : hc.user.value_or(ssh::default_user());
    so.identity_file = options_.identity_file;
    so.identity_files = hc.identity_files;
    so.identities_only = hc.identities_only.value_or(false);
    so.home = options_.home;
    if (!options_.known_hosts_file.empty()) {
      so.known_hosts_files = {options_.known_hosts_file};
    } else if (!hc.known_hosts_files.empty()) {
      so.known_hosts_files = hc.known_hosts_files;
    } else {
      so.known_hosts_files = {options_.home + "/.ssh/known_hosts"};
    }
    if (options_.strict_host_key_checking) {
      so.host_key_policy = ssh::HostKeyPolicy::Yes;
      so.host_key_policy_source = "--ssh-strict-host-key-checking";
    } else if (hc.host_key_policy) {
      so.host_key_policy = *hc.host_key_policy;
      so.host_key_policy_source = ssh::tilde_path(hc.host_key_policy_where, options_.home);
    }
    so.keepalive = options_.keepalive;
    if (!so.hostname.empty() || hc.port || hc.user) {
      spdlog::debug("{}: ssh_config: connecting to {}:{} as {}", host, so.hostname.empty() ? host : so.hostname,
                    so.port, so.user);
    }
    return so;
  }

  /// Runs `command` on the host in a channel of its own and returns its
  /// stdout (bounded: 64 KiB), before `deadline`.
  std::string run_remote(ssh::Session& s, const std::string& command, Deadline deadline) {
    LIBSSH2_SESSION* raw = s.raw();
    LIBSSH2_CHANNEL* ch = nullptr;
    for (;;) {
      ch = libssh2_channel_open_session(raw);
      if (ch != nullptr) break;
      if (libssh2_session_last_errno(raw) != LIBSSH2_ERROR_EAGAIN) {
        throw LaunchError(s.host(), fmt::format("{}: cannot open an SSH channel: {}", s.peer(), s.last_error()));
      }
      s.wait_socket(deadline, "opening a channel");
    }
    struct Free {
      LIBSSH2_CHANNEL* ch;
      ~Free() { libssh2_channel_free(ch); }
    } guard{ch};
    int rc = s.run(deadline, "looking for hvdrun", [&] { return libssh2_channel_exec(ch, command.c_str()); });
    if (rc != 0) {
      throw LaunchError(s.host(), fmt::format("{}: the server refused to run a command: {}", s.peer(), s.last_error()));
    }
    std::string out;
    std::array<char, 4096> buf{};
    for (;;) {
      ssize_t n = libssh2_channel_read(ch, buf.data(), buf.size());
      if (n > 0) {
        if (out.size() < 65536) out.append(buf.data(), static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0 && libssh2_channel_eof(ch) == 1) break;
      if (n < 0 && n != LIBSSH2_ERROR_EAGAIN) {
        throw LaunchError(s.host(), fmt::format("{}: {}", s.peer(), s.connection_error()));
      }
      s.wait_socket(deadline, "looking for hvdrun");
    }
    s.run(deadline, "looking for hvdrun", [&] { return libssh2_channel_close(ch); });
    return out;
  }

  /// The command that starts the agent on this host: the same absolute
  /// path as here when it exists there, else `hvdrun` from its PATH.
  std::string remote_command(ssh::Session& s, Deadline deadline) {
    if (!remote_command_override_.empty()) return remote_command_override_;
    const std::string& program = agent_argv_.front();
    if (program.empty() || program[0] != '/') return ssh::shell_join(agent_argv_);
    // Through sh: the user's login shell may not be a POSIX one (csh, fish).
    const std::string script = fmt::format(
        "if [ -x {0} ] && [ ! -d {0} ]; then echo hvdrun-probe:same; elif command -v hvdrun >/dev/null 2>&1; then "
        "echo \"hvdrun-probe:path $(command -v hvdrun)\"; else echo \"hvdrun-probe:none $PATH\"; fi",
        ssh::shell_quote(program));
    const std::string output = run_remote(s, "sh -c " + ssh::shell_quote(script), deadline);
    // The last probe line (shell start-up files may print their own).
    std::string out;
    const auto at = output.rfind("hvdrun-probe:");
    if (at != std::string::npos) {
      out = output.substr(at + 13);
      out = out.substr(0, out.find('\n'));
      while (!out.empty() && out.back() == '\r') out.pop_back();
    }
    if (out.empty()) {
      // The probe did not run as expected (no sh?): start the agent as before.
      spdlog::debug("{}: could not check for {} there (output: '{}'); using it as is", s.host(), program,
                    output.substr(0, 200));
      return ssh::shell_join(agent_argv_);
    }
    if (out == "same") {
      spdlog::debug("{}: starting the agent with {}", s.host(), program);
      return ssh::shell_join(agent_argv_);
    }
    if (out.rfind("path ", 0) == 0) {
      std::vector<std::string> argv = agent_argv_;
      argv.front() = out.substr(5);
      spdlog::warn("{}: {} does not exist there; using hvdrun from its PATH ({})", s.host(), program, argv.front());
      return ssh::shell_join(argv);
    }
    std::string path = out.rfind("none ", 0) == 0 ? out.substr(5) : out;
    throw LaunchError(s.host(),
                      fmt::format("{}: hvdrun not found there: {} does not exist and no hvdrun is on the PATH of "
                                  "non-interactive SSH sessions ({}); install hvdrun at the same path, or on that "
                                  "PATH, or set HVDRUN_REMOTE_AGENT to the remote command",
                                  s.peer(), program, path.empty() ? "PATH is empty" : "PATH=" + path));
  }

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
    host.session = ssh::Session::open(session_options(host.name), deadline, &cancel_);
    ssh::Session& s = *host.session;
    LIBSSH2_SESSION* raw = s.raw();
    const std::string command = remote_command(s, deadline);
    spdlog::debug("{}: starting {} worker(s) with: {}", s.peer(), host.workers.size(), command);
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
      int rc = s.run(deadline, "starting the remote agent", [&] { return libssh2_channel_exec(ch, command.c_str()); });
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
    if (const char* over = std::getenv("HVDRUN_REMOTE_AGENT"); over != nullptr && *over != '\0') {
      runner_->remote_command_override_ = over;
    } else if (!o.agent_command.empty()) {
      runner_->agent_argv_ = o.agent_command;
    } else {
      runner_->agent_argv_ = {self_exe_path(), "--agent"};
    }
    const std::vector<std::string> files =
        o.config_files ? *o.config_files : std::vector<std::string>{o.home + "/.ssh/config", "/etc/ssh/ssh_config"};
    std::vector<std::string> warnings;
    try {
      runner_->config_ = ssh::SshConfig::load(files, o.home, &warnings);
    } catch (const InvalidArgument& e) {
      runner_->config_error_ = e.what();  // reported by launch(), for each host
    }
    for (const auto& w : warnings) warn_once(ssh::tilde_path(w, o.home));
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
    const std::string first_host = workers.empty() ? std::string() : workers.front().slot.hostname;
    if (runner_->stopping_.load())
      throw LaunchError(first_host, fmt::format("{}: not connecting: hvdrun is stopping", first_host));
    // Group by host, keeping the order in which hosts first appear.
    std::unique_lock<std::mutex> hosts_lock(mu_);  // against cancel_launch()
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
    hosts_lock.unlock();

    // Wait for every host's start phase (the threads bound themselves by the
    // deadline; the extra second covers a resolver that ignores it).
    const auto hard_stop = deadline.is_never() ? Clock::time_point::max() : deadline.at() + std::chrono::seconds(1);
    std::string first_error;
    std::string first_error_host;
    auto stopping = [&] { return runner_->stopping_.load(); };
    for (auto& host : hosts_) {
      std::unique_lock<std::mutex> lock(host->mu);
      bool done = hard_stop == Clock::time_point::max()
                      ? (host->cv.wait(lock, [&] { return host->start_done || stopping(); }), true)
                      : host->cv.wait_until(lock, hard_stop, [&] { return host->start_done || stopping(); });
      if (stopping()) break;
      if (!done) {
        host->start_error = fmt::format("{}: timed out while connecting", host->name);
        host->start_done = true;
      }
      if (!host->start_error.empty() && !host->cancelled_error && first_error.empty()) {
        first_error = host->start_error;
        first_error_host = host->name;
      }
    }
    if (stopping()) {
      // hvdrun is stopping (a signal): the host threads see cancel_ within
      // about 100 ms; one stuck in a name lookup is abandoned.
      release_all(/*go=*/false);
      join_all(std::chrono::milliseconds(500));
      throw LaunchError(first_host, fmt::format("{}: connection abandoned: hvdrun is stopping", first_host));
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

  void cancel_launch() override {
    runner_->stopping_.store(true);
    runner_->cancel_.store(true);
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& host : hosts_) {
      std::lock_guard<std::mutex> host_lock(host->mu);
      host->cv.notify_all();
    }
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
