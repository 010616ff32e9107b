#include "engine/timeline_writer.h"

#include "engine/timeline_writer_process.h"

#include "hvd/common/error.h"
#include "hvd/common/files.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>

namespace hvd::collective::detail {

namespace {

/// How long the writer thread waits for a writer process that closed its
/// socket to exit.
constexpr std::chrono::milliseconds kReapTimeout{5000};

}  // namespace

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
  const std::string head = timeline_head(start_epoch_us);
  if (!timeline_pwrite_all(fd_, head.data(), head.size(), 0)) {
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
  TimelineWriterProcess process;
  if (!start_timeline_writer_process(fd_, end_ - kTimelineTailLen, process, error)) return false;
  // The process has the file now; the rank only keeps its socket. A process
  // the rank forks later without exec inherits that socket (SOCK_CLOEXEC
  // covers exec only): the writer then notices the rank's death by its
  // parent changing.
  ::close(fd_);
  fd_ = -1;
  sock_ = process.sock;
  child_.store(process.pid);
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

void TimelineWriter::write_batch(std::vector<TimelineRecord>& batch) {
  if (failed_) return;
  const TimelineItems items = formatter_.format(batch);
  if (items.too_big > 0) dropped_.fetch_add(items.too_big, std::memory_order_relaxed);
  if (!write_at_end(items)) {
    if (sock_ >= 0) {
      child_died();
    } else {
      failed_ = true;
      spdlog::error("hvd timeline: writing '{}' failed: {}; the timeline stops here (the file stays valid JSON)", path_,
                    std::strerror(errno));
    }
    return;
  }
  written_.fetch_add(batch.size() - items.too_big, std::memory_order_relaxed);
}

bool TimelineWriter::write_at_end(const TimelineItems& items) {
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
  // a kill of the writer process only): timeline_write_cuts.
  int64_t pos = end_ - kTimelineTailLen;  // where the next write starts
  std::size_t from = 0;  // first byte of the items not written yet
  wire_.clear();
  for (const std::size_t to : timeline_write_cuts(pos, items.text.size(), items.starts)) {
    const std::size_t size = to - from;
    if (sock_ >= 0) {
      const auto len = static_cast<uint32_t>(size);  // <= kTimelineMaxUnit: one unit, or units within a page
      wire_.append(reinterpret_cast<const char*>(&len), sizeof len);
      wire_.append(items.text, from, size);
    } else {
      std::string data = items.text.substr(from, size);
      data += kTimelineTail;
      if (!timeline_pwrite_all(fd_, data.data(), data.size(), pos)) return false;
    }
    pos += static_cast<int64_t>(size);
    end_ = pos + kTimelineTailLen;
    from = to;
  }
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

}  // namespace hvd::collective::detail
