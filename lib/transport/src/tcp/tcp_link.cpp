// TcpLink: a connected, non-blocking TCP socket to one peer.
//
// Silent peers. A peer that is killed closes its sockets (the kernel sends
// FIN/RST) and the next send/recv fails. A peer whose host crashed or whose
// network was cut sends nothing at all, so the link needs its own limit
// (TcpOptions::peer_timeout, HVD_TRANSPORT_PEER_TIMEOUT_MS):
//  * nothing in flight: TCP keepalive probes after a short idle time; the
//    peer's kernel answers them even while its program is busy, and the
//    kernel ends the connection (ETIMEDOUT) when they go unanswered for
//    whole seconds; check_peer() fails it at the limit already;
//  * data in flight: check_peer() reads TCP_INFO while progress() waits
//    and fails the link when sent data has had no ACK for the limit (a live
//    peer's kernel ACKs within a round trip, whether or not its program
//    reads), or when zero-window probes go unanswered that long.
// TCP_USER_TIMEOUT would cover the second case in the kernel, but since
// Linux 5.11 it also aborts a connection whose receive window stays closed
// for the limit, i.e. a live peer that is merely not reading yet, which
// must never fail (tests/unit/transport: "a slow reader is not a dead peer").
#include "hvd/transport/tcp.h"

#include "hvd/common/env.h"
#include "hvd/common/error.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace hvd::transport {

std::chrono::milliseconds peer_timeout_from_env() {
  auto v = env::get_int(kPeerTimeoutEnv);
  if (!v) return kDefaultPeerTimeout;
  if (*v < 0) {
    throw InvalidArgument(
        fmt::format("{}={} must be >= 0 (milliseconds; 0 turns silent-peer detection off)", kPeerTimeoutEnv, *v));
  }
  return std::chrono::milliseconds(*v);
}

KeepaliveSettings keepalive_for(std::chrono::milliseconds peer_timeout) {
  KeepaliveSettings k;
  const int64_t ms = peer_timeout.count();
  if (ms <= 0) return k;
  // Kernel limits: TCP_KEEPIDLE/INTVL <= 32767 s, TCP_KEEPCNT <= 127.
  const int64_t total_s = std::min<int64_t>((ms + 999) / 1000, 32767);
  k.idle_s = static_cast<int>(std::clamp<int64_t>(ms / 2000, 1, 32767));
  k.interval_s = static_cast<int>(std::clamp<int64_t>(ms / 4000, 1, 32767));
  k.count = static_cast<int>(std::clamp<int64_t>((total_s - k.idle_s) / k.interval_s, 1, 127));
  return k;
}

TcpLink::TcpLink(UniqueFd fd, int peer, std::string peer_address, const TcpOptions& options)
    : fd_(std::move(fd)),
      peer_(peer),
      peer_address_(std::move(peer_address)),
      peer_timeout_(std::max(options.peer_timeout, std::chrono::milliseconds(0))) {
  int one = 1;
  ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (peer_timeout_.count() > 0) {
    const KeepaliveSettings k = keepalive_for(peer_timeout_);
    ::setsockopt(fd_.get(), SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_KEEPIDLE, &k.idle_s, sizeof(k.idle_s));
    ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_KEEPINTVL, &k.interval_s, sizeof(k.interval_s));
    ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_KEEPCNT, &k.count, sizeof(k.count));
  }
  if (options.socket_buffer_bytes > 0) {
    // The *FORCE variants pass net.core.[rw]mem_max when we may (CAP_NET_ADMIN);
    // otherwise the kernel clamps the plain request to those limits.
    int b = options.socket_buffer_bytes;
    if (::setsockopt(fd_.get(), SOL_SOCKET, SO_SNDBUFFORCE, &b, sizeof(b)) != 0) {
      ::setsockopt(fd_.get(), SOL_SOCKET, SO_SNDBUF, &b, sizeof(b));
    }
    if (::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVBUFFORCE, &b, sizeof(b)) != 0) {
      ::setsockopt(fd_.get(), SOL_SOCKET, SO_RCVBUF, &b, sizeof(b));
    }
  }
  set_nonblocking(fd_.get(), true);
  set_cloexec(fd_.get(), true);
}

TcpLink::~TcpLink() = default;

std::string TcpLink::describe() const { return fmt::format("rank {} at {}", peer_, peer_address_); }

std::size_t TcpLink::try_send(const void* data, std::size_t len) {
  if (shut_.load(std::memory_order_relaxed)) throw IoError(failure_text());
  for (;;) {
    ssize_t n = ::send(fd_.get(), data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    throw IoError(io_error_text("send to", errno));
  }
}

std::size_t TcpLink::try_recv(void* data, std::size_t len) {
  if (shut_.load(std::memory_order_relaxed)) throw IoError(failure_text());
  if (len == 0) return 0;
  for (;;) {
    ssize_t n = ::recv(fd_.get(), data, len, MSG_DONTWAIT);
    if (n > 0) return static_cast<std::size_t>(n);
    if (n == 0) {
      if (shut_.load()) throw IoError(failure_text());
      throw IoError(fmt::format("connection to {} closed by peer", describe()));
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    throw IoError(io_error_text("recv from", errno));
  }
}

void TcpLink::shutdown() {
  if (shut_.exchange(true)) return;
  ::shutdown(fd_.get(), SHUT_RDWR);
}

std::string TcpLink::io_error_text(const char* what, int err) const {
  if (err == ETIMEDOUT) {
    // The kernel gave up: keepalive probes (or retransmissions) unanswered.
    return fmt::format("{} stopped answering: keepalive probes unanswered (host down or network cut?; {}={})",
                       describe(), kPeerTimeoutEnv, peer_timeout_.count());
  }
  return fmt::format("{} {} failed: {}", what, describe(), std::strerror(err));
}

std::string TcpLink::failure_text() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_.empty() ? fmt::format("link to {} was aborted", describe()) : failure_;
}

void TcpLink::fail(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_.empty()) failure_ = reason;
  }
  shutdown();
  throw IoError(failure_text());
}

std::chrono::milliseconds TcpLink::peer_check_interval() const {
  if (peer_timeout_.count() <= 0) return std::chrono::milliseconds(0);
  // Eight checks per limit: a dead peer is noticed within 1/8 of the limit
  // after it, for one getsockopt per interval per waiting link.
  return std::max(peer_timeout_ / 8, std::chrono::milliseconds(10));
}

void TcpLink::check_peer() {
  if (peer_timeout_.count() <= 0 || shut_.load()) return;
  tcp_info info{};
  socklen_t len = sizeof(info);
  if (::getsockopt(fd_.get(), IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return;
  // FIN, RST or a kernel timeout: the next send/recv reports those.
  if (info.tcpi_state != TCP_ESTABLISHED) return;
  const auto now = std::chrono::steady_clock::now();
  const std::chrono::milliseconds since_ack(info.tcpi_last_ack_recv);
  std::string reason;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (info.tcpi_unacked > 0) {
      // Data in flight. An idle link's last ACK may be old, so count from
      // when we first saw data outstanding, whichever is later.
      if (!outstanding_since_) outstanding_since_ = now;
      const auto silent =
          std::min(since_ack, std::chrono::duration_cast<std::chrono::milliseconds>(now - *outstanding_since_));
      if (silent >= peer_timeout_) {
        reason =
            fmt::format("{} stopped answering: sent data unacknowledged for {} ms (host down or network cut?; {}={})",
                        describe(), silent.count(), kPeerTimeoutEnv, peer_timeout_.count());
      }
    } else {
      outstanding_since_.reset();
      // Nothing in flight but probes out. With nothing queued they are
      // keepalive probes: the kernel ends the link itself after whole
      // seconds, we after the limit (the first probe leaves after 1 s).
      // With data queued they are zero-window probes, which the kernel would
      // send for minutes, further apart the longer the window stayed closed:
      // two, so that one probe lost on its way to a live peer is not fatal.
      int queued = 0;
      if (::ioctl(fd_.get(), SIOCOUTQ, &queued) != 0) queued = 0;
      const unsigned probes_needed = queued > 0 ? 2 : 1;
      if (info.tcpi_probes >= probes_needed && since_ack >= peer_timeout_) {
        reason = fmt::format(
            "{} stopped answering: {} probes unanswered ({}), no acknowledgement for {} ms (host down or network "
            "cut?; {}={})",
            describe(), queued > 0 ? "window" : "keepalive", static_cast<int>(info.tcpi_probes), since_ack.count(),
            kPeerTimeoutEnv, peer_timeout_.count());
      }
    }
  }
  if (!reason.empty()) fail(reason);
}

}  // namespace hvd::transport
