#pragma once
/// The building blocks of the SSH spawner (ssh_spawner.h), split out so that
/// they can be unit-tested without an SSH server:
///  * connect_tcp: hvd::net::connect_tcp (bounded resolve + non-blocking connect before a deadline),
///    with errors phrased for humans ("node2: connection refused
///    (198.18.0.9:22)"; the address is left out when the host is one).
///  * Session: one libssh2 session in non-blocking mode -- handshake,
///    host-key verification (ssh_known_hosts.h) and public-key
///    authentication, every step bounded by the same deadline.
///  * shell quoting and the agent's spec frame (agent.h), built here because
///    the remote end only sees bytes on the channel.
///
/// Every failure to reach or use a host is a LaunchError whose message is one
/// line that starts with the host name as the user wrote it.
#include "hvd/common/io.h"
#include "hvd/launcher/hosts/ssh_config.h"
#include "hvd/launcher/plan/job_plan.h"
#include "hvd/launcher/spawn/spawner.h"
#include "hvd/launcher/spawn/ssh/ssh_known_hosts.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

// libssh2's opaque types, so that users of this header need not include it.
struct _LIBSSH2_SESSION;

namespace hvd::launcher::ssh {
class Proxy;
}

#include "hvd/launcher/process/shell.h"

namespace hvd::launcher::ssh {

/// libssh2_init() exactly once per process, thread-safely (libssh2_init is
/// not thread-safe itself and must precede any session).
void ensure_libssh2_initialized();

using launcher::shell_join;  // hvd/launcher/shell.h
using launcher::shell_quote;

/// Human words for a connect()/socket errno: "connection refused",
/// "no route to host", ...
std::string describe_connect_errno(int err);

/// Resolves `host` and connects to `port` on each address in turn until one
/// answers. Throws LaunchError with one line "<name>: <cause> (<address>:<port>)"
/// -- the address is always there, as docs/ssh.md shows -- e.g. "connection
/// timed out after N s" when the deadline passes first. `name` (default:
/// `host`) is how the user wrote the host (an ssh_config alias whose HostName
/// is `host`). `cancel`, when set and true, aborts early (another host
/// already failed, or hvdrun is stopping).
/// ssh_config's say in connect_tcp: the address family, a local address to
/// start from, and how many attempts (one second apart, each bounded by
/// `per_attempt` when set) before the last failure is thrown.
struct TcpSettings {
  int family = 0;  // AF_UNSPEC
  std::vector<std::string> bind_addresses;
  std::string bind_source;  // for messages: "BindAddress ::1", "BindInterface eth1"
  int attempts = 1;
  std::chrono::seconds per_attempt{0};
};
UniqueFd connect_tcp(const std::string& host, int port, Deadline deadline, const std::atomic<bool>* cancel = nullptr,
                     std::string* peer_description = nullptr, std::string* location = nullptr,
                     const std::string& name = "", const TcpSettings& settings = {});

/// Makes the kernel notice a dead peer: TCP keepalive probes after
/// `interval` of silence, every `interval`, three unanswered -> the socket
/// fails with ETIMEDOUT; unacknowledged data for 4 intervals -> ETIMEDOUT
/// (TCP_USER_TIMEOUT). So a host that vanished is declared lost after about
/// 4 intervals, with no SSH-level keepalive traffic.
void set_liveness_checks(int fd, std::chrono::seconds interval);

struct SessionOptions {
  std::string host;  // as the user wrote it: starts every message
  /// What to connect to and the known_hosts name (ssh_config HostName);
  /// empty: `host`.
  std::string hostname;
  int port = 22;
  std::string user;
  /// -i: the only key tried when set. Otherwise ssh-agent (`identity_agent`,
  /// else $SSH_AUTH_SOCK; unless `identities_only`) and then
  /// `identity_files` (ssh_config IdentityFile, those that exist) or, when
  /// there are none, ~/.ssh/id_ed25519, id_ecdsa, id_rsa (those that exist).
  std::optional<std::string> identity_file;
  /// ssh_config IdentityAgent: the agent's socket (expanded), or "" for
  /// `none` (no agent); unset: $SSH_AUTH_SOCK.
  std::optional<std::string> identity_agent;
  /// ssh_config HostKeyAlias: the known_hosts name instead of `hostname`.
  std::string host_key_alias;
  /// ssh_config ConnectTimeout (0: none): the TCP connection and the SSH
  /// handshake end by then, or by open()'s deadline if that comes first.
  std::chrono::seconds connect_timeout{0};
  /// ssh_config AddressFamily (AF_UNSPEC, AF_INET, AF_INET6), and the
  /// local addresses of BindAddress or BindInterface (empty: the kernel's
  /// choice; bind_source names the keyword for messages).
  int address_family = 0;
  std::vector<std::string> bind_addresses;
  std::string bind_source;
  /// ssh_config ConnectionAttempts: a failed TCP connection (refused,
  /// unreachable, ConnectTimeout) is tried again after a second, this many
  /// times in all, within open()'s deadline.
  int connection_attempts = 1;
  std::vector<std::string> identity_files;
  bool identities_only = false;
  std::string home;  // for ~/.ssh defaults and messages
  std::vector<std::string> known_hosts_files;  // checked; new keys go to the first
  /// GlobalKnownHostsFile (default /etc/ssh/ssh_known_hosts and
  /// ssh_known_hosts2): checked, never written.
  std::vector<std::string> global_known_hosts_files;
  /// ssh_config KexAlgorithms, HostKeyAlgorithms, Ciphers, MACs, resolved
  /// against libssh2 (ssh_algorithms.h): comma-separated names; empty:
  /// libssh2's default.
  std::string kex_algorithms;
  std::string host_key_algorithms;
  std::string ciphers;
  std::string macs;
  /// HostKeyAlgorithms was not an explicit list: the types the known_hosts
  /// files hold for the host are asked for first (as OpenSSH does).
  bool host_key_known_order = true;
  HostKeyPolicy host_key_policy = HostKeyPolicy::AcceptNew;
  std::string host_key_policy_source = "hvdrun's default";
  /// Liveness interval (set_liveness_checks).
  std::chrono::seconds keepalive{5};
  /// ssh_config ProxyCommand (tokens expanded): the connection is the
  /// command's stdin and stdout (ssh_proxy.h). Empty: none.
  std::string proxy_command;
  /// ssh_config ProxyJump: the jump hosts' own options, outermost first;
  /// the last one is connected to (through the ones before it, else as its
  /// own options say) and opens the connection to `hostname`:`port`. Empty:
  /// none. At most one of proxy_command and jump_hosts is set.
  std::vector<SessionOptions> jump_hosts;
  /// Where the ProxyJump or ProxyCommand was configured ("~/.ssh/config:7"),
  /// for messages.
  std::string proxy_where;
  /// How the host is reached, for messages: "" (directly), "ProxyCommand",
  /// "ProxyJump bastion".
  std::string proxy_description() const;
};

/// Where public-key authentication takes its keys from, as
/// Session::authenticate does, read once for it and for --dry-run: -i alone,
/// else ssh_config's IdentityFile lines (missing ones listed as such), else
/// the default ~/.ssh/id_ed25519, id_ecdsa, id_rsa that exist; and the
/// ssh-agent socket (IdentityAgent; `none` gives ""; else $SSH_AUTH_SOCK).
struct IdentitySources {
  struct File {
    std::string path;
    bool exists = false;
  };
  bool from_flag = false;  ///< -i
  bool from_config = false;  ///< IdentityFile lines
  std::vector<File> files;  ///< in order; default names only when they exist
  std::string agent_socket;  ///< "" when no agent is to be asked
  bool agent_from_config = false;  ///< IdentityAgent named it
};
IdentitySources identity_sources(const SessionOptions& options);

/// A connected, verified and authenticated libssh2 session in non-blocking
/// mode, over a TCP connection or through a proxy (ssh_proxy.h). Not thread-safe (libssh2 sessions are not): after
/// open() returns, only one thread at a time may use it.
class Session {
 public:
  /// Connect, handshake, verify the host key, authenticate -- all before
  /// `deadline`. Throws LaunchError.
  static std::unique_ptr<Session> open(const SessionOptions& options, Deadline deadline,
                                       const std::atomic<bool>* cancel = nullptr);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  _LIBSSH2_SESSION* raw() const { return session_; }
  int fd() const { return fd_.get(); }
  const std::string& host() const { return options_.host; }
  const SessionOptions& options() const { return options_; }
  /// "node2 (198.18.0.9:22)"
  const std::string& peer() const { return peer_; }

  /// libssh2's last error message for this session ("" if none).
  std::string last_error() const;
  /// poll() events libssh2 is waiting for (POLLIN and/or POLLOUT).
  short wanted_events() const;
  /// Why the connection failed, in plain words, after libssh2 reported a
  /// socket error ("no answer for about 20 s (TCP keepalive gave up)",
  /// "connection reset by peer", ...).
  std::string connection_error() const;
  /// Bytes read from the socket so far. libssh2 reads ahead into its own
  /// queue, so after a pass over the channels an event loop must not sleep
  /// on the socket if this moved during the pass: what arrived may already
  /// sit in libssh2's queue, where poll() cannot see it.
  uint64_t bytes_received() const { return bytes_received_.load(std::memory_order_relaxed); }

  /// Runs `step` (a libssh2 call returning int) until it stops returning
  /// LIBSSH2_ERROR_EAGAIN, waiting on the socket in between. Throws
  /// LaunchError "<host>: timed out after N s during <what>" at the deadline.
  template <typename Step>
  int run(Deadline deadline, const char* what, Step&& step) {
    for (;;) {
      int rc = step();
      if (rc != kEagain) return rc;
      wait_socket(deadline, what);
    }
  }
  /// Waits for the socket in libssh2's wanted direction(s); throws at the
  /// deadline or on cancel.
  void wait_socket(Deadline deadline, const char* what);

  /// Sends SSH_MSG_DISCONNECT (best effort, bounded) and frees the session.
  /// Idempotent; the destructor calls it.
  void close(const char* reason = "hvdrun closing");

  static constexpr int kEagain = -37;  // LIBSSH2_ERROR_EAGAIN (checked in the .cpp)

 private:
  Session(SessionOptions options, const std::atomic<bool>* cancel);
  /// Sets the algorithm preferences (ssh_config's lists; the host key
  /// types `check`'s files record first), then runs the SSH handshake.
  void handshake(Deadline deadline, const HostKeyCheck& check);
  /// libssh2_session_method_pref; a refusal fails the connection.
  void set_method(int method, const std::string& names, const char* keyword);
  void authenticate(Deadline deadline);
  bool try_key_file(const std::string& path, Deadline deadline, std::string* note);
  [[noreturn]] void fail(const std::string& what) const;

  SessionOptions options_;
  const std::atomic<bool>* cancel_ = nullptr;
  std::string peer_;
  std::string location_;  // " (198.18.0.9:22)" or "" -- appended to messages
  UniqueFd fd_;
  std::unique_ptr<Proxy> proxy_;  // ProxyCommand or ProxyJump: what carries fd_'s bytes
  _LIBSSH2_SESSION* session_ = nullptr;
  Clock::time_point started_;
  std::atomic<int> socket_errno_{0};  // last failure seen by the socket hooks
  std::atomic<uint64_t> bytes_received_{0};
  std::string disconnect_message_;  // the server's SSH_MSG_DISCONNECT text (set by libssh2's callback)

  friend struct SessionAccess;
};

/// "~/.ssh/id_rsa" for paths under `home`, the path itself otherwise.
std::string tilde_path(const std::string& path, const std::string& home);

}  // namespace hvd::launcher::ssh
