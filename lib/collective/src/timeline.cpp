#include "timeline.h"

#include "hvd/common/error.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace hvd::collective::detail {

namespace {

/// Every state of the file ends with this: a valid JSON array.
constexpr const char kTail[] = "\n]\n";
constexpr int64_t kTailLen = 3;

bool pwrite_all(int fd, const std::string& data, int64_t offset) {
  std::size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::pwrite(fd, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
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
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw IoError(
        fmt::format("hvd timeline: cannot create '{}': {} (HOROVOD_TIMELINE / --timeline-filename / "
                    "start_timeline need a writable path on rank 0)",
                    path, std::strerror(errno)));
  }
  // pid 0: the job itself, with the wall-clock time of ts 0 (as Horovod).
  std::string head = fmt::format(
      "[\n{{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": 0, \"args\": {{\"name\": \"hvd timeline (rank 0)\", "
      "\"start_time_since_epoch_in_micros\": {}}}}},\n"
      "{{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": 0, \"args\": {{\"sort_index\": 0}}}}{}",
      start_epoch_us, kTail);
  if (!pwrite_all(fd_, head, 0)) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    throw IoError(fmt::format("hvd timeline: cannot write '{}': {}", path, std::strerror(err)));
  }
  end_ = static_cast<int64_t>(head.size());
  queue_.reserve(1024);
  thread_ = std::thread([this] { run(); });
  pthread_setname_np(thread_.native_handle(), "hvd-timeline");
}

TimelineWriter::~TimelineWriter() { close(); }

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

int TimelineWriter::pid_of(const std::string& tensor, std::string& out) {
  auto [it, fresh] = pids_.emplace(tensor, static_cast<int>(pids_.size()) + 1);
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
  for (const TimelineRecord& r : batch) {
    starts.push_back(items.size());
    if (r.phase == 'i') {
      items += fmt::format(",\n{{\"ph\": \"i\", \"name\": {}, \"ts\": {}, \"pid\": 0, \"s\": \"g\"}}",
                           timeline_quote(r.name), r.ts_us);
      continue;
    }
    const int pid = pid_of(r.tensor, items);
    items += fmt::format(",\n{{\"ph\": \"{}\"", r.phase);
    if (r.phase != 'E') items += fmt::format(", \"name\": {}", timeline_quote(r.name));
    items += fmt::format(", \"ts\": {}, \"pid\": {}, \"tid\": 0", r.ts_us, pid);
    if (r.phase == 'X') items += ", \"dur\": 0";
    if (!r.args.empty()) items += fmt::format(", \"args\": {{{}}}", r.args);
    items += "}";
  }
  if (!write_at_end(items, starts)) {
    failed_ = true;
    spdlog::error("hvd timeline: writing '{}' failed: {}; the timeline stops here (the file stays valid JSON)", path_,
                  std::strerror(errno));
    return;
  }
  written_.fetch_add(batch.size(), std::memory_order_relaxed);
}

bool TimelineWriter::write_at_end(const std::string& items, const std::vector<std::size_t>& starts) {
  // Each pwrite() puts complete items plus a new closing bracket over the
  // old one, so the file is "[...]" before and after it. Linux may cut a
  // write short at a page boundary when the process is killed during it (it
  // checks for a fatal signal before each page), which would leave half an
  // item at the end; so writes stay within one 4 KiB page, and only a unit
  // that cannot fit in what is left of its page is written across a
  // boundary, alone (that write's instant is the one remaining window).
  constexpr int64_t kPage = 4096;
  int64_t pos = end_ - kTailLen;  // where the next write starts
  std::size_t from = 0;  // first byte of `items` not written yet
  auto flush = [&](std::size_t to) {
    if (to == from) return true;
    std::string data = items.substr(from, to - from);
    data += kTail;
    if (!pwrite_all(fd_, data, pos)) return false;
    pos += static_cast<int64_t>(to - from);
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
  return flush(items.size());
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
    spdlog::warn("hvd timeline: {} event(s) were dropped from '{}' (the writer fell behind)", w->dropped(), w->path());
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
