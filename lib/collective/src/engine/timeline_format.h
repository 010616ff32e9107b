#pragma once
/// The timeline's Chrome-trace JSON (docs/collective.md "Timeline"), as pure
/// functions: what the records become and where the writes of a batch are
/// cut. No I/O here; timeline_writer.h queues and writes, and
/// timeline_writer_process.h is the forked process that owns the file.
///
/// The file is a JSON array that always ends with kTimelineTail: events are
/// appended as items (",\n{...}") written over the previous closing bracket.
/// Each tensor name is one trace "process" (a pid with its name and sort
/// index as metadata, written before its first event); pid 0 is the job.
#include "engine/message.h"

#include <cstddef>
#include <cstdint>
#include <string>
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

/// Every state of the file ends with this: a valid JSON array.
inline constexpr char kTimelineTail[] = "\n]\n";
inline constexpr int64_t kTimelineTailLen = 3;
/// The largest unit of items (an event with its tensor's metadata) one write
/// takes: the writer process's frame, allocated before fork. A larger unit
/// is left out and counted.
inline constexpr std::size_t kTimelineMaxUnit = 1u << 20;
/// Writes stay within one page of the file where a unit allows it (see
/// timeline_write_cuts).
inline constexpr int64_t kTimelinePage = 4096;

/// The file's first bytes: "[", the job's metadata (pid 0, with the
/// wall-clock time of ts 0, as Horovod) and the tail.
std::string timeline_head(int64_t start_epoch_us);

/// A batch of records as items to append.
struct TimelineItems {
  std::string text;  ///< complete items, each ",\n{...}"
  /// Where each unit begins in `text`: one record's event, after its
  /// tensor's metadata when the tensor is new. A write never cuts a unit.
  std::vector<std::size_t> starts;
  /// Records left out: their unit was larger than the maximum.
  uint64_t too_big = 0;
};

/// Turns records into items. Keeps which tensors have a pid already, across
/// batches (a tensor's metadata is written once, before its first event).
class TimelineFormatter {
 public:
  explicit TimelineFormatter(std::size_t max_unit = kTimelineMaxUnit) : max_unit_(max_unit) {}
  TimelineItems format(const std::vector<TimelineRecord>& batch);

 private:
  /// The tensor's pid; a new one's metadata items go to `out` first.
  int pid_of(const std::string& tensor, std::string& out, bool& fresh);

  std::size_t max_unit_;
  std::unordered_map<std::string, int> pids_;
};

/// Where the writes that append `size` bytes of items (units starting at
/// `starts`) at file offset `pos` end, in order: each write (plus the new
/// tail) stays within one kTimelinePage page, and a unit that cannot fit in
/// what is left of its page is written across the boundary alone. Linux
/// checks for a fatal signal before each page of a write, so a kill of the
/// writer then leaves whole items at the end (see TimelineWriter::write_at_end).
std::vector<std::size_t> timeline_write_cuts(int64_t pos, std::size_t size, const std::vector<std::size_t>& starts);

}  // namespace hvd::collective::detail
