// Followers of a platform job: the follower's wait and the two internal
// subcommands the leader runs on follower hosts (contracts in
// job/platform_follower.h, docs/platforms.md#followers).
#include "hvd/launcher/job/platform_follower.h"
#include "hvd/launcher/process/report.h"

#include "hvd/common/io.h"
#include "hvd/common/logging.h"
#include "hvd/launcher/hosts/ssh_config.h"
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/process/signal_guard.h"
#include "hvd/launcher/process/signals.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

namespace hvd::launcher::platform {

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kMaxLine = 256;
constexpr std::size_t kMaxPeers = 64;
constexpr const char* kGreeting = "hvdrun-follower 1 ";

std::string job_id(const PlatformDescription& p, const Environment& ctx) {
  static const std::map<std::string, std::string> variable = {
      {"slurm", "SLURM_JOB_ID"}, {"lsf", "LSB_JOBID"}, {"vertex", "CLOUD_ML_JOB_ID"}};
  if (p.name == "sagemaker") {
    if (auto name = ctx.get("TRAINING_JOB_NAME")) return *name;
    if (auto env = ctx.get("SM_TRAINING_ENV")) {
      auto j = nlohmann::json::parse(*env, nullptr, false);
      if (j.is_object() && j.contains("job_name") && j["job_name"].is_string()) return j["job_name"].get<std::string>();
    }
    return "";
  }
  auto it = variable.find(p.name);
  if (it == variable.end()) return "";
  return ctx.get(it->second).value_or("");
}

sockaddr_un socket_address(const std::string& key, socklen_t* len) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string name = follower_socket_name(key);
  addr.sun_path[0] = '\0';  // abstract: per network namespace, gone with the process
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return addr;
}

bool write_all(int fd, const std::string& text) {
  std::size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::send(fd, text.data() + done, text.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

/// One line from `fd` (without the newline) within `deadline`; nullopt on
/// EOF, error, timeout or an over-long line.
std::optional<std::string> read_line(int fd, Deadline deadline) {
  std::string line;
  for (;;) {
    struct pollfd p = {fd, POLLIN, 0};
    int r = ::poll(&p, 1, deadline.poll_timeout_ms());
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return std::nullopt;
    char c;
    ssize_t n = ::recv(fd, &c, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    if (c == '\n') return line;
    line += c;
    if (line.size() > kMaxLine) return std::nullopt;
  }
}

/// "0".."255" written with digits only (no sign, no spaces, at most 3
/// digits); -1 for anything else.
int parse_status(const std::string& text) {
  if (text.empty() || text.size() > 3) return -1;
  int v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return -1;
    v = v * 10 + (c - '0');
  }
  return v <= 255 ? v : -1;
}

/// "uid N (name)", or "uid N" when the name is unknown.
std::string describe_uid(uid_t uid) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buf[4096];
  if (::getpwuid_r(uid, &pw, buf, sizeof buf, &found) == 0 && found && found->pw_name) {
    return fmt::format("uid {} ({})", uid, found->pw_name);
  }
  return fmt::format("uid {}", uid);
}

/// Whether a peer of `uid` may talk to hvdrun on a follower socket: this
/// user or root.
bool trusted_uid(uid_t uid) { return uid == ::geteuid() || uid == 0; }

/// The credentials of the process listening on `addr` (SO_PEERCRED of a
/// connection to it), or nullopt when nothing answers.
std::optional<struct ucred> listener_credentials(const sockaddr_un& addr, socklen_t len) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd || ::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) return std::nullopt;
  struct ucred cred {};
  socklen_t cl = sizeof cred;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) return std::nullopt;
  return cred;
}

std::chrono::milliseconds parse_timeout(const char* text, std::chrono::milliseconds fallback) {
  if (!text) return fallback;
  char* end = nullptr;
  double v = std::strtod(text, &end);
  if (*end != '\0' || v <= 0) return fallback;
  return std::chrono::milliseconds(static_cast<long long>(v * 1000));
}

/// A connection the follower accepted.
struct Peer {
  UniqueFd fd;
  std::string buffer;
  bool attached = false;
  Clock::time_point accepted;
};

std::string seconds(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return fmt::format("{}s", d.count() / 1000);
  return fmt::format("{:.1f}s", static_cast<double>(d.count()) / 1000.0);
}

/// The port the leader's SSH spawner uses for `host`: -p, else the OpenSSH
/// client configuration's Port, else 22.
int ssh_port_for(const Options& options, const std::string& host) {
  if (options.ssh_port) return *options.ssh_port;
  const std::string home = ssh::default_home();
  try {
    auto config = ssh::SshConfig::load({home + "/.ssh/config", "/etc/ssh/ssh_config"}, home, nullptr);
    ssh::TokenValues t;
    t.home = home;
    return config.resolve(host, t).port.value_or(22);
  } catch (const std::exception&) {
    return 22;  // an unusable file is the leader's spawner's to report
  }
}

/// The keys of the hvdrun followers listening in this network namespace
/// (/proc/net/unix lists abstract names with a leading '@'). A follower under
/// another key than the leader's (job ids or host names that differ between
/// the machines) is the likely mistake when none answers.
void other_follower_keys(std::set<std::string>* keys) {
  std::ifstream sockets("/proc/net/unix");
  std::string line;
  const std::string prefix = "@hvdrun-follower:";
  while (std::getline(sockets, line)) {
    auto at = line.find(prefix);
    if (at != std::string::npos) keys->insert(line.substr(at + prefix.size()));
  }
}

}  // namespace

int follow_leader(const Options& options, const PlatformDescription& p, const Environment& ctx) {
  FollowerOptions fo;
  fo.key = follower_key(p, ctx, p.this_host);
  fo.platform = p.name;
  fo.leader = p.leader;
  fo.start_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options.start_timeout);
  const int port = ssh_port_for(options, p.this_host);
  if (!tcp_port_listening(port)) {
    spdlog::warn(
        "nothing listens on this machine's SSH port {}: the leader {} cannot start workers here (start "
        "sshd before hvdrun; docs/platforms.md#followers)",
        port, p.leader);
  }
  return run_follower(fo);
}

std::string follower_key(const PlatformDescription& p, const Environment& ctx, const std::string& host) {
  return fmt::format("{}:{}:{}", p.name, job_id(p, ctx), host);
}

std::string follower_socket_name(const std::string& key) {
  std::string name = "hvdrun-follower:" + key;
  if (name.size() <= 100) return name;
  uint64_t h = 1469598103934665603ULL;  // FNV-1a: the same on every machine and build
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ULL;
  return name.substr(0, 83) + fmt::format("~{:016x}", h);
}

bool followers_expected(const PlatformDescription& p, const Environment& ctx, std::string* why) {
  if (p.name == "oci") {
    if (why) *why = "oci's workers coordinate through the shared directory";
    return false;
  }
  if (p.name == "slurm") {
    const auto nodes = ctx.get("SLURM_STEP_NUM_NODES");
    if (!nodes || std::atoi(nodes->c_str()) <= 1) {
      if (why) {
        *why = fmt::format(
            "hvdrun runs on {} only (not in an srun step over several nodes: SLURM_STEP_NUM_NODES is {}), so the "
            "other nodes have no follower to attach to",
            p.leader, nodes ? "'" + *nodes + "'" : "not set");
      }
      return false;
    }
  }
  if (p.name == "lsf") {
    if (why) {
      *why = fmt::format(
          "on LSF the job script, and hvdrun with it, runs on the launch node {} only (the first LSB_MCPU_HOSTS "
          "entry), which starts the ranks on the other hosts over SSH as horovodrun does",
          p.leader);
    }
    return false;
  }
  return true;
}

bool tcp_port_listening(int port) {
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(file);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string slot, local, remote, state;
      fields >> slot >> local >> remote >> state;
      auto colon = local.rfind(':');
      if (colon == std::string::npos || state != "0A") continue;  // 0A: LISTEN
      if (std::strtol(local.c_str() + colon + 1, nullptr, 16) == port) return true;
    }
  }
  return false;
}

int run_follower(const FollowerOptions& o) {
  auto fail = [&](const std::string& message) {
    report_error(message);
    return exit_code::kPlatformFollower;
  };
  UniqueFd listener(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!listener) return fail(fmt::format("follower: socket: {}", std::strerror(errno)));
  socklen_t len = 0;
  const sockaddr_un addr = socket_address(o.key, &len);
  if (::bind(listener.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    if (errno == EADDRINUSE) {
      const auto holder = listener_credentials(addr, len);
      if (holder && !trusted_uid(holder->uid)) {
        return fail(fmt::format(
            "the follower socket @{} of the {} job is held by {} (pid {}), not by this user ({}): another user's "
            "process took the name, so the leader cannot attach here (docs/platforms.md#followers)",
            follower_socket_name(o.key), o.platform, describe_uid(holder->uid), holder->pid,
            describe_uid(::geteuid())));
      }
      return fail(fmt::format("another hvdrun{} already follows the {} job on this machine (key {})",
                              holder ? fmt::format(" (pid {})", holder->pid) : "", o.platform, o.key));
    }
    return fail(fmt::format("follower: cannot listen on @{}: {}", follower_socket_name(o.key), std::strerror(errno)));
  }
  if (::listen(listener.get(), 16) != 0) return fail(fmt::format("follower: listen: {}", std::strerror(errno)));

  std::optional<SignalGuard> signals;
  if (o.handle_signals) signals.emplace();
  // Only now: from this line on the leader can attach and a signal is
  // handled (a SIGTERM right after it used to kill hvdrun outright).
  spdlog::info("follower of the {} job: waiting for the leader {} (up to {:g}s)", o.platform, o.leader,
               static_cast<double>(o.start_timeout.count()) / 1000.0);

  const auto start_deadline = Clock::now() + o.start_timeout;
  auto grace_deadline = Clock::time_point::max();  // max: not counting
  bool ever_attached = false;
  std::vector<Peer> peers;
  const uid_t me = ::geteuid();
  RepeatedLog refusals(spdlog::level::warn, "follower: refused connections from other users");
  // Out of descriptors (EMFILE): the listener is left alone until then.
  auto accept_paused_until = Clock::time_point::min();
  for (;;) {
    std::vector<struct pollfd> fds;
    const bool accepting = Clock::now() >= accept_paused_until;
    fds.push_back({accepting ? listener.get() : -1, POLLIN, 0});
    fds.push_back({signals ? signals->fd() : -1, POLLIN, 0});
    for (const auto& p : peers) fds.push_back({p.fd.get(), POLLIN, 0});
    auto next = ever_attached ? Clock::time_point::max() : start_deadline;
    next = std::min(next, grace_deadline);
    if (!accepting) next = std::min(next, accept_paused_until);
    for (const auto& p : peers) {
      if (!p.attached) next = std::min(next, p.accepted + std::chrono::seconds(5));
    }
    int timeout_ms = -1;
    if (next != Clock::time_point::max()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count();
      timeout_ms = static_cast<int>(std::max<long long>(0, std::min<long long>(left + 1, 60000)));
    }
    int r = ::poll(fds.data(), fds.size(), timeout_ms);
    if (r < 0 && errno != EINTR) return fail(fmt::format("follower: poll: {}", std::strerror(errno)));
    const auto now = Clock::now();
    if (r > 0 && fds[1].revents) {
      if (const int sig = signals->wait(std::chrono::milliseconds(0))) {
        std::fprintf(stderr, "hvdrun: follower of the %s job stopped by %s\n", o.platform.c_str(),
                     signal_name(sig).c_str());
        return 128 + sig;
      }
    }
    // Data and hang-ups of the peers (before accepting: indices match fds).
    for (std::size_t i = 0; r > 0 && i < peers.size(); ++i) {
      if (!fds[2 + i].revents) continue;
      Peer& p = peers[i];
      char buf[128];
      ssize_t n = ::recv(p.fd.get(), buf, sizeof buf, 0);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n <= 0) {
        p.fd.reset();
        continue;
      }
      if (p.attached) continue;  // an attached peer sends nothing more
      p.buffer.append(buf, static_cast<std::size_t>(n));
      auto nl = p.buffer.find('\n');
      if (nl == std::string::npos) {
        if (p.buffer.size() > kMaxLine) p.fd.reset();
        continue;
      }
      const std::string line = p.buffer.substr(0, nl);
      if (line == "attach") {
        p.attached = true;
        if (!ever_attached) spdlog::info("the leader {} attached: following its job", o.leader);
        ever_attached = true;
        grace_deadline = Clock::time_point::max();
      } else if (line.rfind("status ", 0) == 0 && parse_status(line.substr(7)) >= 0) {
        const int status = parse_status(line.substr(7));
        write_all(p.fd.get(), "ok\n");
        spdlog::info("the {} job ended with exit status {} (reported by the leader {})", o.platform, status, o.leader);
        return status;
      } else {
        spdlog::debug("follower: unexpected request '{}' ignored", line.substr(0, 80));
        p.fd.reset();
      }
    }
    const bool had_attached = std::any_of(peers.begin(), peers.end(), [](const Peer& p) { return p.attached; });
    peers.erase(std::remove_if(peers.begin(), peers.end(),
                               [&](const Peer& p) {
                                 return !p.fd || (!p.attached && now - p.accepted > std::chrono::seconds(5));
                               }),
                peers.end());
    const bool attached = std::any_of(peers.begin(), peers.end(), [](const Peer& p) { return p.attached; });
    if (had_attached && !attached && grace_deadline == Clock::time_point::max()) grace_deadline = now + o.grace;
    if (r > 0 && fds[0].revents) {
      for (int burst = 0; burst < 256; ++burst) {
        int c = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0) {
          if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
            accept_paused_until = now + std::chrono::milliseconds(100);
          }
          break;
        }
        UniqueFd conn(c);
        struct ucred cred {};
        socklen_t cl = sizeof cred;
        if (::getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0 || (cred.uid != me && cred.uid != 0)) {
          refusals.note(fmt::format("follower: refused a connection from {} pid {} (only uid {} or root may attach)",
                                    describe_uid(cred.uid), cred.pid, me));
          continue;
        }
        // Unattached peers of this user are few; a flood of them replaces
        // the oldest instead of piling up.
        if (peers.size() >= kMaxPeers) {
          auto oldest = std::find_if(peers.begin(), peers.end(), [](const Peer& p) { return !p.attached; });
          if (oldest == peers.end()) continue;
          peers.erase(oldest);
        }
        if (!write_all(c, kGreeting + o.key + "\n")) continue;
        peers.push_back(Peer{std::move(conn), "", false, now});
      }
    }
    if (!ever_attached && now >= start_deadline) {
      return fail(fmt::format(
          "this machine is a follower of the {} job, and its leader {} did not attach within --start-timeout {} "
          "(is hvdrun running there with the same command line? docs/platforms.md#followers)",
          o.platform, o.leader, seconds(o.start_timeout)));
    }
    if (now >= grace_deadline) {
      return fail(fmt::format(
          "the leader {} of the {} job went away without reporting the job's status (killed, or its machine or "
          "network failed)",
          o.leader, o.platform));
    }
  }
}

int connect_follower(const std::string& key, std::chrono::milliseconds timeout, std::string* error) {
  const Deadline deadline = Deadline::after(timeout);
  socklen_t len = 0;
  const sockaddr_un addr = socket_address(key, &len);
  std::string last = "no answer";
  std::set<std::string> other_keys;  // followers that do listen here, under another key
  int attempt = 0;
  for (;;) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd) {
      if (error) *error = fmt::format("socket: {}", std::strerror(errno));
      return -1;
    }
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), len) == 0) {
      // The name is open to every user: the listener must be this user or
      // root, else it is an impostor that must not learn the job's status.
      struct ucred cred {};
      socklen_t cl = sizeof cred;
      if (::getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &cl) != 0) {
        if (error) *error = fmt::format("SO_PEERCRED on the follower socket of {}: {}", key, std::strerror(errno));
        return -1;
      }
      if (!trusted_uid(cred.uid)) {
        if (error) {
          *error = fmt::format(
              "the follower socket @{} is held by {} (pid {}), not by this user ({}) or root: refusing to talk to it "
              "(another user's process took the name; docs/platforms.md#followers)",
              follower_socket_name(key), describe_uid(cred.uid), cred.pid, describe_uid(::geteuid()));
        }
        return -1;
      }
      auto greeting = read_line(fd.get(), Deadline::after(std::chrono::seconds(5)));
      if (greeting && *greeting == kGreeting + key) return fd.release();
      last = greeting ? fmt::format("unexpected greeting '{}'", greeting->substr(0, 80)) : "no greeting";
    } else {
      last = std::strerror(errno);
    }
    if (attempt++ % 10 == 0) other_follower_keys(&other_keys);
    if (deadline.expired()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (error) {
    std::string others;
    for (const auto& k : other_keys) others += (others.empty() ? "" : ", ") + k;
    *error = fmt::format("no hvdrun follower of {} answered on this machine within {} ({}{})", key, seconds(timeout),
                         last, others.empty() ? "" : "; hvdrun followers of other keys listen here: " + others);
  }
  return -1;
}

int follower_attach_main(int argc, char** argv) {
  if (argc < 3) {
    report_error("usage: hvdrun --follower-attach KEY [TIMEOUT_S] (internal)");
    return exit_code::kUsage;
  }
  const std::string key = argv[2];
  std::string error;
  UniqueFd fd(connect_follower(key, parse_timeout(argc > 3 ? argv[3] : nullptr, std::chrono::seconds(30)), &error));
  if (!fd) {
    report_error(error);
    return 1;
  }
  if (!write_all(fd.get(), "attach\n")) {
    report_error("the follower of " + key + " closed the connection");
    return 1;
  }
  std::fputs("attached\n", stdout);
  std::fflush(stdout);
  // Held until the follower goes away; the agent ends this process when the
  // leader does (channel EOF -> SIGTERM).
  char buf[64];
  for (;;) {
    ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
  }
  std::fprintf(stderr, "hvdrun: the follower of %s went away\n", key.c_str());
  return 1;
}

int follower_status_main(int argc, char** argv) {
  const int status = argc >= 4 ? parse_status(argv[3]) : -1;
  if (argc < 4 || status < 0) {
    report_error("usage: hvdrun --follower-status KEY N [TIMEOUT_S] (internal; N 0-255)");
    return exit_code::kUsage;
  }
  const std::string key = argv[2];
  const auto timeout = parse_timeout(argc > 4 ? argv[4] : nullptr, std::chrono::seconds(5));
  std::string error;
  UniqueFd fd(connect_follower(key, timeout, &error));
  if (!fd) {
    report_error(error);
    return 1;
  }
  auto ack = write_all(fd.get(), fmt::format("status {}\n", status)) ? read_line(fd.get(), Deadline::after(timeout))
                                                                     : std::nullopt;
  if (!ack || *ack != "ok") {
    report_error("the follower of " + key + " did not acknowledge the status");
    return 1;
  }
  return 0;
}

}  // namespace hvd::launcher::platform
