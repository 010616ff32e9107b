#include "engine/timeline.h"

#include "hvd/common/error.h"
#include "hvd/common/files.h"
#include "hvd/common/io.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <new>

namespace hvd::collective::detail {

namespace {

/// Every state of the file ends with this: a valid JSON array.
constexpr const char kTail[] = "\n]\n";
constexpr int64_t kTailLen = 3;
/// The largest write the writer process takes (its buffer, allocated before
/// fork); a unit of items (an event with its tensor's metadata) above it is
/// dropped and counted.
constexpr std::size_t kMaxFrame = 1u << 20;
/// How often the writer process, waiting for data, checks that the rank is
/// still its parent (in case a process the rank forked without exec holds
/// the socket open after the rank died).
constexpr int kParentCheckMs = 200;
/// How long the writer thread waits for a writer process that closed its
/// socket to exit.
constexpr std::chrono::milliseconds kReapTimeout{5000};
/// close() loop bound when close_range is missing and RLIMIT_NOFILE is
/// unlimited.
constexpr unsigned kMaxFallbackFds = 1u << 20;

bool pwrite_all(int fd, const char* data, std::size_t size, int64_t offset) {
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
constexpr std::size_t kChildBuffer = kMaxFrame + 4096;
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
  std::memcpy(p.buf, kTail, zero);
  std::memmove(p.buf, p.buf + 1, zero);
  (void)std::memcmp(p.buf, kTail, zero);
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
    if (len > kMaxFrame || !read_full(p, p.buf, len)) break;
    std::memcpy(p.buf + len, kTail, kTailLen);
    if (!pwrite_all(p.fd, p.buf, len + kTailLen, pos)) {
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

std::string timeline_quote(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

const char* timeline_op_name(OpType type) {
  switch (type) {
    case OpType::Allreduce: return "ALLREDUCE";
    case OpType::Allgather: return "ALLGATHER";
    case OpType::Broadcast: return "BROADCAST";
    case OpType::Alltoall: return "ALLTOALL";
    case OpType::Reducescatter: return "REDUCESCATTER";
    case OpType::Barrier: return "BARRIER";
    case OpType::Join: return "JOIN";
  }
  return "UNKNOWN";
}

// ---- TimelineWriter ---------------------------------------------------------

TimelineWriter::TimelineWriter(const std::string& path, int64_t start_epoch_us, TimelineWriterOptions options)
    : path_(path), options_(options) {
  // Never blocks (a FIFO there used to hang rank 0 in open()), never
  // follows a link, never truncates a file that is not a regular one of this
  // user's (or root's) with one link: the path may be in a directory others
  // write (docs/design.md, "Security rules").
  std::string why;
  fd_ = open_output_file(path, why);
  if (fd_ < 0) {
    throw IoError(
        fmt::format("hvd timeline: '{}' {} (HOROVOD_TIMELINE / --timeline-filename / start_timeline need a path on "
                    "rank 0 where it can create a regular file)",
                    path, why));
  }
  // pid 0: the job itself, with the wall-clock time of ts 0 (as Horovod).
  std::string head = fmt::format(
      "[\n{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {{\"name\": \"hvd timeline (rank 0)\", "
      "\"start_time_since_epoch_in_micros\": {}}}}},\n"
      "{{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": 0, \"args\": {{\"sort_index\": 0}}}}{}",
      start_epoch_us, kTail);
  if (!pwrite_all(fd_, head.data(), head.size(), 0)) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw IoError(fmt::format("hvd timeline: cannot write '{}': {}", path, std::strerror(err)));
  }
  end_ = static_cast<int64_t>(head.size());
  queue_.reserve(1024);
  // The writer thread forks the writer process (see child_main: the child
  // releases the rank's memory but for this thread's stack), then writes.
  std::promise<std::string> forked;
  std::future<std::string> fork_error = forked.get_future();
  thread_ = std::thread([this, forked = std::move(forked)]() mutable {
    // The process is named hvd-timeline once set up; until then it has
    // this name.
    pthread_setname_np(pthread_self(), "hvd-tl-format");
    std::string error;
    if (!options_.in_process && !start_child(error) && error.empty()) error = "unknown error";
    forked.set_value(std::move(error));
    run();
  });
  const std::string error = fork_error.get();
  if (!error.empty()) {
    spdlog::warn(
        "hvd timeline: cannot start the writer process for '{}' ({}); rank 0 writes it itself, so a kill -9 of rank 0 "
        "may leave half an event at its end",
        path_, error);
  }
}

TimelineWriter::~TimelineWriter() { close(); }

bool TimelineWriter::start_child(std::string& error) {
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
  plan.fd = fd_;
  plan.pos = end_ - kTailLen;
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
  // The process has the file now; the rank only keeps its socket. A process
  // the rank forks later without exec inherits that socket (SOCK_CLOEXEC
  // covers exec only): the writer then notices the rank's death by its
  // parent changing, within kParentCheckMs.
  ::close(fd_);
  fd_ = -1;
  sock_ = sv[0];
  child_.store(pid);
  return true;
}

int TimelineWriter::reap_child(std::chrono::milliseconds timeout) {
  const pid_t pid = child_.load();
  if (pid <= 0) return 0;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto pause = std::chrono::microseconds(200);
  while (true) {
    int status = 0;
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    // ECHILD: reaped by someone else (SIGCHLD ignored, a waitpid(-1)).
    if (got == pid || (got < 0 && errno != EINTR)) {
      child_.store(-1);
      return got == pid ? status : 0;
    }
    if (std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
}

void TimelineWriter::child_died() {
  const pid_t pid = child_.load();
  const int status = reap_child(kReapTimeout);
  std::string why;
  if (status < 0) {
    why = fmt::format("its writer process (pid {}) stopped reading", pid);
  } else if (WIFSIGNALED(status)) {
    why = fmt::format("its writer process (pid {}) was killed by signal {}", pid, WTERMSIG(status));
  } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
    why = std::strerror(WEXITSTATUS(status));
  } else {
    why = fmt::format("its writer process (pid {}) ended early", pid);
  }
  failed_ = true;
  spdlog::error("hvd timeline: writing '{}' failed: {}; the timeline stops here (the file stays valid JSON)", path_,
                why);
}

bool TimelineWriter::push(TimelineRecord record) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closing_ || failed_ || queue_.size() >= options_.queue_capacity) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  queue_.push_back(std::move(record));
  return true;
}

void TimelineWriter::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closing_ && !thread_.joinable()) return;
    closing_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (sock_ >= 0) {
    ::close(sock_);  // the writer process writes what it has, then exits
    sock_ = -1;
  }
  const pid_t pid = child_.load();
  if (pid > 0) {
    const int status = reap_child(options_.close_timeout);
    if (status < 0) {
      ::kill(pid, SIGKILL);
      reap_child(std::chrono::hours(1));
      spdlog::warn(
          "hvd timeline: the writer process of '{}' (pid {}) did not finish within {} ms and was killed; the "
          "file may miss its last events",
          path_, pid, options_.close_timeout.count());
    } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0 && !failed_) {
      failed_ = true;
      spdlog::error("hvd timeline: writing '{}' failed: {}; the timeline stops here (the file stays valid JSON)", path_,
                    std::strerror(WEXITSTATUS(status)));
    } else if (WIFSIGNALED(status) && !failed_) {
      failed_ = true;
      spdlog::error(
          "hvd timeline: the writer process of '{}' (pid {}) was killed by signal {}; the file may miss its "
          "last events",
          path_, pid, WTERMSIG(status));
    }
  }
  if (fd_ >= 0) {
    ::close(fd_);
    fd_ = -1;
  }
}

void TimelineWriter::run() {
  std::vector<TimelineRecord> batch;
  batch.reserve(1024);
  while (true) {
    bool last;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, options_.flush_interval, [&] { return closing_; });
      batch.swap(queue_);
      last = closing_;
    }
    if (!batch.empty()) write_batch(batch);
    batch.clear();
    if (last) return;
  }
}

int TimelineWriter::pid_of(const std::string& tensor, std::string& out, bool& fresh) {
  auto [it, inserted] = pids_.emplace(tensor, static_cast<int>(pids_.size()) + 1);
  fresh = inserted;
  if (fresh) {
    // Each tensor is a trace "process": its name and its place in the list.
    out += fmt::format(
        ",\n{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": {0}, \"args\": {{\"name\": {1}}}}}"
        ",\n{{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": {0}, \"args\": {{\"sort_index\": {0}}}}}",
        it->second, timeline_quote(tensor));
  }
  return it->second;
}

void TimelineWriter::write_batch(std::vector<TimelineRecord>& batch) {
  if (failed_) return;
  std::string items;
  std::vector<std::size_t> starts;  // where each unit of complete items begins
  items.reserve(batch.size() * 80);
  starts.reserve(batch.size());
  uint64_t too_big = 0;
  for (const TimelineRecord& r : batch) {
    starts.push_back(items.size());
    bool fresh = false;
    if (r.phase == 'i') {
      items += fmt::format(",\n{{\"ph\": \"i\", \"name\": {}, \"ts\": {}, \"pid\": 0, \"s\": \"g\"}}",
                           timeline_quote(r.name), r.ts_us);
    } else {
      const int pid = pid_of(r.tensor, items, fresh);
      items += fmt::format(",\n{{\"ph\": \"{}\"", r.phase);
      if (r.phase != 'E') items += fmt::format(", \"name\": {}", timeline_quote(r.name));
      items += fmt::format(", \"ts\": {}, \"pid\": {}, \"tid\": 0", r.ts_us, pid);
      if (r.phase == 'X') items += ", \"dur\": 0";
      if (!r.args.empty()) items += fmt::format(", \"args\": {{{}}}", r.args);
      items += "}";
    }
    if (items.size() - starts.back() > kMaxFrame) {
      // Larger than one write of the writer process (a megabyte of tensor
      // name or arguments): left out, and its tensor's pid given again.
      items.resize(starts.back());
      starts.pop_back();
      if (fresh) pids_.erase(r.tensor);
      ++too_big;
    }
  }
  if (too_big > 0) dropped_.fetch_add(too_big, std::memory_order_relaxed);
  if (!write_at_end(items, starts)) {
    if (sock_ >= 0) {
      child_died();
    } else {
      failed_ = true;
      spdlog::error("hvd timeline: writing '{}' failed: {}; the timeline stops here (the file stays valid JSON)", path_,
                    std::strerror(errno));
    }
    return;
  }
  written_.fetch_add(batch.size() - too_big, std::memory_order_relaxed);
}

bool TimelineWriter::write_at_end(const std::string& items, const std::vector<std::size_t>& starts) {
  // Each write puts complete items plus a new closing bracket over the old
  // one, so the file is "[...]" before and after it. The writes are made by
  // the writer process, which the rank's death does not interrupt: it gets
  // each write as one frame and drops a frame the rank did not finish
  // sending. A write can still be cut short when the writer process itself
  // is killed (or the rank, when it writes in-process): Linux checks for a
  // fatal signal before each page of a write, which would leave half an
  // item at the end. So writes stay within one 4 KiB page, and only a unit
  // that cannot fit in what is left of its page is written across a
  // boundary, alone (that write's instant is the remaining window, open to
  // a kill of the writer process only).
  constexpr int64_t kPage = 4096;
  int64_t pos = end_ - kTailLen;  // where the next write starts
  std::size_t from = 0;  // first byte of `items` not written yet
  wire_.clear();
  auto flush = [&](std::size_t to) {
    if (to == from) return true;
    const std::size_t size = to - from;
    if (sock_ >= 0) {
      const auto len = static_cast<uint32_t>(size);  // <= kMaxFrame: one unit, or units within a page
      wire_.append(reinterpret_cast<const char*>(&len), sizeof len);
      wire_.append(items, from, size);
    } else {
      std::string data = items.substr(from, size);
      data += kTail;
      if (!pwrite_all(fd_, data.data(), data.size(), pos)) return false;
    }
    pos += static_cast<int64_t>(size);
    end_ = pos + kTailLen;
    from = to;
    return true;
  };
  for (std::size_t u = 0; u < starts.size(); ++u) {
    const std::size_t unit_end = u + 1 < starts.size() ? starts[u + 1] : items.size();
    const int64_t page_end = (pos / kPage + 1) * kPage;
    if (starts[u] > from && pos + static_cast<int64_t>(unit_end - from) + kTailLen > page_end) {
      if (!flush(starts[u])) return false;
    }
  }
  if (!flush(items.size())) return false;
  if (sock_ < 0) return true;
  // Blocking: the bounded queue in front keeps the background thread from
  // waiting on it. MSG_NOSIGNAL: a writer process that died is EPIPE, not a
  // SIGPIPE for the rank.
  std::size_t done = 0;
  while (done < wire_.size()) {
    const ssize_t n = ::send(sock_, wire_.data() + done, wire_.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// ---- Timeline ---------------------------------------------------------------

Timeline::~Timeline() { stop(); }

void Timeline::start(const std::string& path, bool mark_cycles, TimelineWriterOptions options) {
  std::unique_lock<std::mutex> lock(mu_);
  close_locked(lock);
  const auto steady = std::chrono::steady_clock::now();
  const auto epoch_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  writer_ = std::make_unique<TimelineWriter>(path, epoch_us, options);
  start_ = steady;
  states_.clear();
  mark_cycles_.store(mark_cycles);
  active_.store(true);
}

void Timeline::stop() {
  std::unique_lock<std::mutex> lock(mu_);
  close_locked(lock);
}

void Timeline::close_locked(std::unique_lock<std::mutex>& lock) {
  active_.store(false);
  mark_cycles_.store(false);
  std::unique_ptr<TimelineWriter> w = std::move(writer_);
  states_.clear();
  if (!w) return;
  lock.unlock();  // the writer drains without holding up the background thread
  w->close();
  if (w->dropped() > 0) {
    spdlog::warn(
        "hvd timeline: {} event(s) were dropped from '{}' (the writer fell behind, or an event was over 1 MiB)",
        w->dropped(), w->path());
  }
  lock.lock();
}

int64_t Timeline::now_us() const {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - start_).count();
}

void Timeline::write(char phase, const std::string& tensor, std::string name, std::string args) {
  TimelineRecord r;
  r.phase = phase;
  r.tensor = tensor;
  r.name = std::move(name);
  r.args = std::move(args);
  r.ts_us = now_us();
  writer_->push(std::move(r));
}

void Timeline::negotiate_rank_ready(const std::string& tensor, const char* op, int rank) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!writer_) return;
  auto it = states_.find(tensor);
  if (it == states_.end()) {
    write('B', tensor, fmt::format("NEGOTIATE_{}", op));
    it = states_.emplace(tensor, State::Negotiating).first;
  }
  if (it->second != State::Negotiating) return;
  write('X', tensor, std::to_string(rank));
}

void Timeline::negotiated(const std::string& tensor, const char* op, std::size_t bytes) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!writer_) return;
  auto it = states_.find(tensor);
  if (it != states_.end()) {
    if (it->second != State::Negotiating) return;
    write('E', tensor, {});
  }
  write('B', tensor, op, fmt::format("\"bytes\": {}", bytes));
  write('B', tensor, "QUEUE");
  states_[tensor] = State::Activity;
}

void Timeline::activity_start(const std::string& tensor, const char* activity) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!writer_) return;
  auto it = states_.find(tensor);
  if (it == states_.end() || it->second == State::Negotiating) return;
  if (it->second == State::Activity) write('E', tensor, {});
  write('B', tensor, activity);
  it->second = State::Activity;
}

void Timeline::activity_end(const std::string& tensor) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!writer_) return;
  auto it = states_.find(tensor);
  if (it == states_.end() || it->second != State::Activity) return;
  write('E', tensor, {});
  it->second = State::TopLevel;
}

void Timeline::end(const std::string& tensor, const std::string& args) {
  if (!active()) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!writer_) return;
  auto it = states_.find(tensor);
  if (it == states_.end()) return;
  if (it->second == State::Activity) write('E', tensor, {});
  write('E', tensor, {}, it->second == State::Negotiating ? std::string() : args);
  states_.erase(it);
}

void Timeline::mark_cycle() {
  if (!mark_cycles_.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!writer_) return;
  write('i', {}, "CYCLE_START");
}

}  // namespace hvd::collective::detail
