#pragma once
/// Deadlines and the one set of blocking fd helpers every module uses
/// (pipes, sockets). All helpers retry on EINTR and throw IoError on failure,
/// TimeoutError when the deadline passes.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace hvd {

using Clock = std::chrono::steady_clock;

class Deadline {
 public:
  /// A deadline that never expires.
  static Deadline never() { return Deadline(Clock::time_point::max()); }
  static Deadline after(std::chrono::milliseconds d) { return Deadline(Clock::now() + d); }
  explicit Deadline(Clock::time_point at) : at_(at) {}

  bool expired() const { return Clock::now() >= at_; }
  bool is_never() const { return at_ == Clock::time_point::max(); }
  /// Milliseconds left, clamped to [0, INT32_MAX]; -1 for never (poll's "forever").
  int poll_timeout_ms() const;
  std::chrono::milliseconds remaining() const;
  Clock::time_point at() const { return at_; }

 private:
  Clock::time_point at_;
};

/// Writes all bytes (MSG_NOSIGNAL semantics for sockets: no SIGPIPE).
void write_all(int fd, const void* data, std::size_t len, Deadline deadline = Deadline::never());
/// Reads exactly len bytes; IoError on EOF ("connection closed by peer").
void read_exact(int fd, void* data, std::size_t len, Deadline deadline = Deadline::never());

/// Frames: 4-byte little-endian length, then payload. max_len bounds what a
/// peer may make us allocate.
void write_frame(int fd, const std::string& payload, Deadline deadline = Deadline::never());
std::string read_frame(int fd, std::size_t max_len, Deadline deadline = Deadline::never());

void set_nonblocking(int fd, bool on);
void set_cloexec(int fd, bool on);
/// Closes every descriptor in [low, high]: close_range(2) when the kernel
/// has it, else close() on each one below `fallback_limit`. Only system
/// calls: safe in a child between fork() and exec (or _exit).
void close_fd_range(unsigned low, unsigned high, unsigned fallback_limit);

/// Closes on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }
  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  int release() {
    int f = fd_;
    fd_ = -1;
    return f;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

}  // namespace hvd
