// The SSH spawner: one thread per host. Each host thread first connects,
// authenticates and starts one channel per worker (the "start" phase, bounded
// by launch()'s deadline), then waits for launch() to say go -- only when
// every host started -- and becomes that host's I/O loop: it owns the libssh2
// session, polls its socket and a wake-up eventfd, forwards channel output
// and exits to the sink and writes queued control bytes. A vanished host is
// noticed by the kernel (TCP keepalive, ssh::set_liveness_checks).
#include "hvd/launcher/spawn/ssh/ssh_spawner.h"

#include "hvd/common/error.h"
#include "hvd/launcher/hosts/network.h"
#include "hvd/launcher/spawn/agent.h"
#include "hvd/launcher/spawn/agent_client.h"
#include "hvd/launcher/spawn/local_spawner.h"
#include "hvd/launcher/spawn/ssh/ssh_algorithms.h"
#include "hvd/launcher/spawn/ssh/ssh_session.h"

#include <libssh2.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <array>
#include <cctype>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

namespace hvd::launcher {

namespace {

constexpr std::size_t kReadChunk = 32 * 1024;
constexpr auto kJoinTimeout = std::chrono::milliseconds(5000);
constexpr int kLostStatus = 255;  // what ssh itself exits with on connection errors

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

struct Worker {
  int rank = -1;
  WorkerSpec spec;  // until the agent has it
};

/// One host: its workers, its session and the thread that owns both.
struct Host {
  std::string name;
  std::vector<Worker> workers;
  std::unique_ptr<ssh::Session> session;
  UniqueFd wake;  // eventfd: signal()/shutdown() -> I/O thread
  std::thread thread;
  // The host's one agent: its channel, what it sent, what it still needs.
  LIBSSH2_CHANNEL* channel = nullptr;
  std::optional<AgentClient> client;
  std::string stdin_pending;  // Signal frames not yet written
  std::string stderr_tail;  // the agent's own stderr, last bytes (errors)
  std::string early_stdout;  // what the agent said while its workers were being sent
  bool eof = false;  // the agent's stdout ended
  bool channel_done = false;  // exit collected, channel closed or lost

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
  std::deque<std::pair<int, int>> controls;  // (rank, signal)
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
  ssh::SessionOptions session_options(const std::string& host) { return session_options_for(host, host, nullptr, 0); }

  /// Jump hosts are resolved like any host, with the user and port their
  /// ProxyJump entry names (as OpenSSH's `ssh -J`: -i, -p and the user flag
  /// are the destination's only). `target` names the host being connected
  /// to, for messages.
  ssh::SessionOptions session_options_for(const std::string& host, const std::string& target, const ssh::JumpHost* jump,
                                          int depth, bool jump_own_proxy = true) {
    constexpr int kMaxJumpDepth = 8;
    if (!config_error_.empty()) throw LaunchError(target, fmt::format("{}: {}", target, config_error_));
    if (depth > kMaxJumpDepth) {
      throw LaunchError(target,
                        fmt::format("{}: ProxyJump goes more than {} jump hosts deep (a loop? a `Host *` block with "
                                    "ProxyJump matches its jump host {} too: exclude it, e.g. `Host * !{}`)",
                                    target, kMaxJumpDepth, host, host));
    }
    ssh::TokenValues tokens;
    tokens.home = options_.home;
    tokens.local_user = ssh::default_user();
    tokens.local_host = local_hostname();
    if (jump == nullptr) {
      tokens.remote_user = options_.user.value_or(tokens.local_user);
      tokens.user_from_flag = options_.user.has_value();
      tokens.port = options_.port.value_or(22);
      tokens.port_from_flag = options_.port.has_value();
    } else {
      tokens.remote_user = jump->user.empty() ? tokens.local_user : jump->user;
      tokens.user_from_flag = !jump->user.empty();
      tokens.port = jump->port != 0 ? jump->port : 22;
      tokens.port_from_flag = jump->port != 0;
    }
    ssh::HostConfig hc;
    try {
      hc = config_.resolve(host, tokens);
    } catch (const InvalidArgument& e) {
      throw LaunchError(target, jump == nullptr ? fmt::format("{}: {}", host, e.what())
                                                : fmt::format("{}: jump host {}: {}", target, host, e.what()));
    }
    // One line per keyword line, however many hosts it applies to.
    for (const auto& line : hc.unsupported) {
      warn_once(ssh::tilde_path(line, options_.home), fmt::format(" (applies to {} and maybe others)", host));
    }
    for (const auto& line : hc.ignored) debug_once(ssh::tilde_path(line, options_.home));

    ssh::SessionOptions so;
    so.host = host;
    so.hostname = hc.hostname.value_or("");
    if (jump == nullptr) {
      so.port = options_.port ? *options_.port : hc.port.value_or(22);
      so.user = options_.user ? *options_.user : hc.user.value_or(ssh::default_user());
      so.identity_file = options_.identity_file;
    } else {
      so.port = jump->port != 0 ? jump->port : hc.port.value_or(22);
      so.user = !jump->user.empty() ? jump->user : hc.user.value_or(ssh::default_user());
    }
    if (jump != nullptr && !jump_own_proxy) {
      // A later hop of a ProxyJump list is reached through the hop before
      // it, whatever its own configuration says (ssh -J a,b).
    } else if (hc.proxy_command) {
      so.proxy_command = *hc.proxy_command;
    } else {
      for (std::size_t i = 0; i < hc.proxy_jump.size(); ++i) {
        so.jump_hosts.push_back(
            session_options_for(hc.proxy_jump[i].host, target, &hc.proxy_jump[i], depth + 1, i == 0));
      }
    }
    if (!so.proxy_command.empty() || !so.jump_hosts.empty()) {
      so.proxy_where = ssh::tilde_path(hc.proxy_where, options_.home);
      spdlog::debug("{}: ssh_config: reached through {} ({})", host, so.proxy_description(),
                    ssh::tilde_path(hc.proxy_where, options_.home));
    }
    so.identity_files = hc.identity_files;
    so.identities_only = hc.identities_only.value_or(false);
    so.identity_agent = hc.identity_agent;
    so.host_key_alias = hc.host_key_alias.value_or("");
    so.connect_timeout = hc.connect_timeout.value_or(std::chrono::seconds(0));
    so.address_family = hc.address_family.value_or(0);
    if (hc.bind_address) {
      so.bind_addresses = {*hc.bind_address};
      so.bind_source = "BindAddress " + *hc.bind_address;
    } else if (hc.bind_interface) {
      // As OpenSSH: the interface's addresses (IPv4 first, then routable
      // IPv6), each connection starting from the one of its family.
      std::vector<std::string> v6;
      for (const auto& a : local_interface_addresses()) {
        if (a.interface != *hc.bind_interface) continue;
        if (!a.ipv6) {
          so.bind_addresses.push_back(a.address);
        } else if (a.address.rfind("fe80", 0) != 0) {
          v6.push_back(a.address);
        }
      }
      so.bind_addresses.insert(so.bind_addresses.end(), v6.begin(), v6.end());
      if (so.bind_addresses.empty()) {
        throw LaunchError(
            target, fmt::format("{}: {}: BindInterface {}: no such interface with an address on this "
                                "machine (or it is down)",
                                target, ssh::tilde_path(hc.bind_interface_where, options_.home), *hc.bind_interface));
      }
      so.bind_source = "BindInterface " + *hc.bind_interface;
    }
    so.connection_attempts = hc.connection_attempts.value_or(1);
    so.home = options_.home;
    if (!options_.known_hosts_file.empty()) {
      so.known_hosts_files = {options_.known_hosts_file};
    } else if (!hc.known_hosts_files.empty()) {
      so.known_hosts_files = hc.known_hosts_files;
    } else {
      so.known_hosts_files = {options_.home + "/.ssh/known_hosts"};
    }
    if (!options_.known_hosts_file.empty()) {
      // The only file (tests): no global ones either.
    } else if (hc.global_known_hosts_files) {
      so.global_known_hosts_files = *hc.global_known_hosts_files;
    } else {
      so.global_known_hosts_files = {"/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2"};
    }
    apply_algorithms(hc, target, so);
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
    if (so.connect_timeout.count() > 0) {
      spdlog::debug("{}: ssh_config: ConnectTimeout {} s ({})", host, so.connect_timeout.count(),
                    ssh::tilde_path(hc.connect_timeout_where, options_.home));
    }
    return so;
  }

  /// ssh_config's Ciphers, MACs, KexAlgorithms and HostKeyAlgorithms,
  /// resolved against what libssh2 offers (ssh_algorithms.h). Names it
  /// lacks are left out with one line per configuration line (a warning
  /// from your own files, --verbose from system ones such as a crypto
  /// policy); a list left empty fails the host (exit 3).
  void apply_algorithms(const ssh::HostConfig& hc, const std::string& target, ssh::SessionOptions& so) {
    using ssh::AlgorithmKind;
    for (AlgorithmKind kind : {AlgorithmKind::Kex, AlgorithmKind::HostKey, AlgorithmKind::Cipher, AlgorithmKind::Mac}) {
      std::string kw = ssh::algorithm_keyword(kind);  // HostConfig::algorithms is keyed in lower case
      for (auto& c : kw) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      auto it = hc.algorithms.find(kw);
      if (it == hc.algorithms.end()) continue;
      const ssh::AlgorithmSetting& a = it->second;
      const std::vector<std::string>& offered = ssh::libssh2_algorithms(kind);
      const ssh::AlgorithmList list = ssh::assemble_algorithms(a.value, offered);
      const std::string where = ssh::tilde_path(a.where, options_.home);
      if (!list.error.empty()) {
        throw LaunchError(target, fmt::format("{}: {}: {} {}", target, where, a.keyword, list.error));
      }
      if (list.names.empty()) {
        throw LaunchError(target, fmt::format("{}: {}: {} {}: hvdrun's SSH library ({}) offers none of these; it "
                                              "offers {}",
                                              target, where, a.keyword, a.value, ssh::libssh2_version_text(),
                                              ssh::join_names(offered, ", ")));
      }
      if (!list.not_offered.empty()) {
        const std::string line =
            fmt::format("{}: {}: {} not offered by hvdrun's SSH library ({}); left out", where, a.keyword,
                        ssh::join_names(list.not_offered, ", "), ssh::libssh2_version_text());
        if (a.user_file) {
          warn_once(line);
        } else {
          debug_once(line);
        }
      }
      debug_once(fmt::format("{}: {} {} gives {}", where, a.keyword, a.value, ssh::join_names(list.names)));
      const std::string names = ssh::join_names(list.names);
      switch (kind) {
        case AlgorithmKind::Kex: so.kex_algorithms = names; break;
        case AlgorithmKind::HostKey:
          so.host_key_algorithms = names;
          so.host_key_known_order = list.from_default;
          break;
        case AlgorithmKind::Cipher: so.ciphers = names; break;
        case AlgorithmKind::Mac: so.macs = names; break;
      }
    }
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
  /// path as here (hvdrun-agent beside hvdrun) when it exists there, else
  /// `hvdrun-agent` from its PATH.
  std::string remote_command(ssh::Session& s, Deadline deadline) {
    if (!remote_command_override_.empty()) return remote_command_override_;
    const std::string& program = agent_argv_.front();
    if (program.empty() || program[0] != '/') return ssh::shell_join(agent_argv_);
    // Through sh: the user's login shell may not be a POSIX one (csh, fish).
    const std::string script = fmt::format(
        "if [ -x {0} ] && [ ! -d {0} ]; then echo hvdrun-probe:same; elif command -v {1} >/dev/null 2>&1; then "
        "echo \"hvdrun-probe:path $(command -v {1})\"; else echo \"hvdrun-probe:none $PATH\"; fi",
        ssh::shell_quote(program), kAgentProgram);
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
      // The probe did not run as expected (no sh?): start the agent as it is.
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
      spdlog::warn("{}: {} does not exist there; using {} from its PATH ({})", s.host(), program, kAgentProgram,
                   argv.front());
      return ssh::shell_join(argv);
    }
    std::string path = out.rfind("none ", 0) == 0 ? out.substr(5) : out;
    throw LaunchError(s.host(),
                      fmt::format("{}: {} not found there: {} does not exist and no {} is on the PATH of "
                                  "non-interactive SSH sessions ({}); install hvdrun (with {}) at the same path, or "
                                  "on that PATH, or set HVDRUN_REMOTE_AGENT to the remote command",
                                  s.peer(), kAgentProgram, program, kAgentProgram,
                                  path.empty() ? "PATH is empty" : "PATH=" + path, kAgentProgram));
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
    std::vector<WorkerSpec> specs;
    for (auto& w : host.workers) specs.push_back(std::move(w.spec));
    // Framed before connecting: a worker that cannot be framed starts nothing.
    const std::string frames = agent_launch_frames(host.name, specs, options_.kill_grace);
    host.session = ssh::Session::open(session_options(host.name), deadline, &cancel_);
    ssh::Session& s = *host.session;
    LIBSSH2_SESSION* raw = s.raw();
    const std::string command = remote_command(s, deadline);
    spdlog::debug("{}: starting {} worker(s) with one agent: {}", s.peer(), host.workers.size(), command);
    LIBSSH2_CHANNEL* ch = nullptr;
    for (;;) {
      ch = libssh2_channel_open_session(raw);
      if (ch != nullptr) break;
      if (libssh2_session_last_errno(raw) != LIBSSH2_ERROR_EAGAIN) {
        throw LaunchError(host.name, fmt::format("{}: cannot open an SSH channel: {}", s.peer(), s.last_error()));
      }
      s.wait_socket(deadline, "opening a channel");
    }
    host.channel = ch;
    int rc = s.run(deadline, "starting the remote agent", [&] { return libssh2_channel_exec(ch, command.c_str()); });
    if (rc != 0) {
      throw LaunchError(host.name,
                        fmt::format("{}: the server refused to run the agent: {}", s.peer(), s.last_error()));
    }
    host.client.emplace(host.name, *sink_, specs);
    std::size_t off = 0;
    std::vector<char> drain(kReadChunk);
    while (off < frames.size()) {
      ssize_t n = libssh2_channel_write(ch, frames.data() + off, frames.size() - off);
      if (n > 0) {
        off += static_cast<std::size_t>(n);
        continue;
      }
      if (n != LIBSSH2_ERROR_EAGAIN) {
        throw LaunchError(host.name,
                          fmt::format("{}: cannot send the workers to the agent: {}", s.peer(), s.last_error()));
      }
      // The window may be full because the agent already writes: keep what
      // it says for the I/O loop, so neither side waits on the other.
      for (int stream_id : {0, SSH_EXTENDED_DATA_STDERR}) {
        ssize_t r = libssh2_channel_read_ex(ch, stream_id, drain.data(), drain.size());
        if (r > 0)
          (stream_id == 0 ? host.early_stdout : host.stderr_tail).append(drain.data(), static_cast<std::size_t>(r));
      }
      s.wait_socket(deadline, "sending the workers to the agent");
    }
  }

  // ---- I/O phase (host thread) --------------------------------------------

  void io_loop(Host& host) {
    ssh::Session& s = *host.session;
    LIBSSH2_SESSION* raw = s.raw();
    std::vector<char> buf(kReadChunk);
    if (!host.early_stdout.empty()) {
      std::string early = std::move(host.early_stdout);
      if (!host.client->on_bytes(early.data(), early.size())) return agent_failed(host);
    }

    for (;;) {
      bool stop = false;
      {
        std::lock_guard<std::mutex> lock(host.mu);
        stop = host.stop;
        for (auto& [rank, sig] : host.controls) {
          if (!host.client->reported(rank)) host.stdin_pending += agent_signal_frame(rank, sig);
        }
        host.controls.clear();
      }
      if (stop) return;

      // Signal frames to the agent's stdin (partial writes keep the rest).
      if (!host.stdin_pending.empty() && !host.eof) {
        ssize_t n = libssh2_channel_write(host.channel, host.stdin_pending.data(), host.stdin_pending.size());
        if (n > 0) {
          host.stdin_pending.erase(0, static_cast<std::size_t>(n));
        } else if (n != LIBSSH2_ERROR_EAGAIN) {
          if (is_connection_error(static_cast<int>(n))) return lose_host(host, s.connection_error());
          host.stdin_pending.clear();  // the agent is gone; its exit follows
        }
      }

      // Output, exits, the agent's own stderr, its end.
      const uint64_t received_before = s.bytes_received();
      for (int stream_id : {0, SSH_EXTENDED_DATA_STDERR}) {
        for (;;) {
          ssize_t n = libssh2_channel_read_ex(host.channel, stream_id, buf.data(), buf.size());
          if (n > 0) {
            if (stream_id == 0) {
              if (!host.client->on_bytes(buf.data(), static_cast<std::size_t>(n))) return agent_failed(host);
            } else {
              keep_stderr(host, buf.data(), static_cast<std::size_t>(n));
            }
            continue;
          }
          if (n < 0 && n != LIBSSH2_ERROR_EAGAIN && is_connection_error(static_cast<int>(n))) {
            return lose_host(host, s.connection_error());
          }
          break;
        }
      }
      if (!host.eof && libssh2_channel_eof(host.channel) == 1) {
        host.eof = true;
        spdlog::debug("{}: end of the agent's output", host.name);
      }
      if (host.eof) {
        int rc = libssh2_channel_wait_closed(host.channel);
        if (rc == 0) {
          finish_agent(raw, host);
          return;
        }
        if (rc != LIBSSH2_ERROR_EAGAIN) {
          if (is_connection_error(rc)) return lose_host(host, s.connection_error());
          finish_agent(raw, host);
          return;
        }
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

  /// The agent's own stderr: its error lines (or the shell's, when it could
  /// not start). Kept for the lost reason, and logged at debug.
  static void keep_stderr(Host& host, const char* data, std::size_t len) {
    host.stderr_tail.append(data, len);
    if (host.stderr_tail.size() > 4096) host.stderr_tail.erase(0, host.stderr_tail.size() - 4096);
  }

  static std::string last_line(const std::string& text) {
    std::string t = text;
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
    const auto nl = t.rfind('\n');
    return nl == std::string::npos ? t : t.substr(nl + 1);
  }

  /// The agent's stream broke (a frame that does not decode, an Error
  /// frame): EOF to the agent, which then stops every worker; the workers
  /// not yet reported are lost with the agent's reason.
  void agent_failed(Host& host) {
    libssh2_channel_send_eof(host.channel);
    host.client->finish(kLostStatus, 0, "");
    host.channel_done = true;
  }

  void finish_agent(LIBSSH2_SESSION* raw, Host& host) {
    char* sig_name = nullptr;
    std::size_t sig_len = 0;
    libssh2_channel_get_exit_signal(host.channel, &sig_name, &sig_len, nullptr, nullptr, nullptr, nullptr);
    int status = kLostStatus;
    int sig = 0;
    std::string how;
    if (sig_name != nullptr) {
      std::string name(sig_name, sig_len);
      libssh2_free(raw, sig_name);
      sig = signal_number(name);
      status = sig != 0 ? 128 + sig : kLostStatus;
      how = fmt::format("was killed by SIG{}", name);
    } else {
      status = libssh2_channel_get_exit_status(host.channel);
      how = fmt::format("exited with status {}", status);
    }
    host.channel_done = true;
    const std::string err = last_line(host.stderr_tail);
    spdlog::debug("{}: the agent {}", host.name, how);
    if (host.client->all_reported()) return;
    host.client->finish(
        status, sig,
        fmt::format("the hvdrun agent on {} {} before reporting it{}", host.name, how, err.empty() ? "" : ": " + err));
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
    host.channel_done = true;
    const bool any = !host.client->all_reported();
    host.client->finish(kLostStatus, 0, reason);
    // The supervisor reports each lost rank; one host-level line for --verbose.
    if (any && !shutting_down) spdlog::debug("{}", reason);
  }

  /// Closes the channel (EOF makes the remote agent stop its workers),
  /// reports workers that were still running, and disconnects. Bounded.
  void close_host(Host& host) {
    if (host.session && host.channel != nullptr && !host.channel_done) {
      const Deadline d = Deadline::after(std::chrono::milliseconds(1000));
      while (libssh2_channel_send_eof(host.channel) == LIBSSH2_ERROR_EAGAIN && !d.expired()) {
        pollfd p{host.session->fd(), POLLOUT, 0};
        ::poll(&p, 1, 10);
      }
      while (libssh2_channel_close(host.channel) == LIBSSH2_ERROR_EAGAIN && !d.expired()) {
        pollfd p{host.session->fd(), POLLOUT | POLLIN, 0};
        ::poll(&p, 1, 10);
      }
    }
    // Workers of a started host that never reported an exit.
    bool started;
    {
      std::lock_guard<std::mutex> lock(host.mu);
      started = host.go && host.start_error.empty();
    }
    if (started && host.client) {
      host.client->finish(kLostStatus, 0, fmt::format("shut down: hvdrun closed the SSH connection to {}", host.name));
    }
    // The channel is freed with the session.
    if (host.session) host.session->close("hvdrun: job finished");
    host.session.reset();
  }
};

/// The options, the agent command and the configuration files, as a
/// spawner and a dry run (describe_ssh_route) both read them.
void configure(HostRunner& runner, SshSpawnerOptions options) {
  SshSpawnerOptions& o = runner.options_;
  o = std::move(options);
  if (o.home.empty()) o.home = ssh::default_home();
  if (const char* over = std::getenv("HVDRUN_REMOTE_AGENT"); over != nullptr && *over != '\0') {
    runner.remote_command_override_ = over;
  } else if (!o.agent_command.empty()) {
    runner.agent_argv_ = o.agent_command;
  } else {
    runner.agent_argv_ = {local_agent_path()};
  }
  const std::vector<std::string> files =
      o.config_files ? *o.config_files : std::vector<std::string>{o.home + "/.ssh/config", "/etc/ssh/ssh_config"};
  std::vector<std::string> warnings;
  try {
    runner.config_ = ssh::SshConfig::load(files, o.home, &warnings);
  } catch (const InvalidArgument& e) {
    runner.config_error_ = e.what();  // reported by launch(), for each host
  }
  for (const auto& w : warnings) warn_once(ssh::tilde_path(w, o.home));
}

class SshSpawner final : public Spawner {
 public:
  explicit SshSpawner(SshSpawnerOptions options) { configure(*runner_, std::move(options)); }

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
      w.spec = spec;
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
    if (!agent_can_signal(sig)) {
      spdlog::debug("signal {} cannot travel to the agent; not forwarded to rank {}", sig, rank);
      return;
    }
    auto it = rank_host_.find(rank);
    if (it == rank_host_.end()) return;
    Host& host = *hosts_[it->second];
    std::lock_guard<std::mutex> lock(host.mu);
    if (host.finished || !host.go) return;
    host.controls.emplace_back(rank, sig);
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

SshRoute describe_ssh_route(const SshSpawnerOptions& options, const std::string& host) {
  HostRunner runner;
  configure(runner, options);
  SshRoute route;
  route.host = host;
  try {
    route.options = runner.session_options(host);
  } catch (const LaunchError& e) {  // what launch() would report for this host
    route.error = e.what();
  } catch (const Error& e) {
    route.error = e.what();
  }
  return route;
}

}  // namespace hvd::launcher
