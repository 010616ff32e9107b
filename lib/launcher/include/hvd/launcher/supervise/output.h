#pragma once
/// Worker output: byte chunks from spawners become whole, prefixed lines on
/// hvdrun's stdout/stderr, exactly as horovodrun prints them:
///
///     [<rank>]<stdout>:<line>          (worker stdout -> hvdrun stdout)
///     [<rank>]<stderr>:<line>          (worker stderr -> hvdrun stderr)
///     Sun Nov 22 21:56:55 2026[0]<stdout>:<line>   (--prefix-output-with-timestamp,
///                                                   Python's time.asctime())
///
/// Why a router and not a pass-through: spawner chunks are arbitrary byte
/// ranges, so two ranks' bytes would mix inside a line. The router keeps a
/// LineSplitter per (rank, stream) and writes every complete line -- prefix
/// included -- with one write() under one lock, so lines from different ranks
/// never interleave. A line that never ends (a progress bar without '\n', a
/// binary blob) is cut into bounded chunks instead of being buffered forever.
///
/// Why a writer thread per stream: the router is called from spawner reader
/// threads, which also notice worker exits. A blocking write() to hvdrun's
/// own stdout (a pipe nobody reads: `hvdrun ... | sleep 60`, a stopped pager)
/// must never stall them, or supervision and teardown stop with it. Lines are
/// queued (at most `max_buffered_bytes` per stream) and written by one thread
/// per stream; beyond the bound whole lines are dropped and counted, and one
/// warning with the count is logged when the router closes. Closing waits for
/// the queue to drain while the reader makes progress (at most
/// `close_stall` without progress, `close_bound` in all), then abandons it.
#include "hvd/launcher/spawn/spawner.h"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hvd::launcher {

/// Splits one byte stream into lines. A line ends at "\n", "\r\n" or a lone
/// "\r" (carriage-return progress bars are forwarded as they redraw, like
/// horovodrun does). The terminator stays part of the emitted line.
/// Not thread-safe: one splitter per stream.
class LineSplitter {
 public:
  /// `max_line` bounds what is buffered: a longer line is emitted in chunks
  /// of `max_line` bytes, each flagged as unterminated.
  explicit LineSplitter(std::size_t max_line = 64 * 1024);

  /// `line` includes its terminator unless `terminated` is false (a chunk of
  /// an over-long line, or the final unterminated line from finish()).
  using Emit = std::function<void(std::string_view line, bool terminated)>;

  void feed(const char* data, std::size_t len, const Emit& emit);
  /// End of stream: emits whatever is buffered (as unterminated).
  void finish(const Emit& emit);
  std::size_t buffered() const { return buffer_.size(); }
  /// The start of a line not emitted yet.
  std::string_view pending() const { return buffer_; }

 private:
  std::size_t max_line_;
  std::string buffer_;
};

/// "Sun Nov 22 21:56:55 2026" for the current local time (time.asctime()).
std::string asctime_now();

/// Horovod pads rank directory names to the width of the largest rank:
/// rank.0 .. rank.9 for 10 workers, rank.00 .. rank.10 for 11.
std::string padded_rank(int rank, int num_workers);

/// mkdir -p: `path` and the directories above it (0755). Throws IoError
/// "cannot create output directory 'P': REASON" (also when P exists and is
/// not a directory).
void make_output_directories(const std::string& path);

struct OutputOptions {
  /// Number of ranks; ranks are 0..num_workers-1.
  int num_workers = 1;
  /// --prefix-output-with-timestamp.
  bool timestamp = false;
  /// --output-filename DIR: DIR/rank.<N>/{stdout,stderr} receive each
  /// rank's raw (unprefixed) bytes as well. Created if missing.
  std::optional<std::string> directory;
  /// Elastic jobs: instead of DIR/rank.<N> made up front, DIR/worker.<N>
  /// is made when worker N first writes (workers come and go; ranks change).
  bool lazy_worker_dirs = false;
  /// Longest line held back before it is flushed in pieces.
  std::size_t max_line = 64 * 1024;
  /// Lines of stderr remembered per rank for failure reports.
  std::size_t stderr_tail_lines = 20;
  /// Where prefixed lines go (tests pass pipes or files).
  int stdout_fd = 1;
  int stderr_fd = 2;
  /// Source of the timestamp text; defaults to asctime_now (tests fix it).
  std::function<std::string()> clock;
  /// Prefixed output queued per stream while hvdrun's stdout/stderr is not
  /// being read; whole lines beyond it are dropped (and counted).
  std::size_t max_buffered_bytes = 4u << 20;
  /// When the router closes: give up on a stream whose reader took nothing
  /// for this long, and on every stream after close_bound.
  std::chrono::milliseconds close_stall{1000};
  std::chrono::milliseconds close_bound{10000};
};

/// What could not be written to one of hvdrun's streams (stdout, stderr).
struct DroppedOutput {
  std::uint64_t lines = 0;
  std::uint64_t bytes = 0;
};

/// Thread-safe sink for worker output (any spawner thread may call it).
class OutputRouter {
 public:
  /// Throws hvd::IoError naming the path when --output-filename files
  /// cannot be created.
  explicit OutputRouter(OutputOptions options);
  ~OutputRouter();
  OutputRouter(const OutputRouter&) = delete;
  OutputRouter& operator=(const OutputRouter&) = delete;

  void write(int rank, Stream stream, const char* data, std::size_t len);
  /// From now on the lines of `rank` (the spawner's key) are prefixed
  /// "[label]" instead of "[rank]": an elastic worker's rank in the current
  /// world, or "w7" before it has one. Files and failure reports keep the key.
  void set_label(int rank, std::string label);
  /// The rank's streams have ended: flush partial lines (with a newline
  /// added) and close its files. Idempotent.
  void finish(int rank);
  /// Drops everything kept for a finished rank (its buffers, stderr tail and
  /// label), so that a job starting workers for a week keeps a router of
  /// constant size. For keys that are never reused (elastic workers'
  /// serials); stderr_tail(rank) is empty afterwards. A rank that wrote and
  /// is not finished yet keeps its state.
  void forget(int rank);
  /// The last `stderr_tail_lines` stderr lines of `rank`, oldest first,
  /// without terminators (a partial last line included).
  std::vector<std::string> stderr_tail(int rank) const;
  /// Whole lines dropped so far on `stream` because it was not being read
  /// (more than max_buffered_bytes queued). A stream that is closed (EPIPE)
  /// drops silently and counts nothing, as `hvdrun ... | head` should.
  DroppedOutput dropped(Stream stream) const;
  /// Waits until everything queued so far was written, at most `timeout`;
  /// true if it was.
  bool wait_written(std::chrono::milliseconds timeout);

 private:
  struct RankState;
  struct Writer;
  void emit_line(int rank, Stream stream, std::string_view line, bool terminated, std::string& out);
  void flush(Stream stream, std::string& out);
  RankState& state(int rank);
  void close_writers();

  OutputOptions options_;
  mutable std::mutex mutex_;
  std::map<int, std::unique_ptr<RankState>> ranks_;
  std::map<int, std::string> labels_;  ///< set_label
  /// stdout, stderr; shared with their threads, which may outlive the router
  /// when a stream stays blocked (the thread is then detached).
  std::shared_ptr<Writer> writers_[2];
};

}  // namespace hvd::launcher
