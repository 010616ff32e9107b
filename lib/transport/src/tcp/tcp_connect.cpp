// Connection set-up for TCP links: listening, connecting, and the mutual
// secret-proving handshake described in hvd/transport/tcp.h.
#include "hvd/common/error.h"
#include "hvd/common/net.h"
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

/// Listener side; returns the authenticated peer rank or throws.
int handshake_listener(int fd, const Handshake& hs, const std::function<bool(int)>& wanted, Deadline dl) {
  Nonce nl = make_nonce();
  std::string hello(kListenerMagic, sizeof(kListenerMagic));
  hello.append(reinterpret_cast<const char*>(nl.data()), nl.size());
  write_all(fd, hello.data(), hello.size(), dl);

  unsigned char msg[8 + 4 + 4 + kNonce + kMac];
  read_exact(fd, msg, sizeof(msg), dl);
  if (std::memcmp(msg, kConnectorMagic, 8) != 0) throw IoError("not an hvd link handshake (bad magic)");
  uint32_t from = get_u32(msg + 8);
  uint32_t to = get_u32(msg + 12);
  Nonce nc{};
  std::memcpy(nc.data(), msg + 16, kNonce);
  if (!mac_equal(proof('c', hs, from, to, nl, nc), msg + 16 + kNonce)) {
    throw IoError("peer failed to prove the job secret (wrong secret or communicator)");
  }
  if (to != static_cast<uint32_t>(hs.self_rank)) {
    throw IoError(fmt::format("peer wanted rank {}, this is rank {}", to, hs.self_rank));
  }
  if (from > 0x7fffffffu || !wanted(static_cast<int>(from))) {
    throw IoError(fmt::format("unexpected or duplicate peer rank {}", from));
  }
  Mac reply = proof('l', hs, from, to, nl, nc);
  write_all(fd, reply.data(), reply.size(), dl);
  return static_cast<int>(from);
}

/// Connector side; throws IoError when the listener is not who we expect.
void handshake_connector(int fd, const Handshake& hs, int peer, Deadline dl) {
  unsigned char hello[8 + kNonce];
  read_exact(fd, hello, sizeof(hello), dl);
  if (std::memcmp(hello, kListenerMagic, 8) != 0) throw IoError("not an hvd link listener (bad magic)");
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
  } catch (const IoError&) {
    throw IoError(fmt::format("rank {} refused our handshake (job secret or communicator mismatch)", peer));
  }
  if (!mac_equal(proof('l', hs, from, to, nl, nc), reply)) {
    throw IoError(fmt::format("rank {} failed to prove the job secret", peer));
  }
}

Deadline handshake_deadline(const Handshake& hs, Deadline overall) {
  Deadline per = Deadline::after(hs.handshake_timeout);
  return per.at() < overall.at() ? per : overall;
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
    UniqueFd fd(::socket(a.family(), SOCK_STREAM | SOCK_CLOEXEC, 0));
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
    return;
  }
  throw IoError(fmt::format("cannot listen on {}:{}: {}", address, port, last_error));
}

std::string TcpListener::endpoint() const {
  if (address_.find(':') != std::string::npos) return fmt::format("[{}]:{}", address_, port_);
  return fmt::format("{}:{}", address_, port_);
}

std::unique_ptr<TcpLink> TcpListener::accept(const Handshake& hs, const std::function<bool(int)>& wanted,
                                             Deadline deadline, const TcpOptions& options) {
  for (;;) {
    pollfd p{fd_.get(), POLLIN, 0};
    int rc = ::poll(&p, 1, deadline.poll_timeout_ms());
    if (rc == 0) throw TimeoutError(fmt::format("rank {}: timed out waiting for peers to connect", hs.self_rank));
    if (rc < 0) {
      if (errno == EINTR) continue;
      throw IoError(fmt::format("poll on listener failed: {}", std::strerror(errno)));
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int raw = ::accept4(fd_.get(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
    if (raw < 0) {
      if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) continue;
      throw IoError(fmt::format("accept failed: {}", std::strerror(errno)));
    }
    UniqueFd fd(raw);
    std::string who = net::Address(reinterpret_cast<sockaddr*>(&ss), len).host_port();
    try {
      int peer = handshake_listener(fd.get(), hs, wanted, handshake_deadline(hs, deadline));
      return std::make_unique<TcpLink>(std::move(fd), peer, who, options);
    } catch (const Error& e) {
      spdlog::warn("rank {}: dropped connection from {}: {}", hs.self_rank, who, e.what());
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
      handshake_connector(r.fd.get(), hs, peer, deadline);
      return std::make_unique<TcpLink>(std::move(r.fd), peer, endpoint, options);
    }
    if (r.status == net::ConnectResult::Status::ResolveFailed) {
      throw IoError(fmt::format("cannot resolve '{}': {}", host, r.resolve_error));
    }
    // Refused: the peer may not listen yet; retried until the deadline.
    if (r.status == net::ConnectResult::Status::Failed) last_error = std::strerror(r.error);
    if (deadline.expired()) {
      throw TimeoutError(fmt::format("rank {}: could not connect to rank {} at {} ({})", hs.self_rank, peer, endpoint,
                                     last_error.empty() ? "timed out" : last_error));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace hvd::transport
