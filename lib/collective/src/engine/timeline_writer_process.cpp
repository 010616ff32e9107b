#include "engine/timeline_writer_process.h"

#include "engine/timeline_format.h"

#include "hvd/common/io.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hvd::collective::detail {

bool timeline_pwrite_all(int fd, const char* data, std::size_t size, int64_t offset) {
  std::size_t done = 0;
  while (done < size) {
    ssize_t n = ::pwrite(fd, data + done, size - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = EIO;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

namespace {

/// How often the writer process, waiting for data, checks that the rank is
/// still its parent (in case a process the rank forked without exec holds
/// the socket open after the rank died).
constexpr int kParentCheckMs = 200;
/// close() loop bound when close_range is missing and RLIMIT_NOFILE is
/// unlimited.
constexpr unsigned kMaxFallbackFds = 1u << 20;

// ---- the writer process -----------------------------------------------------
// Forked by the writer thread of a multithreaded process: everything below
// makes only system calls (async-signal-safe ones, and madvise) on memory
// allocated before fork(), and never returns to the caller (no Python, no
// allocator, no locks). Only the rank holds the other end of its socket, so
// the stream ends when the rank closes it or dies; a process the rank forks
// without exec while the timeline is open inherits that end (SOCK_CLOEXEC
// covers exec only), hence the parent check in read_full.

/// The writer process's buffer: one frame and the tail; also where it reads
/// /proc/self/maps.
constexpr std::size_t kChildBuffer = kTimelineMaxUnit + 4096;
/// Anonymous mappings from this size on are released in the writer process.
constexpr uint64_t kReleaseMin = 256u << 10;

struct ChildPlan {
  int sock;  ///< reads frames: [u32 length][length bytes of complete items]
  int fd;  ///< the file
  int64_t pos;  ///< where the next write starts (the closing bracket)
  pid_t parent;  ///< the rank
  char* buf;  ///< kChildBuffer bytes, its own mapping
  const char* thread;  ///< the forking thread's descriptor (TCB, with its TLS)
  unsigned fd_limit;  ///< for closing descriptors without close_range
};

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define HVD_TIMELINE_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define HVD_TIMELINE_SANITIZED 1
#endif
#endif

/// Parses a hex number at `s`, advancing it.
uint64_t parse_hex(const char*& s) {
  uint64_t v = 0;
  for (;; ++s) {
    const char c = *s;
    if (c >= '0' && c <= '9') {
      v = v * 16 + static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      v = v * 16 + static_cast<uint64_t>(c - 'a' + 10);
    } else {
      return v;
    }
  }
}

/// One line of /proc/self/maps: releases a private writable anonymous
/// mapping (heap, other threads' stacks, tensors: the rank's memory) unless
/// it holds what this process uses (its stack, TCB and TLS, its buffer).
void release_mapping(const char* line, const char* end, const ChildPlan& p, const char* stack) {
  const char* s = line;
  const uint64_t lo = parse_hex(s);
  if (*s++ != '-') return;
  const uint64_t hi = parse_hex(s);
  if (end - s < 6 || std::memcmp(s, " rw-p ", 6) != 0 || hi - lo < kReleaseMin) return;
  // offset, device, inode, then the path (none: anonymous)
  s += 6;
  for (int field = 0; field < 3; ++field) {
    while (s < end && *s != ' ') ++s;
    while (s < end && *s == ' ') ++s;
  }
  const std::size_t path_len = static_cast<std::size_t>(end - s);
  const bool anonymous = path_len == 0 || (path_len == 6 && std::memcmp(s, "[heap]", 6) == 0) ||
                         (path_len == 7 && std::memcmp(s, "[stack]", 7) == 0) ||
                         (path_len > 6 && std::memcmp(s, "[anon:", 6) == 0);
  if (!anonymous) return;
  for (const char* keep : {stack, p.thread, static_cast<const char*>(p.buf)}) {
    const auto a = reinterpret_cast<uint64_t>(keep);
    if (a >= lo && a < hi) return;
  }
  ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

/// Drops this process's copy-on-write references to the rank's memory.
/// Without it, every page the rank writes while the timeline is open is
/// copied (the writer process still maps the old one): up to twice the
/// rank's memory. Not in sanitizer builds (their runtimes keep state in
/// anonymous mappings that this process still uses).
void release_rank_memory(const ChildPlan& p) {
#ifndef HVD_TIMELINE_SANITIZED
  const char stack_probe = 0;
  const int maps = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (maps < 0) return;
  char* buf = p.buf;
  std::size_t have = 0;
  while (true) {
    const ssize_t n = ::read(maps, buf + have, kChildBuffer - have);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    have += static_cast<std::size_t>(n);
    std::size_t from = 0;
    for (std::size_t i = 0; i < have; ++i) {
      if (buf[i] != '\n') continue;
      release_mapping(buf + from, buf + i, p, &stack_probe);
      from = i + 1;
    }
    std::memmove(buf, buf + from, have - from);
    have -= from;
    if (have == kChildBuffer) break;  // a line longer than the buffer: stop there
  }
  ::close(maps);
#else
  (void)p;
#endif
}

/// Reads exactly `size` bytes; false at the end of the stream (the rank
/// closed it or died), on an error, or when the rank is no longer the
/// parent and nothing more is there to read.
bool read_full(const ChildPlan& p, char* dst, std::size_t size) {
  std::size_t got = 0;
  while (got < size) {
    struct pollfd pfd {};
    pfd.fd = p.sock;
    pfd.events = POLLIN;
    const int ready = ::poll(&pfd, 1, kParentCheckMs);
    if (ready < 0 && errno != EINTR) return false;
    if (ready == 0 && ::getppid() != p.parent) return false;
    if (ready <= 0) continue;
    const ssize_t n = ::read(p.sock, dst + got, size - got);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  return true;
}

/// Calls, harmlessly, every library function used after
/// release_rank_memory: with lazy binding, a function's first call goes
/// through the dynamic linker, whose data (for a library loaded by dlopen)
/// may lie in memory that the release drops. (Exits are exit_group through
/// syscall(), bound here too.)
void bind_before_release(const ChildPlan& p) {
  volatile std::size_t zero = 0;  // real calls, not inlined builtins
  struct pollfd none {};
  none.fd = -1;
  ::poll(&none, 1, 0);
  (void)::getppid();
  char name[16];
  ::prctl(PR_GET_NAME, name, 0, 0, 0);
  (void)::read(-1, p.buf, zero);  // EBADF at once
  (void)::pwrite(-1, p.buf, zero, 0);
  ::close(-1);
  ::syscall(SYS_getppid);
  std::memcpy(p.buf, kTimelineTail, zero);
  std::memmove(p.buf, p.buf + 1, zero);
  (void)std::memcmp(p.buf, kTimelineTail, zero);
  (void)timeline_pwrite_all(-1, p.buf, zero, 0);
  errno = 0;
}

[[noreturn]] void child_main(const ChildPlan& p) {
  // Its own session: hvdrun's teardown signals the rank's process group,
  // and the writer must instead finish what it was sent.
  ::setsid();
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) ::sigaction(sig, &ignore, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Nothing of the rank's stays open here (its sockets, pipes, stdout and
  // stderr): peers and hvdrun see the rank's end when it dies.
  const unsigned lo = static_cast<unsigned>(p.sock < p.fd ? p.sock : p.fd);
  const unsigned hi = static_cast<unsigned>(p.sock < p.fd ? p.fd : p.sock);
  if (lo > 0) hvd::close_fd_range(0, lo - 1, p.fd_limit);
  hvd::close_fd_range(lo + 1, hi - 1, p.fd_limit);
  hvd::close_fd_range(hi + 1, ~0U, p.fd_limit);
  bind_before_release(p);
  release_rank_memory(p);
  // Named once set up (tests wait for the name, and find it by it).
  ::prctl(PR_SET_NAME, "hvd-timeline", 0, 0, 0);

  int64_t pos = p.pos;
  uint32_t len = 0;
  while (read_full(p, reinterpret_cast<char*>(&len), sizeof len)) {
    // A partial frame at the end (the rank died while sending) is dropped.
    if (len > kTimelineMaxUnit || !read_full(p, p.buf, len)) break;
    std::memcpy(p.buf + len, kTimelineTail, kTimelineTailLen);
    if (!timeline_pwrite_all(p.fd, p.buf, len + kTimelineTailLen, pos)) {
      const int err = errno;
      ::syscall(SYS_exit_group, err > 0 && err < 256 ? err : 255);  // the rank reports it
    }
    pos += len;
  }
  ::close(p.fd);
  ::syscall(SYS_exit_group, 0);
  __builtin_unreachable();
}

}  // namespace

bool start_timeline_writer_process(int fd, int64_t pos, TimelineWriterProcess& out, std::string& error) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    error = fmt::format("socketpair: {}", std::strerror(errno));
    return false;
  }
  // Everything the child uses is set up here: after fork() it may only make
  // async-signal-safe calls (the rank has other threads).
  // Its own mapping, which the child keeps when it releases the others.
  void* buf = ::mmap(nullptr, kChildBuffer, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (buf == MAP_FAILED) {
    error = fmt::format("mmap: {}", std::strerror(errno));
    ::close(sv[0]);
    ::close(sv[1]);
    return false;
  }
  ChildPlan plan{};
  plan.sock = sv[1];
  plan.fd = fd;
  plan.pos = pos;
  plan.parent = ::getpid();
  plan.buf = static_cast<char*>(buf);
  plan.thread = reinterpret_cast<const char*>(::pthread_self());
  plan.fd_limit = kMaxFallbackFds;
  struct rlimit limit {};
  if (::getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < kMaxFallbackFds) {
    plan.fd_limit = static_cast<unsigned>(limit.rlim_cur);
  }
  const pid_t pid = ::fork();
  if (pid == 0) child_main(plan);
  const int fork_errno = errno;
  ::munmap(buf, kChildBuffer);
  if (pid < 0) {
    error = fmt::format("fork: {}", std::strerror(fork_errno));
    ::close(sv[0]);
    ::close(sv[1]);
    return false;
  }
  ::close(sv[1]);
  out.pid = pid;
  out.sock = sv[0];
  return true;
}

}  // namespace hvd::collective::detail
