#include "engine/timeline.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace hvd::collective::detail {

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
