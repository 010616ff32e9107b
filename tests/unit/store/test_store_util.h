#pragma once
// Helpers shared by the store tests: temp directories, raw sockets that
// speak (or abuse) HTTP, and timing.
#include "hvd/store/store.h"

#include <chrono>
#include <string>

namespace hvd::store::test {

using namespace std::chrono_literals;
using Ms = std::chrono::milliseconds;

Bytes bytes(const std::string& s);
std::string str(const Bytes& b);

/// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// A blocking loopback TCP connection for hand-written requests.
class RawConn {
 public:
  explicit RawConn(uint16_t port);
  ~RawConn();
  RawConn(RawConn&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  RawConn(const RawConn&) = delete;

  /// Sends everything; false when the peer has gone (EPIPE/ECONNRESET).
  bool send(const std::string& data);
  /// Reads one response (head + Content-Length body); "" when the connection
  /// closed or `timeout` passed first.
  std::string read_response(Ms timeout = 5000ms);
  /// Reads until EOF/reset; returns what arrived. `closed` reports whether the
  /// peer closed (EOF or reset) before `timeout`.
  std::string read_until_close(Ms timeout, bool& closed);
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  std::string buf_;
};

/// A loopback port with nothing listening on it (bound and released).
uint16_t unused_port();

double seconds_since(std::chrono::steady_clock::time_point t0);

}  // namespace hvd::store::test
