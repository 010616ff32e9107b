// ProxyCommand and ProxyJump (contract in ssh_proxy.h).
#include "hvd/launcher/spawn/ssh/ssh_proxy.h"

#include "hvd/launcher/process/shell.h"
#include "hvd/launcher/process/status.h"
#include "hvd/launcher/process/subprocess.h"
#include "hvd/launcher/spawn/spawner.h"
#include "hvd/launcher/spawn/ssh/ssh_session.h"

#include <libssh2.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace hvd::launcher::ssh {

namespace {

using namespace std::chrono_literals;

bool cancelled(const std::atomic<bool>* cancel) { return cancel != nullptr && cancel->load(std::memory_order_relaxed); }

std::pair<UniqueFd, UniqueFd> make_socketpair(const std::string& host, const char* what) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    throw LaunchError(host, fmt::format("{}: {}: socketpair: {}", host, what, std::strerror(errno)));
  }
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

/// "exited with code 7", "killed by SIGTERM (status 143)", ... (process/status.h).
std::string status_text(int wait_status) {
  return describe_status(exit_status_of(wait_status), signal_of(wait_status));
}

// ---------------------------------------------------------------------------
// ProxyCommand

class CommandProxy : public Proxy {
 public:
  CommandProxy(Subprocess process, std::string command) : process_(std::move(process)), command_(std::move(command)) {}
  ~CommandProxy() override { stop(); }

  std::string problem(bool wait) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto status = wait ? process_.reap_until(Deadline::after(1s)) : process_.try_reap();
    if (!status) return "";
    return fmt::format("its ProxyCommand {}", status_text(*status));
  }

  void stop() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!process_.valid() || process_.reaped()) return;
    // Without its connection (the session closed its end) a proxy such as
    // `ssh -W` ends by itself; give it a moment, then stop its group.
    if (!process_.reap_until(Deadline::after(300ms))) process_.terminate_group(1000ms);
    spdlog::debug("ProxyCommand '{}' {}", command_, status_text(process_.wait_status()));
  }

 private:
  std::mutex mu_;
  Subprocess process_;
  std::string command_;
};

// ---------------------------------------------------------------------------
// ProxyJump: one session per jump host, a channel per host behind it

/// One host's connection through the jump host: a direct-tcpip channel and
/// the socketpair end it is relayed to. Fields are the hub's (its mutex).
struct Link {
  LIBSSH2_CHANNEL* channel = nullptr;
  UniqueFd pair;
  std::string to_channel, to_pair;
  bool pair_eof = false, channel_eof = false, pair_shut = false;
  bool stop = false;  // its proxy was stopped: close now
  bool closing = false;  // the channel's close is under way
  Deadline close_deadline = Deadline::after(0ms);
  bool done = false;  // channel freed, pair closed
  std::string problem;
};

/// A connection being opened (libssh2 opens one channel at a time per
/// session, and an open it began must be finished with the same arguments:
/// one its requester gave up on is finished, then closed).
struct OpenRequest {
  std::string host, to_host;
  int to_port = 0;
  bool abandoned = false;
  bool finished = false;
  std::shared_ptr<Link> link;
  std::string error;
  /// When the hub began opening it (it was at the head of the queue).
  std::optional<Clock::time_point> started;
};

/// How long an open may hold a hub's one open slot before hosts queued
/// behind it, and new ones, go to another session with the jump host. An
/// open to a live host takes milliseconds; on a loaded machine it can take
/// a few hundred, and each second session is one more login.
constexpr auto kStuckOpen = 2s;

/// One authenticated session with a jump host, shared by every host
/// reached through it, and the thread that alone uses it: it opens the
/// channels and relays each to its host's socketpair. A jump host sees one
/// login however many hosts sit behind it (a bastion's MaxStartups limits
/// concurrent unauthenticated connections: 10 by default).
class JumpHub {
 public:
  JumpHub(std::unique_ptr<Session> jump, UniqueFd wake)
      : jump_(std::move(jump)), wake_(std::move(wake)), name_(jump_->host()) {
    thread_ = std::thread([this] { run(); });
  }
  ~JumpHub() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake();
    if (thread_.joinable()) thread_.join();
  }

  bool dead() {
    std::lock_guard<std::mutex> lock(mu_);
    return dead_;
  }
  const std::string& peer() const { return jump_->peer(); }

  /// Usable for a new connection: alive, and not stuck opening another one
  /// for long (a target the jump host cannot reach holds the session's one
  /// open slot until the jump host gives up on it; later hosts get a
  /// session of their own meanwhile).
  bool available() {
    std::lock_guard<std::mutex> lock(mu_);
    return !dead_ && !stop_ && !stuck();
  }

  /// The link to `to_host`:`to_port`; nullptr when the open before this
  /// one is stuck (kStuckOpen): the caller goes to another session.
  std::shared_ptr<Link> open(const std::string& host, const std::string& to_host, int to_port, Deadline deadline,
                             const std::atomic<bool>* cancel) {
    auto r = std::make_shared<OpenRequest>();
    r->host = host;
    r->to_host = to_host;
    r->to_port = to_port;
    std::unique_lock<std::mutex> lock(mu_);
    if (dead_) throw LaunchError(host, fmt::format("{}: jump host {}", host, problem_));
    opens_.push_back(r);
    lock.unlock();
    wake();
    lock.lock();
    const std::string where = fmt::format("{}:{}", to_host, to_port);
    for (;;) {
      if (r->finished) break;
      if (opens_.front() != r && stuck()) {
        opens_.erase(std::find(opens_.begin(), opens_.end(), r));
        return nullptr;
      }
      if (cancelled(cancel) || deadline.expired()) {
        r->abandoned = true;
        const bool cancel_now = cancelled(cancel);
        throw LaunchError(host, cancel_now ? fmt::format("{}: cancelled (through the jump host {})", host, peer())
                                           : fmt::format("{}: jump host {}: timed out opening a connection to {}",
                                                         host, peer(), where));
      }
      cv_.wait_for(lock, 100ms);
    }
    if (!r->link) throw LaunchError(host, fmt::format("{}: jump host {} could not connect to {} ({})", host, peer(),
                                                     where, r->error));
    return r->link;
  }

  std::string problem_of(const Link& l, bool wait) {
    std::unique_lock<std::mutex> lock(mu_);
    if (wait) cv_.wait_for(lock, 1s, [&] { return l.done; });
    return l.problem;
  }

  /// The session closed its end: the link forwards what is left (the SSH
  /// disconnect) and ends by itself; then it is closed. Bounded.
  void release(Link& l) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, 500ms, [&] { return l.done; });
    l.stop = true;
    lock.unlock();
    wake();
    lock.lock();
    cv_.wait_for(lock, 1500ms, [&] { return l.done; });
  }

  void wake() {
    const uint64_t one = 1;
    ssize_t n = ::write(wake_.get(), &one, sizeof one);
    (void)n;
  }

 private:
  static constexpr std::size_t kBuffer = 256 * 1024;  // per direction and host

  /// The open at the head of the queue has been pending for kStuckOpen.
  bool stuck() const {
    return !opens_.empty() && opens_.front()->started && Clock::now() - *opens_.front()->started >= kStuckOpen;
  }

  /// The jump host's connection failed: every host behind it learns why.
  void fail_all(const std::string& why) {
    dead_ = true;
    problem_ = fmt::format("{}: {}", name_, why);
    for (auto& l : links_) {
      if (l->problem.empty()) l->problem = "jump host " + problem_;
      l->stop = true;
    }
    for (auto& r : opens_) {
      r->error = why;
      r->finished = true;
    }
    opens_.clear();
  }

  static bool session_level(ssize_t rc) {
    return rc == LIBSSH2_ERROR_SOCKET_SEND || rc == LIBSSH2_ERROR_SOCKET_RECV ||
           rc == LIBSSH2_ERROR_SOCKET_DISCONNECT || rc == LIBSSH2_ERROR_SOCKET_TIMEOUT ||
           rc == LIBSSH2_ERROR_TIMEOUT || rc == LIBSSH2_ERROR_DECRYPT || rc == LIBSSH2_ERROR_PROTO ||
           rc == LIBSSH2_ERROR_BAD_USE || rc == LIBSSH2_ERROR_KEX_FAILURE;
  }

  /// One pass over the open request at the head; true on progress.
  bool step_open() {
    if (opens_.empty()) return false;
    std::shared_ptr<OpenRequest> r = opens_.front();
    if (!r->started) r->started = Clock::now();
    LIBSSH2_CHANNEL* ch =
        libssh2_channel_direct_tcpip_ex(jump_->raw(), r->to_host.c_str(), r->to_port, "127.0.0.1", 22);
    if (ch == nullptr) {
      const int err = libssh2_session_last_errno(jump_->raw());
      if (err == LIBSSH2_ERROR_EAGAIN) return false;
      if (session_level(err)) {
        fail_all(jump_->connection_error());
        return true;
      }
      r->error = jump_->last_error();
      r->finished = true;
      opens_.pop_front();
      return true;
    }
    opens_.pop_front();
    r->finished = true;
    auto l = std::make_shared<Link>();
    l->channel = ch;
    int fds[2];
    if (r->abandoned || ::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
      if (!r->abandoned) r->error = fmt::format("socketpair: {}", std::strerror(errno));
      l->stop = true;  // closed by the next pass
      links_.push_back(l);
      return true;
    }
    r->link = l;
    l->pair = UniqueFd(fds[1]);
    pending_ends_[l.get()] = UniqueFd(fds[0]);
    spdlog::debug("{}: connected to {}:{} through the jump host {}", r->host, r->to_host, r->to_port, jump_->peer());
    links_.push_back(l);
    return true;
  }

 public:
  /// The session's end of a link's socketpair (once; open() returned it).
  UniqueFd take_end(const Link& l) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = pending_ends_.find(&l);
    if (it == pending_ends_.end()) return UniqueFd();
    UniqueFd fd = std::move(it->second);
    pending_ends_.erase(it);
    return fd;
  }

 private:
  /// Relays one link both ways, without blocking; true on progress.
  bool pump(Link& l, std::vector<char>& buf) {
    bool progress = false;
    // The host -> the session.
    if (!l.channel_eof && l.to_pair.size() < kBuffer) {
      ssize_t n = libssh2_channel_read(l.channel, buf.data(), buf.size());
      if (n > 0) {
        l.to_pair.append(buf.data(), static_cast<std::size_t>(n));
        progress = true;
      } else if (n == 0 || n == LIBSSH2_ERROR_EAGAIN) {
        if (libssh2_channel_eof(l.channel) == 1) {
          l.channel_eof = true;
          progress = true;
        }
      } else if (session_level(n)) {
        fail_all(jump_->connection_error());
        return true;
      } else {
        l.problem = fmt::format("jump host {}: {}", name_, jump_->last_error());
        l.stop = true;
        return true;
      }
    }
    if (!l.to_pair.empty()) {
      ssize_t w = ::send(l.pair.get(), l.to_pair.data(), l.to_pair.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (w > 0) {
        l.to_pair.erase(0, static_cast<std::size_t>(w));
        progress = true;
      } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        l.stop = true;  // the session closed its end
        return true;
      }
    }
    if (l.channel_eof && l.to_pair.empty() && !l.pair_shut) {
      ::shutdown(l.pair.get(), SHUT_WR);  // the host closed the connection: the session sees it
      l.pair_shut = true;
    }
    // The session -> the host.
    if (!l.pair_eof && l.to_channel.size() < kBuffer) {
      ssize_t r = ::recv(l.pair.get(), buf.data(), buf.size(), MSG_DONTWAIT);
      if (r > 0) {
        l.to_channel.append(buf.data(), static_cast<std::size_t>(r));
        progress = true;
      } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        l.pair_eof = true;
        progress = true;
      }
    }
    if (!l.to_channel.empty() && !l.channel_eof) {
      ssize_t w = libssh2_channel_write(l.channel, l.to_channel.data(), l.to_channel.size());
      if (w > 0) {
        l.to_channel.erase(0, static_cast<std::size_t>(w));
        progress = true;
      } else if (session_level(w)) {
        fail_all(jump_->connection_error());
        return true;
      } else if (w != LIBSSH2_ERROR_EAGAIN) {
        l.problem = fmt::format("jump host {}: {}", name_, jump_->last_error());
        l.stop = true;
        return true;
      }
    } else if (l.channel_eof) {
      l.to_channel.clear();
    }
    if (l.pair_eof && l.to_channel.empty()) l.stop = true;  // the session is done
    return progress;
  }

  /// Closes a stopped link's channel (bounded: 500 ms); true once done.
  bool close_link(Link& l) {
    if (!l.closing) {
      l.closing = true;
      l.close_deadline = Deadline::after(500ms);
      l.pair.reset();  // the session sees the end (if it had not closed first)
    }
    if (dead_) {
      // A dead session frees its channels itself (Session::close).
      l.channel = nullptr;
    } else if (l.channel != nullptr) {
      const int rc = libssh2_channel_close(l.channel);
      if (rc == LIBSSH2_ERROR_EAGAIN && !l.close_deadline.expired()) return false;
    }
    if (l.channel != nullptr) {
      // libssh2_channel_free may want the socket too; a dead or slow
      // session must not hold the others: a few tries, then it is dropped
      // with the session.
      for (int i = 0; i < 20 && libssh2_channel_free(l.channel) == LIBSSH2_ERROR_EAGAIN; ++i) {
        pollfd p{jump_->fd(), jump_->wanted_events(), 0};
        ::poll(&p, 1, 5);
      }
      l.channel = nullptr;
    }
    l.done = true;
    return true;
  }

  void run() {
    std::vector<char> buf(32 * 1024);
    std::unique_lock<std::mutex> lock(mu_);
    while (!stop_) {
      const uint64_t received_before = jump_->bytes_received();
      bool progress = false;
      if (!dead_) progress = step_open() || progress;
      for (auto& l : links_) {
        if (!l->stop && !dead_) progress = pump(*l, buf) || progress;
      }
      bool closed = false;
      for (auto& l : links_) {
        if (l->stop && !l->done && close_link(*l)) closed = true;
      }
      if (closed) {
        links_.erase(std::remove_if(links_.begin(), links_.end(), [](const auto& l) { return l->done; }),
                     links_.end());
        progress = true;
      }
      if (progress) cv_.notify_all();
      if (progress || (!dead_ && jump_->bytes_received() != received_before)) continue;
      // Nothing moved: wait for the jump host, a host's session or a wake-up.
      std::vector<pollfd> fds;
      fds.push_back({wake_.get(), POLLIN, 0});
      short jump_events = POLLIN;
      bool writes = !opens_.empty();
      for (auto& l : links_) writes = writes || !l->to_channel.empty() || l->closing;
      if (writes) jump_events |= static_cast<short>(jump_->wanted_events() & POLLOUT);
      if (!dead_) fds.push_back({jump_->fd(), jump_events, 0});
      for (auto& l : links_) {
        if (l->stop || !l->pair) continue;
        short ev = 0;
        if (!l->pair_eof && l->to_channel.size() < kBuffer) ev |= POLLIN;
        if (!l->to_pair.empty()) ev |= POLLOUT;
        if (ev != 0) fds.push_back({l->pair.get(), ev, 0});
      }
      const bool closing = std::any_of(links_.begin(), links_.end(), [](const auto& l) { return l->closing; });
      lock.unlock();
      const int rc = ::poll(fds.data(), fds.size(), closing ? 10 : 1000);
      if (rc > 0 && (fds[0].revents & POLLIN) != 0) {
        uint64_t v = 0;
        ssize_t n = ::read(wake_.get(), &v, sizeof v);
        (void)n;
      }
      lock.lock();
      if (rc < 0 && errno != EINTR) fail_all(fmt::format("poll: {}", std::strerror(errno)));
    }
    // No host uses the hub any more (or hvdrun stops): close what is left
    // and the jump host's session, bounded.
    for (auto& l : links_) {
      l->stop = true;
      while (!close_link(*l)) {
        pollfd p{jump_->fd(), jump_->wanted_events(), 0};
        ::poll(&p, 1, 10);
      }
    }
    links_.clear();
    pending_ends_.clear();
    cv_.notify_all();
    lock.unlock();
    jump_->close();
  }

  std::unique_ptr<Session> jump_;
  UniqueFd wake_;
  std::string name_;
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<OpenRequest>> opens_;
  std::vector<std::shared_ptr<Link>> links_;
  std::map<const Link*, UniqueFd> pending_ends_;
  bool stop_ = false;
  bool dead_ = false;
  std::string problem_;  // "bastion: connection closed by the remote host"
};

/// The Proxy of one host reached through a hub.
class JumpLink : public Proxy {
 public:
  JumpLink(std::shared_ptr<JumpHub> hub, std::shared_ptr<Link> link) : hub_(std::move(hub)), link_(std::move(link)) {}
  ~JumpLink() override { stop(); }
  std::string problem(bool wait) override { return hub_ ? hub_->problem_of(*link_, wait) : ""; }
  void stop() override {
    if (!hub_) return;
    hub_->release(*link_);
    hub_.reset();  // the last host out closes the jump host's session
  }

 private:
  std::shared_ptr<JumpHub> hub_;
  std::shared_ptr<Link> link_;
};

/// Hubs by the jump host's identity (its options, how it is reached
/// included). A host that finds none usable opens one; hosts arriving
/// meanwhile wait for it rather than log in to the jump host themselves.
struct HubRegistry {
  struct Entry {
    std::vector<std::weak_ptr<JumpHub>> hubs;
    bool opening = false;
    uint64_t attempts = 0;  // finished opening attempts
    std::string last_error;  // of the last failed attempt
  };
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, Entry> entries;

  static HubRegistry& instance() {
    static HubRegistry r;
    return r;
  }
};

std::string hub_key(const SessionOptions& o) {
  std::string k = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}", o.host, o.hostname, o.port, o.user,
                              o.identity_file.value_or("-"), o.identity_agent.value_or("-"), o.host_key_alias,
                              o.proxy_command, o.address_family, o.host_key_algorithms, o.kex_algorithms, o.ciphers,
                              o.macs, static_cast<int>(o.host_key_policy), o.identities_only);
  for (const auto& f : o.identity_files) k += "|i:" + f;
  for (const auto& f : o.known_hosts_files) k += "|k:" + f;
  for (const auto& a : o.bind_addresses) k += "|b:" + a;
  for (const auto& j : o.jump_hosts) k += "|j:{" + hub_key(j) + "}";
  return k;
}

std::shared_ptr<JumpHub> find_or_open_hub(const std::string& host, const SessionOptions& jo, Deadline deadline,
                                          const std::atomic<bool>* cancel) {
  HubRegistry& reg = HubRegistry::instance();
  const std::string key = hub_key(jo);
  std::unique_lock<std::mutex> lock(reg.mu);
  HubRegistry::Entry& e = reg.entries[key];
  const uint64_t arrived = e.attempts;
  for (;;) {
    e.hubs.erase(std::remove_if(e.hubs.begin(), e.hubs.end(), [](const auto& w) { return w.expired(); }),
                 e.hubs.end());
    for (const auto& w : e.hubs) {
      if (auto hub = w.lock(); hub && hub->available()) return hub;
    }
    // An attempt that began after this host arrived failed: its error is
    // this host's too (no second login attempt per host).
    if (e.attempts > arrived + (e.opening ? 1 : 0) && !e.last_error.empty() && !e.opening) {
      throw LaunchError(host, fmt::format("{}: jump host {}", host, e.last_error));
    }
    if (!e.opening) break;
    if (cancelled(cancel)) throw LaunchError(host, fmt::format("{}: cancelled", host));
    if (deadline.expired()) {
      throw LaunchError(host, fmt::format("{}: jump host {}: timed out waiting for the connection to it", host,
                                          jo.host));
    }
    reg.cv.wait_for(lock, 100ms);
  }
  e.opening = true;
  lock.unlock();
  std::shared_ptr<JumpHub> hub;
  std::string error;
  try {
    std::unique_ptr<Session> jump = Session::open(jo, deadline, cancel);
    UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!wake) throw LaunchError(host, fmt::format("eventfd: {}", std::strerror(errno)));
    hub = std::make_shared<JumpHub>(std::move(jump), std::move(wake));
  } catch (const LaunchError& ex) {
    error = ex.what();
  }
  lock.lock();
  HubRegistry::Entry& e2 = reg.entries[key];
  e2.opening = false;
  ++e2.attempts;
  e2.last_error = error;
  if (hub) e2.hubs.push_back(hub);
  reg.cv.notify_all();
  if (!hub) throw LaunchError(host, fmt::format("{}: jump host {}", host, error));
  return hub;
}

}  // namespace

std::unique_ptr<Proxy> start_proxy_command(const std::string& host, const std::string& command, UniqueFd* connection) {
  auto [ours, theirs] = make_socketpair(host, "ProxyCommand");
  SpawnOptions so;
  so.argv = user_shell_argv("exec " + command);
  so.stdin_fd = ChildFd::from(theirs.get());
  so.stdout_fd = ChildFd::from(theirs.get());  // stderr: hvdrun's, as OpenSSH
  Subprocess process;
  try {
    process = Subprocess::spawn(so);
  } catch (const std::exception& e) {  // SpawnError, IoError (fork)
    throw LaunchError(host, fmt::format("{}: ProxyCommand could not be started ({})", host, e.what()));
  }
  const pid_t pid = process.pid();
  spdlog::debug("{}: ProxyCommand '{}' started (pid {})", host, command, pid);
  *connection = std::move(ours);
  return std::make_unique<CommandProxy>(std::move(process), command);
}

std::unique_ptr<Proxy> connect_through_jump_host(const std::string& host, const SessionOptions& jump,
                                                 const std::string& to_host, int to_port, Deadline deadline,
                                                 const std::atomic<bool>* cancel, UniqueFd* connection) {
  for (int died = 0;;) {
    std::shared_ptr<JumpHub> hub = find_or_open_hub(host, jump, deadline, cancel);
    std::shared_ptr<Link> link;
    try {
      link = hub->open(host, to_host, to_port, deadline, cancel);
    } catch (const LaunchError&) {
      // The shared session died under this host before its channel opened
      // (e.g. the jump host restarted): one fresh session, then give up.
      if (died++ == 0 && hub->dead() && !deadline.expired() && !cancelled(cancel)) continue;
      throw;
    }
    if (!link) continue;  // stuck behind another host's open: another session
    *connection = hub->take_end(*link);
    return std::make_unique<JumpLink>(std::move(hub), std::move(link));
  }
}

}  // namespace hvd::launcher::ssh
