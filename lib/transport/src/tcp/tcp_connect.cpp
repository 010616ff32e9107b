// Connection set-up for TCP links: listening, connecting, and the mutual
// secret-proving handshake described in hvd/transport/tcp.h.
#include "hvd/common/error.h"
#include "hvd/common/net.h"
#include "hvd/common/log_limiter.h"
#include "hvd/transport/tcp.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <thread>

namespace hvd::transport {

namespace {

constexpr char kListenerMagic[8] = {'H', 'V', 'D', 'L', '1', 0, 0, 0};
constexpr char kConnectorMagic[8] = {'H', 'V', 'D', 'C', '1', 0, 0, 0};
constexpr std::size_t kNonce = 16;
constexpr std::size_t kMac = 32;

using Nonce = std::array<unsigned char, kNonce>;
using Mac = std::array<unsigned char, kMac>;

Nonce make_nonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) throw Error("RAND_bytes failed");
  return n;
}

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t get_u32(const unsigned char* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

/// HMAC-SHA256(secret, role | len(scope) | scope | from | to | nonce_l | nonce_c)
Mac proof(char role, const Handshake& hs, uint32_t from, uint32_t to, const Nonce& nl, const Nonce& nc) {
  std::string msg;
  msg.push_back(role);
  put_u32(msg, static_cast<uint32_t>(hs.scope.size()));
  msg += hs.scope;
  put_u32(msg, from);
  put_u32(msg, to);
  msg.append(reinterpret_cast<const char*>(nl.data()), nl.size());
  msg.append(reinterpret_cast<const char*>(nc.data()), nc.size());
  Mac mac{};
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), hs.secret.data(), static_cast<int>(hs.secret.size()),
            reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), mac.data(), &len) ||
      len != kMac) {
    throw Error("HMAC-SHA256 failed");
  }
  return mac;
}

/// Compares in time independent of where the MACs differ.
bool mac_equal(const Mac& a, const unsigned char* b) {
  unsigned char diff = 0;
  for (std::size_t i = 0; i < kMac; ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

constexpr std::size_t kConnectorMessage = 8 + 4 + 4 + kNonce + kMac;
constexpr char kRejectMagic[4] = {'H', 'V', 'D', 'R'};

/// Why a listener refuses a handshake (sent to the connector).
enum class Refusal : uint32_t { None = 0, Proof = 1, WrongRank = 2, UnexpectedPeer = 3 };

Mac refusal_message(Refusal why) {
  Mac m{};
  std::memcpy(m.data(), kRejectMagic, 4);
  const uint32_t v = static_cast<uint32_t>(why);
  for (int i = 0; i < 4; ++i) m[4 + i] = static_cast<unsigned char>((v >> (8 * i)) & 0xff);
  return m;
}

/// The refusal in a listener's answer, or None when it is not one.
Refusal refusal_in(const unsigned char* reply) {
  if (std::memcmp(reply, kRejectMagic, 4) != 0) return Refusal::None;
  for (std::size_t i = 8; i < kMac; ++i)
    if (reply[i] != 0) return Refusal::None;
  const uint32_t v = get_u32(reply + 4);
  return v >= 1 && v <= 3 ? static_cast<Refusal>(v) : Refusal::None;
}

/// Listener side, the connector's message complete: the peer's rank, or
/// the refusal and why (for the log).
struct Verdict {
  int peer = -1;
  Refusal refusal = Refusal::None;
  std::string why;
};

Verdict verify_connector(const unsigned char* msg, const Handshake& hs, const Nonce& nl,
                         const std::function<bool(int)>& wanted, Mac& reply) {
  Verdict v;
  if (std::memcmp(msg, kConnectorMagic, 8) != 0) {
    v.why = "not an hvd link handshake (bad magic)";
    return v;  // not our protocol: no answer
  }
  const uint32_t from = get_u32(msg + 8);
  const uint32_t to = get_u32(msg + 12);
  Nonce nc{};
  std::memcpy(nc.data(), msg + 16, kNonce);
  if (!mac_equal(proof('c', hs, from, to, nl, nc), msg + 16 + kNonce)) {
    v.refusal = Refusal::Proof;
    v.why = "peer failed to prove the job secret (wrong secret or communicator)";
    return v;
  }
  if (to != static_cast<uint32_t>(hs.self_rank)) {
    v.refusal = Refusal::WrongRank;
    v.why = fmt::format("peer wanted rank {}, this is rank {}", to, hs.self_rank);
    return v;
  }
  if (from > 0x7fffffffu || !wanted(static_cast<int>(from))) {
    v.refusal = Refusal::UnexpectedPeer;
    v.why = fmt::format("unexpected or duplicate peer rank {}", from);
    return v;
  }
  reply = proof('l', hs, from, to, nl, nc);
  v.peer = static_cast<int>(from);
  return v;
}

/// Connector side; throws IoError saying what went wrong when the listener
/// is not who we expect or refuses us, TimeoutError at the deadline.
void handshake_connector(int fd, const Handshake& hs, int peer, const std::string& endpoint, Deadline dl) {
  unsigned char hello[8 + kNonce];
  try {
    read_exact(fd, hello, sizeof(hello), dl);
  } catch (const TimeoutError&) {
    throw TimeoutError(fmt::format(
        "rank {}: rank {} at {} accepted the connection but did not begin the handshake in time (still busy with "
        "other peers, or stuck)",
        hs.self_rank, peer, endpoint));
  } catch (const IoError& e) {
    throw IoError(fmt::format("rank {}: rank {} at {} closed the connection before the handshake began ({})",
                              hs.self_rank, peer, endpoint, e.what()));
  }
  if (std::memcmp(hello, kListenerMagic, 8) != 0) {
    throw IoError(fmt::format("rank {}: {} (published by rank {}) is not an hvd link listener (bad magic)",
                              hs.self_rank, endpoint, peer));
  }
  Nonce nl{};
  std::memcpy(nl.data(), hello + 8, kNonce);
  Nonce nc = make_nonce();
  uint32_t from = static_cast<uint32_t>(hs.self_rank);
  uint32_t to = static_cast<uint32_t>(peer);
  std::string msg(kConnectorMagic, sizeof(kConnectorMagic));
  put_u32(msg, from);
  put_u32(msg, to);
  msg.append(reinterpret_cast<const char*>(nc.data()), nc.size());
  Mac mac = proof('c', hs, from, to, nl, nc);
  msg.append(reinterpret_cast<const char*>(mac.data()), mac.size());
  write_all(fd, msg.data(), msg.size(), dl);

  unsigned char reply[kMac];
  try {
    read_exact(fd, reply, sizeof(reply), dl);
  } catch (const TimeoutError&) {
    throw TimeoutError(
        fmt::format("rank {}: rank {} at {} did not answer our handshake in time", hs.self_rank, peer, endpoint));
  } catch (const IoError& e) {
    // No verdict: the listener gave up (its own deadline), failed, or
    // dropped us among too many connections. Not a secret mismatch: that
    // would have been said.
    throw IoError(fmt::format(
        "rank {}: rank {} at {} closed the connection without answering our handshake ({}): it stopped waiting "
        "for peers (its start-up timeout), failed, or dropped the connection; see its log",
        hs.self_rank, peer, endpoint, e.what()));
  }
  switch (refusal_in(reply)) {
    case Refusal::Proof:
      throw IoError(fmt::format(
          "rank {}: rank {} at {} rejected our handshake: our proof of the job secret did not match (a different job "
          "secret, or a different communicator generation than '{}')",
          hs.self_rank, peer, endpoint, hs.scope));
    case Refusal::WrongRank:
      throw IoError(fmt::format(
          "rank {}: the listener at {} rejected our handshake: it is not rank {} (a stale address in the store?)",
          hs.self_rank, endpoint, peer));
    case Refusal::UnexpectedPeer:
      throw IoError(fmt::format(
          "rank {}: rank {} at {} rejected our handshake: it does not expect rank {} (not one of its peers, or "
          "rank {} is connected to it already)",
          hs.self_rank, peer, endpoint, hs.self_rank, hs.self_rank));
    case Refusal::None: break;
  }
  if (!mac_equal(proof('l', hs, from, to, nl, nc), reply)) {
    throw IoError(fmt::format(
        "rank {}: rank {} at {} failed to prove the job secret (a different job secret or communicator generation)",
        hs.self_rank, peer, endpoint));
  }
}

}  // namespace

void split_endpoint(const std::string& endpoint, std::string& host, uint16_t& port) {
  std::string port_text;
  if (!endpoint.empty() && endpoint.front() == '[') {
    auto close = endpoint.find(']');
    if (close == std::string::npos || close + 1 >= endpoint.size() || endpoint[close + 1] != ':') {
      throw InvalidArgument(fmt::format("malformed endpoint '{}': expected [v6addr]:port", endpoint));
    }
    host = endpoint.substr(1, close - 1);
    port_text = endpoint.substr(close + 2);
  } else {
    auto colon = endpoint.rfind(':');
    if (colon == std::string::npos || colon == 0) {
      throw InvalidArgument(fmt::format("malformed endpoint '{}': expected host:port", endpoint));
    }
    host = endpoint.substr(0, colon);
    port_text = endpoint.substr(colon + 1);
  }
  char* end = nullptr;
  errno = 0;
  unsigned long p = std::strtoul(port_text.c_str(), &end, 10);
  if (port_text.empty() || *end != '\0' || errno != 0 || p == 0 || p > 65535) {
    throw InvalidArgument(fmt::format("malformed endpoint '{}': bad port '{}'", endpoint, port_text));
  }
  port = static_cast<uint16_t>(p);
}

std::string source_address_for(const std::string& host) {
  const net::Resolution to = net::resolve(host, 9, Deadline::never(), {SOCK_DGRAM, false, false});
  return net::source_address_towards(to.addresses);
}

TcpListener::TcpListener(const std::string& address, uint16_t port, int backlog) : address_(address) {
  const net::Resolution resolved = net::resolve(address, port, Deadline::never(), {SOCK_STREAM, true, false});
  if (!resolved.ok()) throw IoError(fmt::format("cannot resolve '{}': {}", address, resolved.error));
  std::string last_error = "no usable address";
  for (const net::Address& a : resolved.addresses) {
    UniqueFd fd(::socket(a.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (!fd) {
      last_error = std::strerror(errno);
      continue;
    }
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd.get(), a.get(), a.length()) != 0 || ::listen(fd.get(), backlog) != 0) {
      last_error = std::strerror(errno);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&ss), &len);
    port_ = net::Address(reinterpret_cast<sockaddr*>(&ss), len).port();
    fd_ = std::move(fd);
    logs_ = std::make_unique<Logs>();
    return;
  }
  throw IoError(fmt::format("cannot listen on {}:{}: {}", address, port, last_error));
}

std::string TcpListener::endpoint() const {
  if (address_.find(':') != std::string::npos) return fmt::format("[{}]:{}", address_, port_);
  return fmt::format("{}:{}", address_, port_);
}

// ---- the listener's concurrent handshakes ----------------------------------

/// One accepted connection in its handshake: the hello goes out, the
/// connector's message comes in, then our proof (or a refusal) goes out.
struct TcpListener::Pending {
  UniqueFd fd;
  std::string who;
  std::chrono::steady_clock::time_point until;
  Nonce nl{};
  std::string out;
  std::size_t out_done = 0;
  unsigned char in[kConnectorMessage] = {};
  std::size_t in_done = 0;
  int peer = -1;  ///< set once verified: the proof is on its way
};

/// Dropped connections are logged once, then counted (a flood of strangers
/// must not flood the log).
struct TcpListener::Logs {
  LogLimiter dropped{std::chrono::seconds(5)};
};

TcpListener::~TcpListener() {
  if (logs_) {
    if (auto s = logs_->dropped.take(std::chrono::steady_clock::now(), true)) {
      spdlog::warn("{}: {} more connections dropped during the handshake in the last {}", endpoint(), s->suppressed,
                   LogLimiter::window_text(s->window));
    }
  }
}
TcpListener::TcpListener(TcpListener&&) noexcept = default;
TcpListener& TcpListener::operator=(TcpListener&&) noexcept = default;

namespace {

enum class Step { More, Done, Drop };

/// Sends what is queued; More while the socket is full.
Step flush(int fd, const std::string& out, std::size_t& done, std::string& why) {
  while (done < out.size()) {
    const ssize_t n = ::send(fd, out.data() + done, out.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Step::More;
    why = fmt::format("send failed: {}", std::strerror(errno));
    return Step::Drop;
  }
  return Step::Done;
}

}  // namespace

void TcpListener::shutdown() {
  // On a listening socket this moves it to CLOSE and wakes poll(2) (POLLHUP);
  // accept4 then fails with EINVAL. The descriptor stays open until the
  // destructor, so it cannot be reused under a concurrent poll.
  if (fd_) ::shutdown(fd_.get(), SHUT_RDWR);
}

std::unique_ptr<TcpLink> TcpListener::accept(const Handshake& hs, const std::function<bool(int)>& wanted,
                                             Deadline deadline, const TcpOptions& options) {
  using Clock = std::chrono::steady_clock;
  auto drop = [&](std::size_t i, const std::string& why) {
    if (logs_->dropped.admit(Clock::now())) {
      spdlog::warn("rank {}: dropped connection from {}: {} (further drops are counted and reported every 5 s)",
                   hs.self_rank, pending_[i]->who, why);
    }
    pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
  };
  // Advances one handshake as far as its socket allows.
  auto advance = [&](Pending& p, std::string& why) -> Step {
    for (;;) {
      if (p.out_done < p.out.size()) {
        Step st = flush(p.fd.get(), p.out, p.out_done, why);
        if (st != Step::Done) return st;
      }
      if (p.peer >= 0) return Step::Done;  // our proof went out
      const ssize_t n = ::recv(p.fd.get(), p.in + p.in_done, sizeof(p.in) - p.in_done, MSG_DONTWAIT);
      if (n == 0) {
        why = "closed the connection during the handshake";
        return Step::Drop;
      }
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return Step::More;
        why = fmt::format("recv failed: {}", std::strerror(errno));
        return Step::Drop;
      }
      p.in_done += static_cast<std::size_t>(n);
      if (p.in_done < sizeof(p.in)) continue;
      Mac reply{};
      Verdict v = verify_connector(p.in, hs, p.nl, wanted, reply);
      if (v.peer < 0) {
        why = v.why;
        if (v.refusal != Refusal::None) {
          // Best effort: tell a real peer why (it cannot block: 32 bytes
          // into a socket we have only read from).
          const Mac m = refusal_message(v.refusal);
          ssize_t ignored = ::send(p.fd.get(), m.data(), m.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
          (void)ignored;
        }
        return Step::Drop;
      }
      p.peer = v.peer;
      p.out.assign(reinterpret_cast<const char*>(reply.data()), reply.size());
      p.out_done = 0;
    }
  };

  std::vector<pollfd> fds;
  for (;;) {
    // Expired handshakes go first.
    const auto now = Clock::now();
    for (std::size_t i = 0; i < pending_.size();) {
      if (pending_[i]->until <= now) {
        drop(i, fmt::format("no handshake within {} ms", hs.handshake_timeout.count()));
      } else {
        ++i;
      }
    }
    if (auto s = logs_->dropped.take(now)) {
      spdlog::warn("rank {}: {} more connections dropped during the handshake in the last {}", hs.self_rank,
                   s->suppressed, LogLimiter::window_text(s->window));
    }
    if (deadline.expired()) {
      throw TimeoutError(fmt::format("rank {}: timed out waiting for peers to connect", hs.self_rank));
    }
    int timeout_ms = deadline.poll_timeout_ms();
    fds.assign(1, pollfd{fd_.get(), POLLIN, 0});
    for (const auto& p : pending_) {
      fds.push_back(pollfd{p->fd.get(), static_cast<short>(p->out_done < p->out.size() ? POLLOUT : POLLIN), 0});
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(std::max(p->until - now, Clock::duration::zero())).count();
      if (timeout_ms < 0 || left < timeout_ms) timeout_ms = static_cast<int>(left);
    }
    const int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw IoError(fmt::format("poll on listener failed: {}", std::strerror(errno)));
    }
    if (rc == 0) continue;  // a handshake or the deadline expired: handled above
    // Handshakes that can move. pending_ only shrinks here, from the back
    // of what poll saw, so walk backwards.
    for (std::size_t k = fds.size() - 1; k >= 1; --k) {
      if (fds[k].revents == 0) continue;
      const std::size_t i = k - 1;
      std::string why;
      const Step st = advance(*pending_[i], why);
      if (st == Step::Drop) {
        drop(i, why);
      } else if (st == Step::Done) {
        std::unique_ptr<Pending> p = std::move(pending_[i]);
        pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
        return std::make_unique<TcpLink>(std::move(p->fd), p->peer, p->who, options);
      }
    }
    // New connections: each starts its handshake at once.
    if (fds[0].revents != 0) {
      for (int n = 0; n < 64; ++n) {
        sockaddr_storage ss{};
        socklen_t len = sizeof(ss);
        const int raw = ::accept4(fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (raw < 0) {
          if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          if (errno == EMFILE || errno == ENFILE) {
            // Out of descriptors: the oldest handshake makes room.
            if (!pending_.empty()) {
              drop(0, fmt::format("closed to make room: accept failed: {}", std::strerror(errno)));
              continue;
            }
          }
          throw IoError(fmt::format("accept failed: {}", std::strerror(errno)));
        }
        if (pending_.size() >= kMaxPendingHandshakes) {
          drop(0, fmt::format("closed to make room: {} handshakes in progress", kMaxPendingHandshakes));
        }
        auto p = std::make_unique<Pending>();
        p->fd.reset(raw);
        p->who = net::Address(reinterpret_cast<sockaddr*>(&ss), len).host_port();
        p->until = Clock::now() + hs.handshake_timeout;
        p->nl = make_nonce();
        p->out.assign(kListenerMagic, sizeof(kListenerMagic));
        p->out.append(reinterpret_cast<const char*>(p->nl.data()), p->nl.size());
        std::string why;
        const Step st = advance(*p, why);  // the hello goes out now
        if (st == Step::Done) return std::make_unique<TcpLink>(std::move(p->fd), p->peer, p->who, options);
        pending_.push_back(std::move(p));
        if (st == Step::Drop) drop(pending_.size() - 1, why);
      }
    }
  }
}

std::unique_ptr<TcpLink> connect(const std::string& endpoint, int peer, const Handshake& hs, Deadline deadline,
                                 const TcpOptions& options) {
  std::string host;
  uint16_t port = 0;
  split_endpoint(endpoint, host, port);
  std::string last_error;
  for (;;) {
    net::ConnectResult r = net::connect_tcp(host, port, deadline);
    if (r.ok()) {
      // Connected: a failed handshake here is final (the peer is there but
      // does not share our secret), so IoError propagates. The whole
      // deadline applies: the peer may still be busy connecting to its own
      // lower-ranked peers before it accepts us.
      handshake_connector(r.fd.get(), hs, peer, endpoint, deadline);
      return std::make_unique<TcpLink>(std::move(r.fd), peer, endpoint, options);
    }
    if (r.status == net::ConnectResult::Status::ResolveFailed) {
      throw IoError(fmt::format("cannot resolve '{}': {}", host, r.resolve_error));
    }
    // Refused: the peer may not listen yet; retried until the deadline.
    // Unreachable (no route, the neighbour's address not resolved, a
    // timeout) is the network's state, not the peer's: after a link comes
    // back the kernel answers EHOSTUNREACH for a few seconds while its
    // neighbour entry is still marked failed. Always retried.
    if (r.status == net::ConnectResult::Status::Failed) {
      last_error = std::strerror(r.error);
      const bool refused = r.error == ECONNREFUSED;
      if (refused && !options.retry_refused) {
        throw IoError(fmt::format("rank {}: could not connect to rank {} at {} ({}: it no longer listens)",
                                  hs.self_rank, peer, endpoint, last_error));
      }
    }
    if (deadline.expired()) {
      throw TimeoutError(fmt::format("rank {}: could not connect to rank {} at {} ({})", hs.self_rank, peer, endpoint,
                                     last_error.empty() ? "timed out" : last_error));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace hvd::transport
