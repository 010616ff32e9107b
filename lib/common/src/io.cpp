#include "hvd/common/io.h"

#include "hvd/common/error.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>

namespace hvd {

int Deadline::poll_timeout_ms() const {
  if (is_never()) return -1;
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now()).count();
  if (ms < 0) return 0;
  if (ms > INT_MAX) return INT_MAX;
  return static_cast<int>(ms);
}

std::chrono::milliseconds Deadline::remaining() const {
  if (is_never()) return std::chrono::milliseconds::max();
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(at_ - Clock::now());
  return ms.count() < 0 ? std::chrono::milliseconds(0) : ms;
}

namespace {

bool is_socket(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode);
}

void wait_fd(int fd, short events, const Deadline& deadline, const char* what) {
  for (;;) {
    struct pollfd p {
      fd, events, 0
    };
    int rc = ::poll(&p, 1, deadline.poll_timeout_ms());
    if (rc > 0) return;
    if (rc == 0) throw TimeoutError(fmt::format("timed out while {}", what));
    if (errno != EINTR) throw IoError(fmt::format("poll failed while {}: {}", what, std::strerror(errno)));
  }
}

}  // namespace

void write_all(int fd, const void* data, std::size_t len, Deadline deadline) {
  const char* p = static_cast<const char*>(data);
  const bool sock = is_socket(fd);
  while (len > 0) {
    ssize_t n = sock ? ::send(fd, p, len, MSG_NOSIGNAL) : ::write(fd, p, len);
    if (n > 0) {
      p += n;
      len -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      wait_fd(fd, POLLOUT, deadline, "writing");
      continue;
    }
    throw IoError(fmt::format("write failed: {}", n < 0 ? std::strerror(errno) : "wrote 0 bytes"));
  }
}

void read_exact(int fd, void* data, std::size_t len, Deadline deadline) {
  char* p = static_cast<char*>(data);
  while (len > 0) {
    if (!deadline.is_never()) wait_fd(fd, POLLIN, deadline, "reading");
    ssize_t n = ::read(fd, p, len);
    if (n > 0) {
      p += n;
      len -= static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0) throw IoError("connection closed by peer");
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      wait_fd(fd, POLLIN, deadline, "reading");
      continue;
    }
    throw IoError(fmt::format("read failed: {}", std::strerror(errno)));
  }
}

void write_frame(int fd, const std::string& payload, Deadline deadline) {
  if (payload.size() > UINT32_MAX) throw InvalidArgument("frame too large");
  uint32_t n = static_cast<uint32_t>(payload.size());
  unsigned char hdr[4] = {static_cast<unsigned char>(n), static_cast<unsigned char>(n >> 8),
                          static_cast<unsigned char>(n >> 16), static_cast<unsigned char>(n >> 24)};
  write_all(fd, hdr, 4, deadline);
  write_all(fd, payload.data(), payload.size(), deadline);
}

std::string read_frame(int fd, std::size_t max_len, Deadline deadline) {
  unsigned char hdr[4];
  read_exact(fd, hdr, 4, deadline);
  uint32_t n = uint32_t(hdr[0]) | (uint32_t(hdr[1]) << 8) | (uint32_t(hdr[2]) << 16) | (uint32_t(hdr[3]) << 24);
  if (n > max_len) throw IoError(fmt::format("frame of {} bytes exceeds the limit of {}", n, max_len));
  std::string out(n, '\0');
  if (n > 0) read_exact(fd, out.data(), n, deadline);
  return out;
}

void set_nonblocking(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags < 0) throw IoError(fmt::format("fcntl failed: {}", std::strerror(errno)));
  flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
  if (::fcntl(fd, F_SETFL, flags) < 0) throw IoError(fmt::format("fcntl failed: {}", std::strerror(errno)));
}

void set_cloexec(int fd, bool on) {
  int flags = ::fcntl(fd, F_GETFD, 0);
  if (flags < 0) throw IoError(fmt::format("fcntl failed: {}", std::strerror(errno)));
  flags = on ? (flags | FD_CLOEXEC) : (flags & ~FD_CLOEXEC);
  if (::fcntl(fd, F_SETFD, flags) < 0) throw IoError(fmt::format("fcntl failed: {}", std::strerror(errno)));
}

UniqueFd& UniqueFd::operator=(UniqueFd&& o) noexcept {
  if (this != &o) reset(o.release());
  return *this;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

void close_fd_range(unsigned low, unsigned high, unsigned fallback_limit) {
  if (low > high) return;
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, low, high, 0U) == 0) return;
#endif
  for (unsigned fd = low; fd <= high && fd < fallback_limit; ++fd) ::close(static_cast<int>(fd));
}

}  // namespace hvd
