#include "hvd/launcher/supervise/output.h"

#include "hvd/common/error.h"
#include "hvd/common/io.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <ctime>
#include <thread>

namespace hvd::launcher {

// ---------------------------------------------------------------- splitter

LineSplitter::LineSplitter(std::size_t max_line) : max_line_(max_line == 0 ? 1 : max_line) {}

void LineSplitter::feed(const char* data, std::size_t len, const Emit& emit) {
  std::size_t i = 0;
  while (i < len) {
    // A '\r' at the end of the previous chunk: "\r\n" or a lone '\r'?
    if (!buffer_.empty() && buffer_.back() == '\r') {
      if (data[i] == '\n') {
        buffer_.push_back('\n');
        ++i;
      }
      emit(buffer_, true);
      buffer_.clear();
      continue;
    }
    // Copy up to the next terminator, or until the buffer is full.
    std::size_t room = max_line_ - buffer_.size();
    std::size_t j = i;
    std::size_t stop = std::min(len, i + room);
    while (j < stop && data[j] != '\n' && data[j] != '\r') ++j;
    buffer_.append(data + i, j - i);
    i = j;
    if (i < len && (data[i] == '\n' || data[i] == '\r')) {
      buffer_.push_back(data[i]);
      ++i;
      if (buffer_.back() == '\n') {
        emit(buffer_, true);
        buffer_.clear();
      }
      // '\r' waits for the next byte to tell "\r\n" from a lone '\r'.
      continue;
    }
    if (buffer_.size() >= max_line_) {
      emit(buffer_, false);
      buffer_.clear();
    }
  }
}

void LineSplitter::finish(const Emit& emit) {
  if (buffer_.empty()) return;
  emit(buffer_, buffer_.back() == '\r');
  buffer_.clear();
}

// ----------------------------------------------------------------- helpers

std::string asctime_now() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::localtime_r(&now, &tm);
  char buf[64];
  // Python's time.asctime(): "Sun Nov  2 08:05:03 2026" (day padded by a space).
  std::size_t n = std::strftime(buf, sizeof buf, "%a %b %e %H:%M:%S %Y", &tm);
  return std::string(buf, n);
}

std::string padded_rank(int rank, int num_workers) {
  int width = 1;
  for (int largest = num_workers - 1; largest >= 10; largest /= 10) ++width;
  return fmt::format("{:0{}}", rank, width);
}

namespace {

std::string_view strip_terminator(std::string_view line) {
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.remove_suffix(1);
  return line;
}

UniqueFd open_output_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw IoError(fmt::format("cannot create output file '{}': {}", path, std::strerror(errno)));
  return UniqueFd(fd);
}

void make_directory(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return;
    throw IoError(fmt::format("cannot create output directory '{}': it exists and is not a directory", path));
  }
  throw IoError(fmt::format("cannot create output directory '{}': {}", path, std::strerror(errno)));
}

constexpr std::size_t kMaxTailLineChars = 512;

}  // namespace

void make_output_directories(const std::string& path) {
  for (std::size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    make_directory(path.substr(0, pos));
  }
  make_directory(path);
}

// ------------------------------------------------------------------ writer

/// One of hvdrun's streams, written by its own thread from a bounded queue.
struct OutputRouter::Writer {
  using Clock = std::chrono::steady_clock;
  /// A write that has not returned for this long counts as stalled: callers
  /// stop waiting for this stream (finish() does not hold up exit reports).
  static constexpr std::chrono::milliseconds kStalled{100};
  /// Bytes handed to one write_all, so progress is seen while a slow reader drains.
  static constexpr std::size_t kMaxWrite = 16 * 1024;

  Writer(int fd_, std::size_t limit_) : fd(fd_), limit(limit_) {}

  const int fd;
  const std::size_t limit;
  std::mutex mu;
  std::condition_variable wake;  // the thread: data or closing
  std::condition_variable written;  // waiters: the queue drained or progress
  std::deque<std::string> queue;
  std::size_t queued = 0;  ///< bytes in `queue` plus the chunk being written
  bool writing = false;
  Clock::time_point write_started{};
  Clock::time_point last_progress = Clock::now();
  bool closing = false;
  bool done = false;  ///< the thread returned
  bool broken = false;  ///< EPIPE & co.: drop silently from now on
  DroppedOutput dropped;
  std::thread thread;

  /// Queues `data` (whole lines) unless over the bound. Never blocks on the fd.
  void push(std::string data) {
    if (data.empty()) return;
    std::lock_guard<std::mutex> lock(mu);
    if (broken) return;
    if (queued + data.size() > limit) {
      dropped.lines += static_cast<std::uint64_t>(std::count(data.begin(), data.end(), '\n'));
      dropped.bytes += data.size();
      return;
    }
    queued += data.size();
    queue.push_back(std::move(data));
    wake.notify_one();
  }

  bool stalled_locked(Clock::time_point now) const { return writing && now - write_started >= kStalled; }

  /// Until everything queued was written, `deadline`, or (when
  /// `give_up_if_behind`) the writer is stuck in one write or far behind.
  bool wait_drained(Clock::time_point deadline, bool give_up_if_behind) {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      if (queued == 0 || broken) return true;
      const auto now = Clock::now();
      if (now >= deadline || done) return false;
      if (give_up_if_behind && (stalled_locked(now) || queued > 4 * kMaxWrite)) return false;
      auto until = deadline;
      if (give_up_if_behind && writing) until = std::min(until, write_started + kStalled);
      written.wait_until(lock, std::max(until, now + std::chrono::milliseconds(1)));
    }
  }

  void run() {
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      wake.wait(lock, [&] { return !queue.empty() || closing; });
      if (queue.empty()) break;  // closing and drained
      std::string chunk;
      while (!queue.empty() && chunk.size() < kMaxWrite) {
        std::string& front = queue.front();
        const std::size_t take = std::min(front.size(), kMaxWrite - chunk.size());
        chunk.append(front, 0, take);
        if (take == front.size()) {
          queue.pop_front();
        } else {
          front.erase(0, take);
        }
      }
      writing = true;
      write_started = Clock::now();
      lock.unlock();
      bool ok = true;
      try {
        write_all(fd, chunk.data(), chunk.size());
      } catch (const IoError&) {
        ok = false;  // a closed terminal or `hvdrun ... | head`: drop output, keep the job
      }
      lock.lock();
      writing = false;
      last_progress = Clock::now();
      queued -= chunk.size();
      if (!ok) {
        broken = true;
        for (const auto& q : queue) queued -= q.size();
        queue.clear();
      }
      written.notify_all();
    }
    done = true;
    written.notify_all();
  }
};

// ------------------------------------------------------------------ router

struct OutputRouter::RankState {
  explicit RankState(std::size_t max_line) : out(max_line), err(max_line) {}
  LineSplitter out;
  LineSplitter err;
  UniqueFd out_file;
  UniqueFd err_file;
  std::string file_dir;  // where out_file and err_file are, for messages
  std::deque<std::string> tail;
  bool tail_open = false;  // last tail entry is a partial line still growing
  bool finished = false;
};

OutputRouter::OutputRouter(OutputOptions options) : options_(std::move(options)) {
  if (!options_.clock) options_.clock = asctime_now;
  for (int i = 0; i < 2; ++i) {
    auto w = std::make_shared<Writer>(i == 0 ? options_.stdout_fd : options_.stderr_fd, options_.max_buffered_bytes);
    // The thread holds its own reference: it may outlive the router.
    w->thread = std::thread([w] { w->run(); });
    writers_[i] = std::move(w);
  }
  // From here on a throw must not leave running threads behind.
  try {
    if (options_.directory) {
      const std::string& dir = *options_.directory;
      make_output_directories(dir);  // horovodrun's _mkdir_p
      for (int rank = 0; rank < options_.num_workers && !options_.lazy_worker_dirs; ++rank) {
        std::string rank_dir = fmt::format("{}/rank.{}", dir, padded_rank(rank, options_.num_workers));
        make_directory(rank_dir);
        RankState& st = state(rank);
        st.out_file = open_output_file(rank_dir + "/stdout");
        st.err_file = open_output_file(rank_dir + "/stderr");
        st.file_dir = rank_dir;
      }
    }
  } catch (...) {
    close_writers();
    throw;
  }
}

OutputRouter::~OutputRouter() {
  std::vector<int> ranks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& [rank, st] : ranks_) ranks.push_back(rank);
  }
  for (int rank : ranks) finish(rank);
  close_writers();
}

void OutputRouter::close_writers() {
  using Clock = Writer::Clock;
  const auto give_up = Clock::now() + options_.close_bound;
  for (auto& w : writers_) {
    std::unique_lock<std::mutex> lock(w->mu);
    w->closing = true;
    w->wake.notify_one();
    // Drain while the reader takes something; a reader that takes nothing
    // for close_stall (or everything past close_bound) is given up on.
    for (;;) {
      if (w->done) break;
      const auto now = Clock::now();
      const auto stall_at = (w->writing ? std::max(w->write_started, w->last_progress) : now) + options_.close_stall;
      if (now >= give_up || now >= stall_at) break;
      w->written.wait_until(lock, std::min(give_up, stall_at));
    }
  }
  const char* names[2] = {"stdout", "stderr"};
  bool stderr_usable = true;
  for (int i = 0; i < 2; ++i) {
    Writer& w = *writers_[i];
    std::lock_guard<std::mutex> lock(w.mu);
    DroppedOutput lost = w.dropped;
    // What is still queued is not written either.
    std::uint64_t pending = w.done ? 0 : w.queued;
    if (!w.done) {
      for (const auto& q : w.queue) lost.lines += static_cast<std::uint64_t>(std::count(q.begin(), q.end(), '\n'));
      lost.bytes += pending;
      if (i == 1) stderr_usable = false;
    }
    w.dropped = lost;
  }
  for (int i = 0; i < 2; ++i) {
    Writer& w = *writers_[i];
    if (w.done) {
      w.thread.join();
    } else {
      w.thread.detach();  // blocked in write(); it ends with the process
    }
    if (w.dropped.bytes > 0 && stderr_usable) {
      spdlog::warn("hvdrun's {} was not being read: {} line{} ({} bytes) of worker output were dropped", names[i],
                   w.dropped.lines, w.dropped.lines == 1 ? "" : "s", w.dropped.bytes);
    }
  }
}

DroppedOutput OutputRouter::dropped(Stream stream) const {
  Writer& w = *writers_[stream == Stream::Stdout ? 0 : 1];
  std::lock_guard<std::mutex> lock(w.mu);
  return w.dropped;
}

bool OutputRouter::wait_written(std::chrono::milliseconds timeout) {
  const auto deadline = Writer::Clock::now() + timeout;
  bool all = true;
  for (auto& w : writers_) all = w->wait_drained(deadline, false) && all;
  return all;
}

OutputRouter::RankState& OutputRouter::state(int rank) {
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) {
    it = ranks_.emplace(rank, std::make_unique<RankState>(options_.max_line)).first;
    if (options_.directory && options_.lazy_worker_dirs) {
      // Elastic jobs: one directory per worker process, made when it first
      // writes. A failure here must not stop the job: the terminal copy of
      // the output still works.
      std::string dir = fmt::format("{}/worker.{}", *options_.directory, rank);
      try {
        make_directory(dir);
        it->second->out_file = open_output_file(dir + "/stdout");
        it->second->err_file = open_output_file(dir + "/stderr");
        it->second->file_dir = dir;
      } catch (const std::exception& e) {
        spdlog::warn("--output-filename: {}", e.what());
      }
    }
  }
  return *it->second;
}

void OutputRouter::emit_line(int rank, Stream stream, std::string_view line, bool terminated, std::string& out) {
  if (options_.timestamp) out += options_.clock();
  out += '[';
  if (auto it = labels_.find(rank); it != labels_.end()) {
    out += it->second;
  } else {
    out += std::to_string(rank);
  }
  out += stream == Stream::Stdout ? "]<stdout>:" : "]<stderr>:";
  out.append(line.data(), line.size());
  if (!terminated) out += '\n';

  if (stream == Stream::Stderr) {
    RankState& st = state(rank);
    std::string_view text = strip_terminator(line);
    if (st.tail_open && !st.tail.empty()) {
      std::string& last = st.tail.back();
      last.append(text.substr(0, kMaxTailLineChars - std::min(last.size(), kMaxTailLineChars)));
    } else {
      st.tail.emplace_back(text.substr(0, kMaxTailLineChars));
    }
    // An over-long line arrives in unterminated chunks; keep one tail entry.
    st.tail_open = !terminated && !st.finished;
    while (st.tail.size() > options_.stderr_tail_lines) st.tail.pop_front();
  }
}

void OutputRouter::set_label(int rank, std::string label) {
  std::lock_guard<std::mutex> lock(mutex_);
  labels_[rank] = std::move(label);
}

void OutputRouter::flush(Stream stream, std::string& out) {
  if (out.empty()) return;
  // Every complete line of a chunk in one queue entry, written with one
  // write() when it fits kMaxWrite: whole lines only.
  writers_[stream == Stream::Stdout ? 0 : 1]->push(std::move(out));
  out.clear();
}

void OutputRouter::write(int rank, Stream stream, const char* data, std::size_t len) {
  if (len == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  RankState& st = state(rank);
  UniqueFd& file = stream == Stream::Stdout ? st.out_file : st.err_file;
  if (file) {
    try {
      write_all(file.get(), data, len);
    } catch (const IoError& e) {
      // The terminal copy goes on: the job is not stopped for its log file.
      spdlog::warn("rank {}: cannot write {}/{} (--output-filename: {}); stopped writing it, the terminal still gets "
                   "the output",
                   rank, st.file_dir, stream == Stream::Stdout ? "stdout" : "stderr", e.what());
      file.reset();
    }
  }
  std::string out;
  LineSplitter& splitter = stream == Stream::Stdout ? st.out : st.err;
  splitter.feed(data, len,
                [&](std::string_view line, bool terminated) { emit_line(rank, stream, line, terminated, out); });
  // Every complete line of this chunk in one write(): whole lines only.
  flush(stream, out);
}

void OutputRouter::finish(int rank) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    RankState& st = state(rank);
    if (st.finished) return;
    st.finished = true;
    for (Stream stream : {Stream::Stdout, Stream::Stderr}) {
      std::string out;
      LineSplitter& splitter = stream == Stream::Stdout ? st.out : st.err;
      splitter.finish([&](std::string_view line, bool terminated) { emit_line(rank, stream, line, terminated, out); });
      flush(stream, out);
    }
    st.tail_open = false;
    st.out_file.reset();
    st.err_file.reset();
  }
  // The rank's last lines go out before its exit is reported (hvdrun's own
  // log lines follow them), unless a stream is stuck or far behind (a slow
  // reader): never hold up the exit report for long.
  const auto deadline = Writer::Clock::now() + std::chrono::milliseconds(200);
  for (auto& w : writers_) w->wait_drained(deadline, true);
}

void OutputRouter::forget(int rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = ranks_.find(rank);
  if (it != ranks_.end()) {
    if (!it->second->finished) return;  // its output may still come
    ranks_.erase(it);
  }
  labels_.erase(rank);
}

std::vector<std::string> OutputRouter::stderr_tail(int rank) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = ranks_.find(rank);
  if (it == ranks_.end()) return {};
  const RankState& st = *it->second;
  std::vector<std::string> lines(st.tail.begin(), st.tail.end());
  // A partial line the worker has not ended yet is part of the story too.
  std::string_view pending = strip_terminator(st.err.pending());
  if (!pending.empty()) {
    lines.emplace_back(pending.substr(0, kMaxTailLineChars));
    if (lines.size() > options_.stderr_tail_lines) lines.erase(lines.begin());
  }
  return lines;
}

}  // namespace hvd::launcher
