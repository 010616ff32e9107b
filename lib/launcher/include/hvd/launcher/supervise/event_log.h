#pragma once
/// --events-file: a JSON Lines record of what hvdrun did, for tools
/// (dashboards, operators, test harnesses) that should not parse log text.
/// Each line is one object with "time" (UTC, ISO 8601 with milliseconds),
/// "event" (its kind) and the kind's fields; docs/cli.md#events-file lists
/// them. Lines are written whole and flushed at once, so a reader tailing
/// the file never sees half an event.
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace hvd::launcher {

/// A JSON value for an event field, already encoded.
class EventValue {
 public:
  EventValue(const char* s);  // NOLINT: implicit on purpose, for brace lists
  EventValue(const std::string& s);
  EventValue(int v);
  EventValue(long v);
  EventValue(long long v);
  EventValue(unsigned long v);
  EventValue(unsigned long long v);
  EventValue(bool v);
  /// A list of strings, or of numbers.
  EventValue(const std::vector<std::string>& list);
  EventValue(const std::vector<int>& list);
  /// JSON null.
  static EventValue null();
  /// Text that already is JSON (an object from another encoder).
  static EventValue raw(std::string json);
  const std::string& json() const { return json_; }

 private:
  EventValue() = default;
  std::string json_;
};

class EventLog {
 public:
  /// Creates or truncates `path`. Throws hvd::IoError naming it.
  explicit EventLog(const std::string& path);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  /// Appends one event. Thread-safe. A write error is reported once (as a
  /// warning) and later events are dropped: the job itself goes on.
  void emit(const std::string& event, std::initializer_list<std::pair<const char*, EventValue>> fields);
  void emit(const std::string& event, const std::vector<std::pair<std::string, EventValue>>& fields);

 private:
  void write_line(const std::string& line);
  std::mutex mutex_;
  int fd_ = -1;
  bool failed_ = false;
  std::string path_;
};

/// Opens --events-file when given (null otherwise). Throws hvd::IoError.
std::unique_ptr<EventLog> open_event_log(const std::string* path);

}  // namespace hvd::launcher
