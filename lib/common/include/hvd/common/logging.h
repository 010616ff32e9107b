#pragma once
/// The one spdlog wrapper. Every component logs through spdlog's default
/// logger after init_logging(); one readable line per event, to stderr.
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace hvd {

/// Installs a stderr logger named `name` ("hvdrun", "hvd[3]", ...) as the
/// default logger. Safe to call more than once (the last call wins).
/// `with_time` false drops the "[HH:MM:SS.mmm] " prefix
/// (HOROVOD_LOG_HIDE_TIME=1 for the worker library).
void init_logging(const std::string& name, spdlog::level::level_enum level, bool with_time = true);

/// Parses "trace|debug|info|warning|warn|error|fatal|critical|off"
/// (case-insensitive, as HOROVOD_LOG_LEVEL has them). Unknown -> info.
spdlog::level::level_enum parse_log_level(const std::string& text);

/// A repeated event (a refused connection, ...) logged rate-limited: the
/// first occurrence as its own line, later ones only counted; the count goes
/// out as one line ("<what>: N more since the first") at most once per
/// `interval` and once more from flush() or the destructor. Not thread-safe.
class RepeatedLog {
 public:
  RepeatedLog(spdlog::level::level_enum level, std::string what,
              std::chrono::milliseconds interval = std::chrono::seconds(10));
  RepeatedLog(const RepeatedLog&) = delete;
  RepeatedLog& operator=(const RepeatedLog&) = delete;
  ~RepeatedLog() { flush(); }
  /// One occurrence; `first_line` is logged for the first one only.
  void note(const std::string& first_line);
  /// Logs the count not logged yet, if any.
  void flush();
  std::uint64_t total() const { return total_; }

 private:
  spdlog::level::level_enum level_;
  std::string what_;
  std::chrono::milliseconds interval_;
  std::uint64_t total_ = 0;
  std::uint64_t unlogged_ = 0;
  std::chrono::steady_clock::time_point last_{};
};

}  // namespace hvd
