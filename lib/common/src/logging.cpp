#include "hvd/common/logging.h"

#include <spdlog/sinks/stdout_sinks.h>

#include <algorithm>
#include <cctype>
#include <utility>

namespace hvd {

void init_logging(const std::string& name, spdlog::level::level_enum level, bool with_time) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  auto logger = std::make_shared<spdlog::logger>(name, sink);
  logger->set_pattern(with_time ? "[%H:%M:%S.%e] [%n] [%^%l%$] %v" : "[%n] [%^%l%$] %v");
  logger->set_level(level);
  logger->flush_on(spdlog::level::trace);
  spdlog::set_default_logger(logger);
}

spdlog::level::level_enum parse_log_level(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "trace") return spdlog::level::trace;
  if (t == "debug") return spdlog::level::debug;
  if (t == "info") return spdlog::level::info;
  if (t == "warning" || t == "warn") return spdlog::level::warn;
  if (t == "error") return spdlog::level::err;
  if (t == "fatal" || t == "critical") return spdlog::level::critical;
  if (t == "off") return spdlog::level::off;
  return spdlog::level::info;
}

RepeatedLog::RepeatedLog(spdlog::level::level_enum level, std::string what, std::chrono::milliseconds interval)
    : level_(level), what_(std::move(what)), interval_(interval) {}

void RepeatedLog::note(const std::string& first_line) {
  const auto now = std::chrono::steady_clock::now();
  if (total_++ == 0) {
    spdlog::log(level_, "{} (repeats are counted, not logged one by one)", first_line);
    last_ = now;
    return;
  }
  ++unlogged_;
  if (now - last_ >= interval_) flush();
}

void RepeatedLog::flush() {
  if (unlogged_ == 0) return;
  spdlog::log(level_, "{}: {} more ({} in all)", what_, unlogged_, total_);
  unlogged_ = 0;
  last_ = std::chrono::steady_clock::now();
}

}  // namespace hvd
