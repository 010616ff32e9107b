// TcpLink: a connected, non-blocking TCP socket to one peer.
#include "hvd/transport/tcp.h"

#include "hvd/common/error.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

namespace hvd::transport {

TcpLink::TcpLink(UniqueFd fd, int peer, std::string peer_address, const TcpOptions& options)
    : fd_(std::move(fd)), peer_(peer), peer_address_(std::move(peer_address)) {
  int one = 1;
  ::setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
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
  if (shut_.load(std::memory_order_relaxed)) throw IoError(fmt::format("link to {} was aborted", describe()));
  for (;;) {
    ssize_t n = ::send(fd_.get(), data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<std::size_t>(n);
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    throw IoError(fmt::format("send to {} failed: {}", describe(), std::strerror(errno)));
  }
}

std::size_t TcpLink::try_recv(void* data, std::size_t len) {
  if (shut_.load(std::memory_order_relaxed)) throw IoError(fmt::format("link to {} was aborted", describe()));
  if (len == 0) return 0;
  for (;;) {
    ssize_t n = ::recv(fd_.get(), data, len, MSG_DONTWAIT);
    if (n > 0) return static_cast<std::size_t>(n);
    if (n == 0) {
      if (shut_.load()) throw IoError(fmt::format("link to {} was aborted", describe()));
      throw IoError(fmt::format("connection to {} closed by peer", describe()));
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
    throw IoError(fmt::format("recv from {} failed: {}", describe(), std::strerror(errno)));
  }
}

void TcpLink::shutdown() {
  if (shut_.exchange(true)) return;
  ::shutdown(fd_.get(), SHUT_RDWR);
}

}  // namespace hvd::transport
