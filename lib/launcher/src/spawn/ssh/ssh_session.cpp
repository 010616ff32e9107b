#include "hvd/launcher/spawn/ssh/ssh_session.h"

#include "hvd/common/error.h"
#include "hvd/common/text.h"
#include "hvd/common/net.h"
#include "hvd/launcher/spawn/agent.h"
#include "hvd/launcher/spawn/ssh/ssh_algorithms.h"
#include "hvd/launcher/spawn/ssh/ssh_identities.h"
#include "hvd/launcher/spawn/ssh/ssh_known_hosts.h"
#include "hvd/launcher/spawn/ssh/ssh_proxy.h"

#include <fcntl.h>
#include <libssh2.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>

namespace hvd::launcher::ssh {

static_assert(Session::kEagain == LIBSSH2_ERROR_EAGAIN, "kEagain must match libssh2");

namespace {

constexpr int kCancelPollMs = 100;  // how often waits look at `cancel`

std::string seconds_text(Clock::duration d) {
  double s = std::chrono::duration<double>(d).count();
  return fmt::format("{:.0f} s", std::max(1.0, std::round(s)));
}

bool cancelled(const std::atomic<bool>* cancel) { return cancel != nullptr && cancel->load(std::memory_order_relaxed); }

bool file_exists(const std::string& path) { return ::access(path.c_str(), F_OK) == 0; }

}  // namespace

void set_liveness_checks(int fd, std::chrono::seconds interval) {
  // Kernel-level liveness: probes after `interval` of silence, every
  // `interval`, 3 unanswered -> ETIMEDOUT; and unacknowledged data for
  // 4 intervals -> ETIMEDOUT. No SSH-level keepalive is needed (libssh2
  // 1.10 queues the server's replies to its keepalives without bound).
  int secs = static_cast<int>(std::max<long>(1, interval.count()));
  int one = 1;
  int count = 3;
  unsigned user_timeout_ms = static_cast<unsigned>(secs) * 4000u;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &secs, sizeof secs);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &secs, sizeof secs);
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
  ::setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout_ms, sizeof user_timeout_ms);
}

void ensure_libssh2_initialized() {
  static std::once_flag once;
  std::call_once(once, [] {
    int rc = libssh2_init(0);
    if (rc != 0) throw hvd::Error(fmt::format("libssh2_init failed ({})", rc));
  });
}

std::string describe_connect_errno(int err) {
  switch (err) {
    case ECONNREFUSED: return "connection refused";
    case EHOSTUNREACH: return "no route to host";
    case ENETUNREACH: return "network is unreachable";
    case ETIMEDOUT: return "connection timed out";
    case ECONNRESET: return "connection reset by peer";
    case EADDRNOTAVAIL: return "address not available";
    default: {
      std::string s = std::strerror(err);
      if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
      return s;
    }
  }
}

UniqueFd connect_tcp(const std::string& host, int port, Deadline deadline, const std::atomic<bool>* cancel,
                     std::string* peer_description, std::string* location, const std::string& name_in,
                     const TcpSettings& settings) {
  using Status = net::ConnectResult::Status;
  const std::string& name = name_in.empty() ? host : name_in;
  net::ConnectOptions options;
  options.cancel = cancel;
  options.family = settings.family;
  options.bind_addresses = settings.bind_addresses;
  const int attempts = std::max(1, settings.attempts);
  const std::string via = host == name ? "" : fmt::format(" (HostName {})", host);
  for (int attempt = 1;; ++attempt) {
    const auto started = Clock::now();
    Deadline attempt_deadline = deadline;
    if (settings.per_attempt.count() > 0) {
      const Deadline ct = Deadline::after(settings.per_attempt);
      if (ct.at() < deadline.at()) attempt_deadline = ct;
    }
    net::ConnectResult r = net::connect_tcp(host, static_cast<uint16_t>(port), attempt_deadline, options);
    if (r.status == Status::ResolveFailed) {
      throw LaunchError(name, fmt::format("{}: name does not resolve{} ({})", name, via, r.resolve_error));
    }
    if (r.address.empty()) {  // the name lookup itself did not finish
      const std::string cause = r.status == Status::Cancelled ? "cancelled"
                                                              : fmt::format("name lookup timed out after {}",
                                                                            seconds_text(Clock::now() - started));
      throw LaunchError(name, fmt::format("{}: {}{}", name, cause, via));
    }
    // Messages start with "<name>: " (callers and users grep for the host);
    // the address and port always follow, as in docs/ssh.md.
    const std::string addr = r.address.host_port();
    const std::string tries = attempt > 1 ? fmt::format("; {} attempts", attempt) : "";
    auto msg = [&](const std::string& cause) { return fmt::format("{}: {} ({}{})", name, cause, addr, tries); };
    if (r.status == Status::Connected) {
      if (peer_description != nullptr) *peer_description = fmt::format("{} ({})", name, addr);
      if (location != nullptr) *location = fmt::format(" ({})", addr);
      return std::move(r.fd);
    }
    if (r.status == Status::Cancelled) throw LaunchError(name, msg("cancelled"));
    const std::string cause = r.status == Status::TimedOut
                                  ? fmt::format("connection timed out after {}", seconds_text(Clock::now() - started))
                                  : (r.error == EAFNOSUPPORT && !settings.bind_addresses.empty()
                                         ? fmt::format("no address of the same family as the {}", settings.bind_source)
                                         : describe_connect_errno(r.error));
    // ConnectionAttempts: again after a second (OpenSSH's rhythm), while
    // the overall deadline allows.
    if (attempt >= attempts || Clock::now() + std::chrono::seconds(1) >= deadline.at()) {
      throw LaunchError(name, msg(cause));
    }
    spdlog::debug("{}: attempt {} of {}: {}; again in 1 s", name, attempt, attempts, msg(cause));
    const auto resume = Clock::now() + std::chrono::seconds(1);
    while (Clock::now() < resume) {
      if (cancelled(cancel)) throw LaunchError(name, msg("cancelled"));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

std::string tilde_path(const std::string& path, const std::string& home) {
  if (!home.empty() && path.size() > home.size() && path.compare(0, home.size(), home) == 0 &&
      path[home.size()] == '/') {
    return "~" + path.substr(home.size());
  }
  return path;
}

// ---------------------------------------------------------------------------
// Session

/// libssh2's socket hooks: plain recv()/send() that remember the last
/// socket errno, so that a dropped connection can be reported in plain words
/// ("connection timed out" after the TCP keepalive gave up) rather than
/// libssh2's generic "socket recv error". libssh2 expects -errno on failure.
struct SessionAccess {
  static void note(void** abstract, int err) {
    if (abstract != nullptr && *abstract != nullptr && err != EAGAIN && err != EINTR) {
      static_cast<Session*>(*abstract)->socket_errno_.store(err, std::memory_order_relaxed);
    }
  }
  static LIBSSH2_RECV_FUNC(recv_hook) {
    ssize_t n = ::recv(socket, buffer, length, flags);
    if (n < 0) {
      note(abstract, errno);
      return -errno;
    }
    if (n == 0) note(abstract, ECONNRESET);  // orderly close by the peer mid-session
    if (n > 0 && abstract != nullptr && *abstract != nullptr) {
      static_cast<Session*>(*abstract)->bytes_received_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
    }
    return n;
  }
  /// SSH_MSG_DISCONNECT from the server ("Too many authentication
  /// failures"): kept for the failure message.
  static LIBSSH2_DISCONNECT_FUNC(disconnect_hook) {
    (void)session;
    (void)reason;
    (void)language;
    (void)language_len;
    if (abstract != nullptr && *abstract != nullptr) {
      auto* s = static_cast<Session*>(*abstract);
      s->disconnect_message_ = message != nullptr && message_len > 0
                                   ? std::string(message, static_cast<std::size_t>(message_len))
                                   : std::string("no reason given");
    }
  }
  static LIBSSH2_SEND_FUNC(send_hook) {
    ssize_t n = ::send(socket, buffer, length, flags | MSG_NOSIGNAL);
    if (n < 0) {
      note(abstract, errno);
      return -errno;
    }
    return n;
  }
};

Session::Session(SessionOptions options, const std::atomic<bool>* cancel)
    : options_(std::move(options)), cancel_(cancel), started_(Clock::now()) {}

Session::~Session() { close(); }

std::unique_ptr<Session> Session::open(const SessionOptions& options, Deadline deadline,
                                       const std::atomic<bool>* cancel) {
  ensure_libssh2_initialized();
  std::unique_ptr<Session> s(new Session(options, cancel));
  const std::string& target = options.hostname.empty() ? options.host : options.hostname;
  if (!options.proxy_command.empty()) {
    s->proxy_ = start_proxy_command(options.host, options.proxy_command, &s->fd_);
    s->peer_ = fmt::format("{} (through its ProxyCommand)", options.host);
    s->location_ = " (through its ProxyCommand)";
  } else if (!options.jump_hosts.empty()) {
    // The last jump host is reached through the ones before it (as `ssh -J
    // a,b` reaches b through a), else as its own configuration says.
    SessionOptions jo = options.jump_hosts.back();
    if (options.jump_hosts.size() > 1) {
      jo.proxy_command.clear();
      jo.jump_hosts.assign(options.jump_hosts.begin(), options.jump_hosts.end() - 1);
    }
    s->proxy_ = connect_through_jump_host(options.host, jo, target, options.port, deadline, cancel, &s->fd_);
    s->peer_ = fmt::format("{} ({}:{} through {})", options.host, target, options.port, jo.host);
    s->location_ = fmt::format(" ({}:{} through {})", target, options.port, jo.host);
  } else {
    TcpSettings tcp;
    tcp.family = options.address_family;
    tcp.bind_addresses = options.bind_addresses;
    tcp.bind_source = options.bind_source;
    tcp.attempts = options.connection_attempts;
    tcp.per_attempt = options.connect_timeout;
    s->fd_ = connect_tcp(target, options.port, deadline, cancel, &s->peer_, &s->location_, options.host, tcp);
    set_liveness_checks(s->fd_.get(), options.keepalive);
    spdlog::debug("{}: TCP connected", s->peer_);
  }
  // ssh_config ConnectTimeout bounds each connection attempt and the
  // handshake, as OpenSSH's does; the caller's deadline still holds.
  Deadline handshake_deadline = deadline;
  if (options.connect_timeout.count() > 0) {
    const Deadline ct = Deadline::after(options.connect_timeout);
    if (ct.at() < deadline.at()) handshake_deadline = ct;
  }
  HostKeyCheck check;
  check.host = options.host;
  check.known_name = options.host_key_alias.empty() ? target : options.host_key_alias;
  check.address = target;
  check.port = options.port;
  check.known_hosts_files = options.known_hosts_files;
  check.global_known_hosts_files = options.global_known_hosts_files;
  check.policy = options.host_key_policy;
  check.policy_source = options.host_key_policy_source;
  if (!options.jump_hosts.empty()) check.jump_host = options.jump_hosts.back().host;
  check.proxy_command = !options.proxy_command.empty();
  s->handshake(handshake_deadline, check);
  verify_host_key(s->session_, check);
  s->authenticate(deadline);
  spdlog::debug("{}: authenticated as {}", s->peer_, options.user);
  return s;
}

void Session::fail(const std::string& what) const {
  throw LaunchError(options_.host, fmt::format("{}: {}{}", options_.host, what, location_));
}

std::string Session::last_error() const {
  if (session_ == nullptr) return "";
  char* msg = nullptr;
  int len = 0;
  libssh2_session_last_error(session_, &msg, &len, 0);
  return msg != nullptr ? std::string(msg, static_cast<std::size_t>(len)) : std::string();
}

short Session::wanted_events() const {
  short ev = 0;
  int dir = session_ != nullptr ? libssh2_session_block_directions(session_) : 0;
  if (dir & LIBSSH2_SESSION_BLOCK_INBOUND) ev |= POLLIN;
  if (dir & LIBSSH2_SESSION_BLOCK_OUTBOUND) ev |= POLLOUT;
  return ev == 0 ? POLLIN : ev;
}

std::string SessionOptions::proxy_description() const {
  if (!proxy_command.empty()) return "ProxyCommand";
  if (!jump_hosts.empty()) return "ProxyJump " + jump_hosts.back().host;
  return "";
}

std::string Session::connection_error() const {
  if (proxy_ != nullptr) {
    // What the proxy knows first: the jump host's connection, or the
    // command's end.
    std::string p = proxy_->problem(false);
    if (!p.empty()) return p;
  }
  int err = socket_errno_.load(std::memory_order_relaxed);
  if (err == ETIMEDOUT) {
    return fmt::format("no answer for about {} s (TCP keepalive gave up)", 4 * options_.keepalive.count());
  }
  if (err == ECONNRESET) return "connection closed by the remote host";
  if (err != 0) return describe_connect_errno(err);
  std::string msg = last_error();
  return msg.empty() ? "connection error" : msg;
}

void Session::wait_socket(Deadline deadline, const char* what) {
  for (;;) {
    if (cancelled(cancel_)) fail("cancelled");
    if (deadline.expired()) {
      fail(fmt::format("timed out after {} during {}", seconds_text(Clock::now() - started_), what));
    }
    int wait_ms = deadline.poll_timeout_ms();
    if (wait_ms < 0 || wait_ms > kCancelPollMs) wait_ms = kCancelPollMs;
    pollfd p{fd_.get(), wanted_events(), 0};
    int rc = ::poll(&p, 1, wait_ms);
    if (rc > 0) return;
    if (rc < 0 && errno != EINTR) fail(fmt::format("poll: {}", std::strerror(errno)));
  }
}

void Session::set_method(int method, const std::string& names, const char* keyword) {
  if (names.empty()) return;
  if (libssh2_session_method_pref(session_, method, names.c_str()) != 0) {
    fail(fmt::format("{} {}: refused by the SSH library: {}", keyword, names, last_error()));
  }
}

void Session::handshake(Deadline deadline, const HostKeyCheck& check) {
  session_ = libssh2_session_init_ex(nullptr, nullptr, nullptr, this);
  if (session_ == nullptr) fail("could not create an SSH session (out of memory?)");
  libssh2_session_callback_set(session_, LIBSSH2_CALLBACK_RECV, reinterpret_cast<void*>(&SessionAccess::recv_hook));
  libssh2_session_callback_set(session_, LIBSSH2_CALLBACK_SEND, reinterpret_cast<void*>(&SessionAccess::send_hook));
  libssh2_session_callback_set(session_, LIBSSH2_CALLBACK_DISCONNECT,
                               reinterpret_cast<void*>(&SessionAccess::disconnect_hook));
  libssh2_session_set_blocking(session_, 0);
  // ssh_config's algorithm lists (already resolved against libssh2), and
  // the host key types the known_hosts files hold for this host first, as
  // OpenSSH orders them: a host recorded with its ssh-ed25519 key (what
  // OpenSSH negotiates) is checked against that key, not refused or
  // recorded a second time under the ECDSA key libssh2 would ask for first.
  set_method(LIBSSH2_METHOD_KEX, options_.kex_algorithms, "KexAlgorithms");
  set_method(LIBSSH2_METHOD_CRYPT_CS, options_.ciphers, "Ciphers");
  set_method(LIBSSH2_METHOD_CRYPT_SC, options_.ciphers, "Ciphers");
  set_method(LIBSSH2_METHOD_MAC_CS, options_.macs, "MACs");
  set_method(LIBSSH2_METHOD_MAC_SC, options_.macs, "MACs");
  std::vector<std::string> host_key_algs = options_.host_key_algorithms.empty()
                                               ? libssh2_algorithms(AlgorithmKind::HostKey)
                                               : split_names(options_.host_key_algorithms);
  if (options_.host_key_known_order) {
    const std::vector<int> known = recorded_key_types(session_, check);
    if (!known.empty()) {
      std::vector<std::string> ordered = prefer_known_types(host_key_algs, known);
      if (ordered != host_key_algs) {
        spdlog::debug("{}: host key algorithms, recorded types first: {}", options_.host, join_names(ordered));
        host_key_algs = std::move(ordered);
      }
    }
  }
  if (!options_.host_key_algorithms.empty() || host_key_algs != libssh2_algorithms(AlgorithmKind::HostKey)) {
    set_method(LIBSSH2_METHOD_HOSTKEY, join_names(host_key_algs), "HostKeyAlgorithms");
  }
  int rc = 0;
  try {
    rc = run(deadline, "the SSH handshake", [&] { return libssh2_session_handshake(session_, fd_.get()); });
  } catch (const LaunchError&) {
    // A proxy that ended says why (its exit status, the jump host's error).
    if (proxy_ != nullptr) {
      if (std::string p = proxy_->problem(false); !p.empty()) fail(p + " during the SSH handshake");
    }
    throw;
  }
  if (rc != 0) {
    if (proxy_ != nullptr) {
      // The connection's end came from the proxy's side: it may be ending.
      const bool ended = socket_errno_.load(std::memory_order_relaxed) == ECONNRESET;
      if (std::string p = proxy_->problem(ended); !p.empty()) fail(p + " during the SSH handshake");
    }
    fail(fmt::format("SSH handshake failed: {}", last_error()));
  }
}

bool Session::try_key_file(const std::string& path, Deadline deadline, std::string* note) {
  std::string pub = path + ".pub";
  const char* pubp = file_exists(pub) ? pub.c_str() : nullptr;
  int rc = run(deadline, "public-key authentication", [&] {
    return libssh2_userauth_publickey_fromfile_ex(
        session_, options_.user.c_str(), static_cast<unsigned>(options_.user.size()), pubp, path.c_str(), nullptr);
  });
  if (rc == 0) return true;
  if (rc == LIBSSH2_ERROR_FILE || rc == LIBSSH2_ERROR_METHOD_NOT_SUPPORTED) {
    *note = fmt::format(" (could not use the key: {})", last_error());
  }
  spdlog::debug("{}: key {} not accepted: {}", peer_, path, last_error());
  return false;
}

namespace {

/// An ssh-agent connection and its keys, listed once.
struct AgentKeys {
  LIBSSH2_AGENT* agent = nullptr;
  bool connected = false;
  std::vector<libssh2_agent_publickey*> keys;
  std::string note;  // " (not reachable)", ...
  ~AgentKeys() {
    if (connected) libssh2_agent_disconnect(agent);
    if (agent != nullptr) libssh2_agent_free(agent);
  }
  std::vector<std::string> blobs() const {
    std::vector<std::string> out;
    for (auto* k : keys) out.emplace_back(reinterpret_cast<const char*>(k->blob), k->blob_len);
    return out;
  }
};

void list_agent_keys(LIBSSH2_SESSION* session, const std::string& socket_path, AgentKeys& out) {
  out.agent = libssh2_agent_init(session);
  if (out.agent == nullptr) {
    out.note = " (could not be used)";
    return;
  }
  libssh2_agent_set_identity_path(out.agent, socket_path.c_str());
  if (libssh2_agent_connect(out.agent) != 0) {
    out.note = " (not reachable)";
    return;
  }
  out.connected = true;
  if (libssh2_agent_list_identities(out.agent) != 0) {
    out.note = " (could not list identities)";
    return;
  }
  libssh2_agent_publickey* prev = nullptr;
  libssh2_agent_publickey* id = nullptr;
  while (libssh2_agent_get_identity(out.agent, &id, prev) == 0) {
    out.keys.push_back(id);
    prev = id;
  }
  if (out.keys.empty()) out.note = " (no identities)";
}

}  // namespace

IdentitySources identity_sources(const SessionOptions& o) {
  IdentitySources out;
  auto add = [&out](const std::string& path) { out.files.push_back({path, file_exists(path)}); };
  if (o.identity_file) {
    out.from_flag = true;
    add(*o.identity_file);
  } else if (!o.identity_files.empty()) {
    out.from_config = true;
    for (const auto& path : o.identity_files) add(path);
  } else {
    for (const char* name : {"id_ed25519", "id_ecdsa", "id_rsa"}) {
      const std::string path = o.home + "/.ssh/" + name;
      if (file_exists(path)) add(path);
    }
  }
  if (o.identity_agent) {
    out.agent_socket = *o.identity_agent;
    out.agent_from_config = true;
  } else if (const char* env_sock = std::getenv("SSH_AUTH_SOCK")) {
    out.agent_socket = env_sock;
  }
  return out;
}

void Session::authenticate(Deadline deadline) {
  const std::string& user = options_.user;
  char* methods = nullptr;
  for (;;) {
    methods = libssh2_userauth_list(session_, user.c_str(), static_cast<unsigned>(user.size()));
    if (methods != nullptr || libssh2_userauth_authenticated(session_)) break;
    if (libssh2_session_last_errno(session_) != LIBSSH2_ERROR_EAGAIN) {
      fail(fmt::format("could not query authentication methods: {}", last_error()));
    }
    wait_socket(deadline, "authentication");
  }
  if (libssh2_userauth_authenticated(session_)) return;  // "none" was accepted
  if (std::strstr(methods, "publickey") == nullptr) {
    fail(
        fmt::format("SSH authentication failed for user {}: the server offers only {}, "
                    "hvdrun uses public keys",
                    user, methods));
  }

  const IdentitySources sources = identity_sources(options_);
  const bool from_flag = sources.from_flag;
  std::vector<std::string> tried;
  std::vector<IdentityFile> files;
  for (const auto& f : sources.files) {
    if (f.exists) {
      files.push_back({f.path, identity_public_blob(f.path)});
    } else if (from_flag) {
      fail(fmt::format("identity file {} (-i) does not exist", f.path));
    } else {
      tried.push_back(tilde_path(f.path, options_.home) + " (missing)");
    }
  }
  // Under IdentitiesOnly (and with -i) the agent is still asked for the
  // identity files' own keys, as OpenSSH asks it.
  const std::string& sock = sources.agent_socket;
  const std::string agent_name =
      sources.agent_from_config ? "ssh-agent at " + tilde_path(sock, options_.home) : std::string("ssh-agent");
  const bool agent_others = !from_flag && !options_.identities_only;
  AgentKeys agent;
  if (!sock.empty()) list_agent_keys(session_, sock, agent);
  const std::vector<AuthStep> steps = order_identities(agent.blobs(), files, agent_others);
  int agent_tried = 0;
  for (const AuthStep& step : steps) {
    if (step.kind == AuthStep::Kind::Agent) {
      libssh2_agent_publickey* id = agent.keys[step.agent_index];
      const int rc = run(deadline, "ssh-agent authentication",
                         [&] { return libssh2_agent_userauth(agent.agent, user.c_str(), id); });
      if (rc == 0) return;
      if (step.for_file) {
        tried.push_back(tilde_path(files[step.file_index].path, options_.home) + " (through " + agent_name + ")");
      } else {
        ++agent_tried;
      }
    } else {
      std::string note;
      const std::string& path = files[step.file_index].path;
      if (try_key_file(path, deadline, &note)) return;
      tried.push_back(tilde_path(path, options_.home) + note);
    }
    const bool hung_up = !disconnect_message_.empty() || socket_errno_.load(std::memory_order_relaxed) != 0;
    if (hung_up) break;  // the server hung up (MaxAuthTries): what is left cannot be tried
  }
  if (agent_others && !sock.empty()) {
    if (agent_tried > 0) {
      tried.insert(tried.begin(), fmt::format("{} ({} key{})", agent_name, agent_tried, agent_tried == 1 ? "" : "s"));
    } else if (!agent.note.empty()) {
      tried.insert(tried.begin(), agent_name + agent.note);
    }
  }
  std::string list;
  for (const auto& t : tried) list += (list.empty() ? "" : ", ") + t;
  if (list.empty()) list = "no keys: no -i, no ssh-agent, no ~/.ssh/id_ed25519, id_ecdsa or id_rsa";
  std::string hint;
  if (!disconnect_message_.empty() || socket_errno_.load(std::memory_order_relaxed) != 0) {
    hint = fmt::format(
        " -- the server closed the connection{} (too many keys offered for its MaxAuthTries? name the key with "
        "IdentityFile and IdentitiesOnly yes in ~/.ssh/config)",
        disconnect_message_.empty() ? std::string() : ": " + hvd::shown(disconnect_message_));
  }
  throw LaunchError(options_.host, fmt::format("{}: SSH authentication failed for user {} (tried {}){}",
                                               options_.host, user, list, hint));
}

void Session::close(const char* reason) {
  if (session_ != nullptr) {
    // Best effort and bounded: the peer may be gone.
    Deadline d = Deadline::after(std::chrono::milliseconds(500));
    for (int i = 0; i < 100; ++i) {
      int rc = libssh2_session_disconnect(session_, reason);
      if (rc != LIBSSH2_ERROR_EAGAIN || d.expired()) break;
      pollfd p{fd_.get(), POLLOUT, 0};
      ::poll(&p, 1, 10);
    }
    // libssh2_session_free can keep answering EAGAIN (a channel whose open
    // the server never confirmed waits for a close reply that cannot come):
    // past the deadline the socket is shut down, so that libssh2 sees the
    // connection gone and frees everything without talking to the peer.
    bool freed = false;
    for (int dead_tries = 0; dead_tries <= 10;) {
      if (libssh2_session_free(session_) != LIBSSH2_ERROR_EAGAIN) {
        freed = true;
        break;
      }
      if (d.expired()) {
        if (dead_tries++ == 0) ::shutdown(fd_.get(), SHUT_RDWR);
        continue;
      }
      pollfd p{fd_.get(), wanted_events(), 0};
      ::poll(&p, 1, 10);
    }
    if (!freed) spdlog::warn("{}: the SSH session could not be freed (its memory is leaked)", peer_);
    session_ = nullptr;
  }
  fd_.reset();
  if (proxy_ != nullptr) {
    proxy_->stop();
    proxy_.reset();
  }
}

}  // namespace hvd::launcher::ssh
