#pragma once
/// The timeline (Horovod's HOROVOD_TIMELINE, docs/collective.md
/// "Timeline"): a Chrome-trace JSON array written by rank 0 of the global
/// process set. Each tensor name is one "process" of the trace; its rows
/// are the negotiation (NEGOTIATE_<OP>, with one instant event per rank
/// that announced it), then the operation (<OP>) with its activities
/// (QUEUE, MEMCPY_IN_FUSION_BUFFER, the collective, MEMCPY_OUT_FUSION_BUFFER).
/// Cycle marks (CYCLE_START instants) when asked.
///
/// The hot path (the background thread) only appends records to a bounded
/// queue; a writer thread formats them and, at least every flush interval,
/// hands a batch to a writer process (forked when the timeline starts,
/// named hvd-timeline) through a socket. Only that process writes the file,
/// so a SIGKILL of the rank cannot interrupt a write: the process reads
/// what the rank sent, writes it and exits when the socket ends (the rank
/// closed it or died). The file always ends with "]": events are written
/// with pwrite() over the previous closing bracket, so the file loads as
/// JSON at any moment (see write_at_end in timeline.cpp for what is left).
#include "engine/message.h"

#include <sys/types.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace hvd::collective::detail {

/// Horovod's activity name of an operation: "ALLREDUCE", "ALLGATHER", ...
const char* timeline_op_name(OpType type);
/// `s` as a JSON string literal (quotes and escapes).
std::string timeline_quote(const std::string& s);

struct TimelineRecord {
  char phase = 'B';  ///< 'B' begin, 'E' end, 'X' complete (0 duration), 'i' instant (cycle mark)
  std::string tensor;  ///< the trace "process"; empty for cycle marks
  std::string name;  ///< activity or mark name (unused for 'E')
  std::string args;  ///< JSON object members ("\"k\": v"), or empty
  int64_t ts_us = 0;  ///< microseconds since the timeline started
};

struct TimelineWriterOptions {
  /// Records waiting for the writer; beyond it records are dropped (and
  /// counted) rather than blocking the background thread.
  std::size_t queue_capacity = 1u << 20;
  std::chrono::milliseconds flush_interval{100};
  /// Write the file from the writer thread instead of a writer process (the
  /// fallback when fork() fails; tests). A kill -9 of the process can then
  /// cut a write that crosses a page boundary (see write_at_end).
  bool in_process = false;
  /// How long close() waits for the writer process to finish before it
  /// kills it (one warning line).
  std::chrono::milliseconds close_timeout{5000};
};

/// The file, its writer thread and its writer process. Opening truncates
/// `path`, writes a valid (empty but for metadata) JSON array and forks the
/// writer process (when fork() fails: one warning, and the writer thread
/// writes the file itself); throws hvd::IoError naming the path when it
/// cannot be created.
class TimelineWriter {
 public:
  TimelineWriter(const std::string& path, int64_t start_epoch_us, TimelineWriterOptions options = {});
  ~TimelineWriter();
  TimelineWriter(const TimelineWriter&) = delete;
  TimelineWriter& operator=(const TimelineWriter&) = delete;

  /// Queues one record; false (and counted) when the queue is full or the
  /// writer has failed.
  bool push(TimelineRecord record);
  /// Writes everything queued, stops the thread, ends the writer process
  /// (waits for it to write what it was sent and exit, at most a few
  /// seconds, then kills it) and closes the file.
  void close();

  const std::string& path() const { return path_; }
  /// The writer process; -1 when the file is written in-process or the
  /// process has been reaped.
  pid_t writer_pid() const { return child_.load(); }
  uint64_t dropped() const { return dropped_.load(); }
  /// Records written (in-process) or sent to the writer process.
  uint64_t written() const { return written_.load(); }

 private:
  void run();
  /// Forks the writer process; false (nothing changed) when it cannot.
  bool start_child(std::string& error);
  /// Waits for the writer process to exit, at most `timeout`; its wait
  /// status, or -1 when it did not exit in time (it still runs).
  int reap_child(std::chrono::milliseconds timeout);
  /// The writer process ended while the rank still wrote to it: one error
  /// line, the timeline stops.
  void child_died();
  void write_batch(std::vector<TimelineRecord>& batch);
  /// Appends `items` (complete items starting at `starts`) before the
  /// closing bracket, in writes that each stay within one page where an item
  /// allows it (see write_at_end in timeline.cpp): written here, or sent to
  /// the writer process as one frame per write.
  bool write_at_end(const std::string& items, const std::vector<std::size_t>& starts);
  int pid_of(const std::string& tensor, std::string& out, bool& fresh);

  std::string path_;
  TimelineWriterOptions options_;
  int fd_ = -1;  ///< the file; -1 in the rank once the writer process has it
  int sock_ = -1;  ///< the rank's end of the socket to the writer process
  std::atomic<pid_t> child_{-1};  ///< the writer process
  int64_t end_ = 0;  ///< file size; the file ends with kTail
  std::string wire_;  ///< frames of one batch, for the writer process
  std::atomic<bool> failed_{false};
  std::unordered_map<std::string, int> pids_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TimelineRecord> queue_;
  bool closing_ = false;
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> written_{0};
  std::thread thread_;
};

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
