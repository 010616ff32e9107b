#pragma once
/// The timeline (Horovod's HOROVOD_TIMELINE, docs/collective.md
/// "Timeline"): a Chrome-trace JSON array written by rank 0 of the global
/// process set. Each tensor name is one "process" of the trace; its rows
/// are the negotiation (NEGOTIATE_<OP>, with one instant event per rank
/// that announced it), then the operation (<OP>) with its activities
/// (QUEUE, MEMCPY_IN_FUSION_BUFFER, the collective, MEMCPY_OUT_FUSION_BUFFER).
/// Cycle marks (CYCLE_START instants) when asked.
///
/// Three units below this one: the format (timeline_format.h: records to
/// Chrome-trace items, pure), the writer (timeline_writer.h: the queue and
/// its thread) and the writer process (timeline_writer_process.h: the forked
/// process that owns the file, so a SIGKILL of the rank cannot cut a write).
#include "engine/timeline_writer.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

namespace hvd::collective::detail {

/// What the Context reports to: per-tensor state (Horovod's), so events
/// nest properly even when the timeline starts or stops mid-operation.
/// Thread-safe; every method returns at once when the timeline is off.
class Timeline {
 public:
  Timeline() = default;
  ~Timeline();

  /// Opens `path` (truncating it) and records from now on; an open timeline
  /// is closed first. Throws hvd::IoError when the file cannot be created.
  void start(const std::string& path, bool mark_cycles, TimelineWriterOptions options = {});
  /// Flushes and closes; no-op when off.
  void stop();
  bool active() const { return active_.load(std::memory_order_relaxed); }
  bool mark_cycles() const { return mark_cycles_.load(std::memory_order_relaxed); }

  /// A rank announced `tensor` (op name "ALLREDUCE", ...): the first one
  /// opens NEGOTIATE_<op>, each adds an instant named by the rank.
  void negotiate_rank_ready(const std::string& tensor, const char* op, int rank);
  /// Negotiation done: NEGOTIATE ends, <op> begins, then QUEUE (until the
  /// executor takes it).
  void negotiated(const std::string& tensor, const char* op, std::size_t bytes);
  void activity_start(const std::string& tensor, const char* activity);
  void activity_end(const std::string& tensor);
  /// The operation finished; `args` (JSON members) describe it.
  void end(const std::string& tensor, const std::string& args = {});
  void mark_cycle();

 private:
  enum class State { Negotiating, TopLevel, Activity };
  void write(char phase, const std::string& tensor, std::string name, std::string args = {});
  int64_t now_us() const;
  void close_locked(std::unique_lock<std::mutex>& lock);

  std::atomic<bool> active_{false};
  std::atomic<bool> mark_cycles_{false};
  mutable std::mutex mu_;
  std::unique_ptr<TimelineWriter> writer_;
  std::unordered_map<std::string, State> states_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace hvd::collective::detail
