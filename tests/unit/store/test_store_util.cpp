#include "test_store_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace hvd::store::test {

Bytes bytes(const std::string& s) { return Bytes(s.begin(), s.end()); }
std::string str(const Bytes& b) { return std::string(b.begin(), b.end()); }

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/hvd_store_test.XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

RawConn::RawConn(uint16_t port) {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd_ < 0) throw std::runtime_error("socket failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd_);
    fd_ = -1;
    throw std::runtime_error(std::string("connect failed: ") + std::strerror(errno));
  }
}

RawConn::~RawConn() {
  if (fd_ >= 0) ::close(fd_);
}

bool RawConn::send(const std::string& data) {
  std::size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

namespace {
/// -1 timeout, 0 closed, >0 bytes appended.
int read_some(int fd, std::string& buf, std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<Ms>(deadline - std::chrono::steady_clock::now()).count();
  if (left < 0) left = 0;
  pollfd p{fd, POLLIN, 0};
  int rc = ::poll(&p, 1, static_cast<int>(left));
  if (rc <= 0) return -1;
  char tmp[65536];
  ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
  if (n <= 0) return 0;
  buf.append(tmp, static_cast<std::size_t>(n));
  return static_cast<int>(n);
}
}  // namespace

std::string RawConn::read_response(Ms timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::size_t end;
  while ((end = buf_.find("\r\n\r\n")) == std::string::npos) {
    if (read_some(fd_, buf_, deadline) <= 0) return "";
  }
  std::size_t len = 0;
  std::size_t cl = buf_.find("Content-Length: ");
  if (cl != std::string::npos && cl < end) len = std::stoul(buf_.substr(cl + 16));
  while (buf_.size() < end + 4 + len) {
    if (read_some(fd_, buf_, deadline) <= 0) return "";
  }
  std::string out = buf_.substr(0, end + 4 + len);
  buf_.erase(0, end + 4 + len);
  return out;
}

std::string RawConn::read_until_close(Ms timeout, bool& closed) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  closed = false;
  for (;;) {
    int rc = read_some(fd_, buf_, deadline);
    if (rc == 0) {
      closed = true;
      break;
    }
    if (rc < 0) break;
  }
  std::string out;
  out.swap(buf_);
  return out;
}

uint16_t unused_port() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace hvd::store::test
