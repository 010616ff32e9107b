#pragma once
/// The worker side of the launcher<->worker contract (hvd/common/job_env.h
/// names the variables; docs/collective.md lists their meaning): Settings
/// and a Context from the environment hvdrun sets.
///
/// Its own unit (src/bootstrap/init_env.cpp) because two others build on it: the
/// process-wide API (hvd.h, src/api/hvd.cpp: hvd::init) and elastic membership
/// (elastic_member.h: member_options_from_env). It uses neither of them, so
/// the dependencies go one way: hvd.cpp -> elastic_member.cpp -> init_env.cpp,
/// and hvd.cpp -> init_env.cpp.
#include "hvd/collective/context.h"

#include <spdlog/spdlog.h>

#include <memory>
#include <string>
#include <vector>

namespace hvd::collective {

/// Horovod's switch for add_process_set/remove_process_set after init
/// (Settings::dynamic_process_sets; strtol(value) > 0 is on). Set by the
/// user (or hvdcomm's init(process_sets="dynamic")), not by hvdrun: hvdrun
/// passes it through like any other variable of the caller's environment.
inline constexpr const char* kDynamicProcessSetsVar = "HOROVOD_DYNAMIC_PROCESS_SETS";

/// HOROVOD_TIMELINE's special value (Horovod's): no timeline file at init;
/// the program starts one with start_timeline.
inline constexpr const char* kTimelineDynamic = "DYNAMIC";

/// Reads the environment hvdrun sets:
/// all of HOROVOD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _CROSS_RANK,
/// _CROSS_SIZE present -> that job; none present -> a job of size 1; some
/// present or any garbage -> hvd::InvalidArgument naming the variable.
/// Tuning: HOROVOD_CYCLE_TIME, _FUSION_THRESHOLD, _CACHE_CAPACITY, the
/// stall check, HOROVOD_THREAD_AFFINITY ("2,3": core ids per local rank),
/// HOROVOD_GLOO_TIMEOUT_SECONDS (else HOROVOD_START_TIMEOUT) as the
/// rendezvous timeout, HOROVOD_DYNAMIC_PROCESS_SETS.
Settings settings_from_env();

/// How the library logs (hvd.cpp sets up its logger from this).
struct LogSettings {
  /// HOROVOD_LOG_LEVEL; unset: info under HVDRUN_VERBOSE=1, else warning.
  spdlog::level::level_enum level = spdlog::level::warn;
  /// HOROVOD_LOG_HIDE_TIME=1: no time in log lines.
  bool hide_time = false;
  /// HVDRUN_VERBOSE=1 (hvdrun --verbose): rank 0 logs its settings at info.
  bool verbose = false;
};
LogSettings log_settings_from_env();

/// One line naming each setting the library applied and what it ignores
/// (fusion threshold, cycle time, cache, stall check, rendezvous timeout
/// and where it came from, thread affinity, log timestamps, and the
/// hierarchical / torus / autotune / timeline / NCCL-stream requests that
/// have no effect yet). hvd::init logs it once from rank 0: at info with
/// HVDRUN_VERBOSE=1, else at debug.
std::string describe_settings(const Settings& settings, const LogSettings& log);

// One line per variable that is set but not honoured (torus allreduce,
// autotune's Gaussian-process noise, the timeline); rank 0 logs each at warn
// level at every init, whatever the log level.
std::vector<std::string> ignored_settings_warnings();

/// settings_from_env(), then the store from HOROVOD_GLOO_RENDEZVOUS_ADDR/
/// _PORT (size > 1) and Context::create. Without the placement variables,
/// an MPI launcher's (mpi_env.h) if present. `comm_prefix` names the
/// communicator generation in the store (every rank must pass the same).
/// `process_sets`: Settings::process_sets (static sets, registered before
/// this returns).
std::unique_ptr<Context> context_from_env(const std::string& comm_prefix = "gen0/",
                                          const std::vector<std::vector<int>>& process_sets = {});

}  // namespace hvd::collective
