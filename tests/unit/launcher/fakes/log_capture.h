#pragma once
/// Captures spdlog lines (pattern "%v", debug level) for assertions on what
/// the user is told; the previous logger comes back at scope exit.
#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <sstream>
#include <string>

namespace hvd::launcher::fakes {

struct LogCapture {
  std::ostringstream stream;
  std::shared_ptr<spdlog::logger> previous = spdlog::default_logger();
  LogCapture() {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(stream);
    auto logger = std::make_shared<spdlog::logger>("test", sink);
    logger->set_pattern("%v");
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(previous); }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;
  std::string text() { return stream.str(); }
};

}  // namespace hvd::launcher::fakes
