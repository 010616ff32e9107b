#pragma once
/// Rate limit for a warning that an outsider can trigger at will (a rejected
/// request, a dropped connection): the first event of a burst is logged in
/// full, later ones are only counted, and the count is reported once per
/// period ("31891 more unauthenticated requests rejected in the last 5 s").
/// A quiet period ends the burst: the next event is logged in full again.
/// Pure bookkeeping with the time passed in, so it is tested without
/// sleeping; thread-safe.
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace hvd {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;

  /// Events counted since the last report, and the time they span.
  struct Summary {
    uint64_t suppressed = 0;
    std::chrono::milliseconds window{0};
  };

  explicit LogLimiter(std::chrono::milliseconds period);

  /// One event at `now`: true when the caller should log it in full (the
  /// first of a burst), false when it was counted for the next summary.
  bool admit(Clock::time_point now);

  /// The count to report at `now`, once at least a period has passed since
  /// the burst began or since the last report (any time with `force`, e.g.
  /// at shutdown). nullopt when there is nothing to report yet. A period
  /// without events ends the burst.
  std::optional<Summary> take(Clock::time_point now, bool force = false);

  /// "in the last 5 s" / "in the last 0.3 s" for a summary's window.
  static std::string window_text(std::chrono::milliseconds window);

  std::chrono::milliseconds period() const { return period_; }

 private:
  const std::chrono::milliseconds period_;
  std::mutex mu_;
  bool in_burst_ = false;
  Clock::time_point window_start_{};
  uint64_t suppressed_ = 0;
};

}  // namespace hvd
