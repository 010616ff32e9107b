#pragma once
/// The timeline's writer (docs/collective.md "Timeline"): the hot path (the
/// background thread) only appends records to a bounded queue; a writer
/// thread formats them (timeline_format.h) and, at least every flush
/// interval, hands a batch to the writer process (timeline_writer_process.h)
/// through a socket, or writes it itself when the process could not be
/// started. The file always ends with "]": events are written with pwrite()
/// over the previous closing bracket, so the file loads as JSON at any
/// moment (see write_at_end in timeline_writer.cpp for what is left).
#include "engine/timeline_format.h"

#include <sys/types.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace hvd::collective::detail {

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
  /// Forks the writer process (timeline_writer_process.h), which takes the
  /// file over; false (nothing changed) when it cannot.
  bool start_child(std::string& error);
  /// Waits for the writer process to exit, at most `timeout`; its wait
  /// status, or -1 when it did not exit in time (it still runs).
  int reap_child(std::chrono::milliseconds timeout);
  /// The writer process ended while the rank still wrote to it: one error
  /// line, the timeline stops.
  void child_died();
  void write_batch(std::vector<TimelineRecord>& batch);
  /// Appends the items before the closing bracket, in the writes
  /// timeline_write_cuts chooses: written here, or sent to the writer
  /// process as one frame per write.
  bool write_at_end(const TimelineItems& items);

  std::string path_;
  TimelineWriterOptions options_;
  int fd_ = -1;  ///< the file; -1 in the rank once the writer process has it
  int sock_ = -1;  ///< the rank's end of the socket to the writer process
  std::atomic<pid_t> child_{-1};  ///< the writer process
  int64_t end_ = 0;  ///< file size; the file ends with kTail
  std::string wire_;  ///< frames of one batch, for the writer process
  std::atomic<bool> failed_{false};
  TimelineFormatter formatter_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<TimelineRecord> queue_;
  bool closing_ = false;
  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> written_{0};
  std::thread thread_;
};

}  // namespace hvd::collective::detail
