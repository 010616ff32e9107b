#include "hvd/common/log_limiter.h"

#include "hvd/common/error.h"

#include <fmt/format.h>

namespace hvd {

LogLimiter::LogLimiter(std::chrono::milliseconds period) : period_(period) {
  if (period.count() <= 0) throw InvalidArgument("LogLimiter: the period must be positive");
}

bool LogLimiter::admit(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  if (in_burst_ && suppressed_ == 0 && now - window_start_ >= period_) in_burst_ = false;  // quiet: a new burst
  if (!in_burst_) {
    in_burst_ = true;
    window_start_ = now;
    suppressed_ = 0;
    return true;
  }
  ++suppressed_;
  return false;
}

std::optional<LogLimiter::Summary> LogLimiter::take(Clock::time_point now, bool force) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!in_burst_) return std::nullopt;
  const auto elapsed = now - window_start_;
  if (!force && elapsed < period_) return std::nullopt;
  if (suppressed_ == 0) {
    // A whole period without another event: the burst is over.
    if (elapsed >= period_) in_burst_ = false;
    return std::nullopt;
  }
  Summary s{suppressed_, std::chrono::duration_cast<std::chrono::milliseconds>(elapsed)};
  suppressed_ = 0;
  window_start_ = now;
  return s;
}

std::string LogLimiter::window_text(std::chrono::milliseconds window) {
  const double s = static_cast<double>(window.count()) / 1000.0;
  if (window.count() % 1000 == 0) return fmt::format("{} s", window.count() / 1000);
  return fmt::format("{:.1f} s", s);
}

}  // namespace hvd
