#pragma once
/// The one spdlog wrapper. Every component logs through spdlog's default
/// logger after init_logging(); one readable line per event, to stderr.
#include <spdlog/spdlog.h>

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

}  // namespace hvd
