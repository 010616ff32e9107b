#include "hvd/launcher/plan/worker_env.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <set>

#include "hvd/common/error.h"
#include "hvd/common/horovod_switches.h"
#include "hvd/common/job_env.h"
#include "hvd/launcher/options/flags.h"

namespace hvd::launcher {

namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

/// Variables describing this host, this login session or this shell: they
/// are wrong (or dangerous) on another host, or in a non-interactive child.
const std::set<std::string>& host_local_names() {
  static const std::set<std::string> names = {
      "HOSTNAME",
      "DISPLAY",
      "XAUTHORITY",
      "SHLVL",
      "PWD",
      "OLDPWD",
      "_",
      "SHELLOPTS",
      "BASHOPTS",
      "PS1",
      "PS2",
      "PS3",
      "PS4",
      "PROMPT_COMMAND",
      "COLUMNS",
      "LINES",
      "TERMCAP",
      "TMUX",
      "TMUX_PANE",
      "STY",
      "WINDOW",
      "XDG_SESSION_ID",
      "XDG_RUNTIME_DIR",
      "DBUS_SESSION_BUS_ADDRESS",
      // The job secret is generated per job by run_job; an inherited one
      // (nested hvdrun) must not leak into this job.
      job_env::kSecret,
  };
  return names;
}

/// Loader-injection variables: they change what code runs in every process
/// the worker starts, so they cross hosts only when asked.
const std::set<std::string>& loader_names() {
  static const std::set<std::string> names = {
      "LD_PRELOAD",        "LD_AUDIT",     "LD_DEBUG",        "LD_DEBUG_OUTPUT", "LD_PROFILE",
      "LD_PROFILE_OUTPUT", "LD_SHOW_AUXV", "LD_DYNAMIC_WEAK", "LD_BIND_NOT",
  };
  return names;
}

/// Python's str() of a float: "5.0", "0.25", "1e-05"-ish; horovodrun passes
/// float flags through str(), and workers may compare strings in tests.
std::string python_float(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e16) return fmt::format("{:.1f}", v);
  return fmt::format("{}", v);
}

std::string flag01(bool b) { return b ? "1" : "0"; }

}  // namespace

bool is_forwardable(const std::string& name, bool forward_loader_env) {
  if (name.empty() || name.find('=') != std::string::npos) return false;
  if (host_local_names().count(name) != 0) return false;
  if (starts_with(name, "SSH_")) return false;
  // Exported bash functions: BASH_FUNC_name%% (bash >= 4.3) or BASH_FUNC_name().
  if (starts_with(name, "BASH_FUNC_")) return false;
  if (!forward_loader_env && loader_names().count(name) != 0) return false;
  return true;
}

EnvMap tuning_env(const Options& options) {
  const TuningOptions& t = options.tuning;
  EnvMap env;
  if (t.fusion_threshold_mb) {
    env[job_env::kFusionThreshold] = fmt::format("{}", std::llround(*t.fusion_threshold_mb * 1024.0 * 1024.0));
  }
  if (t.cycle_time_ms) env[job_env::kCycleTime] = python_float(*t.cycle_time_ms);
  if (t.cache_capacity) env[job_env::kCacheCapacity] = std::to_string(*t.cache_capacity);
  if (t.hierarchical_allreduce) env[job_env::kHierarchicalAllreduce] = flag01(*t.hierarchical_allreduce);
  if (t.hierarchical_allgather) env[job_env::kHierarchicalAllgather] = flag01(*t.hierarchical_allgather);
  if (t.torus_allreduce) env[job_env::kTorusAllreduce] = flag01(*t.torus_allreduce);
  // As horovodrun: the autotune knobs are only exported when autotune is on.
  if (t.autotune.value_or(false)) {
    env[job_env::kAutotune] = "1";
    if (t.autotune_log_file) env[job_env::kAutotuneLog] = *t.autotune_log_file;
    if (t.autotune_warmup_samples) {
      env[job_env::kAutotuneWarmupSamples] = std::to_string(*t.autotune_warmup_samples);
    }
    if (t.autotune_steps_per_sample) {
      env[job_env::kAutotuneStepsPerSample] = std::to_string(*t.autotune_steps_per_sample);
    }
    if (t.autotune_bayes_opt_max_samples) {
      env[job_env::kAutotuneBayesOptMaxSamples] = std::to_string(*t.autotune_bayes_opt_max_samples);
    }
    if (t.autotune_gaussian_process_noise) {
      env[job_env::kAutotuneGaussianProcessNoise] = python_float(*t.autotune_gaussian_process_noise);
    }
  }
  // Likewise the timeline knobs only with a timeline file.
  if (t.timeline_filename && !t.timeline_filename->empty()) {
    env[job_env::kTimeline] = *t.timeline_filename;
    if (t.timeline_mark_cycles) env[job_env::kTimelineMarkCycles] = flag01(*t.timeline_mark_cycles);
  }
  if (t.no_stall_check) env[job_env::kStallCheckDisable] = flag01(*t.no_stall_check);
  if (t.stall_check_warning_time_seconds) {
    env[job_env::kStallCheckTimeSeconds] = std::to_string(*t.stall_check_warning_time_seconds);
  }
  if (t.stall_check_shutdown_time_seconds) {
    env[job_env::kStallShutdownTimeSeconds] = std::to_string(*t.stall_check_shutdown_time_seconds);
  }
  if (t.num_nccl_streams) env[job_env::kNumNcclStreams] = std::to_string(*t.num_nccl_streams);
  if (options.tcp_flag) env[job_env::kNcclIbDisable] = "1";
  if (t.thread_affinity) env[job_env::kThreadAffinity] = std::to_string(*t.thread_affinity);
  if (t.mpi_threads_disable) env[job_env::kMpiThreadsDisable] = flag01(*t.mpi_threads_disable);
  if (t.gloo_timeout_seconds) env[job_env::kGlooTimeoutSeconds] = std::to_string(*t.gloo_timeout_seconds);
  if (t.log_level) env[job_env::kLogLevel] = *t.log_level;
  if (t.log_hide_timestamp) env[job_env::kLogHideTime] = flag01(*t.log_hide_timestamp);
  return env;
}

namespace {

/// A flag (and its config key) that asks for a missing feature, by name.
std::string row_name(const char* flag) {
  const Flag* row = find_flag(flag);
  HVD_ENFORCE(row != nullptr, "no flag {}", flag);
  return row->config_key.empty() ? row->name() : fmt::format("{} ({})", row->name(), row->config_key);
}

/// The value the last -x for `name` gives the workers (-x NAME forwards
/// hvdrun's own); nullopt when no -x names it.
std::optional<std::string> exported_value(const std::string& name, const Options& options,
                                          const EnvMap& launcher_env) {
  std::optional<std::string> value;
  for (const auto& item : options.env_exports) {
    const size_t eq = item.find('=');
    if (item.substr(0, eq) != name) continue;
    if (eq != std::string::npos) {
      value = item.substr(eq + 1);
    } else if (auto it = launcher_env.find(name); it != launcher_env.end()) {
      value = it->second;
    }
  }
  return value;
}

/// The value the workers get for `name` from the user directly: the last
/// -x for it, else hvdrun's environment (HOROVOD_* is always forwarded).
std::optional<std::string> user_value(const std::string& name, const Options& options, const EnvMap& launcher_env) {
  if (auto value = exported_value(name, options, launcher_env)) return value;
  if (auto it = launcher_env.find(name); it != launcher_env.end()) return it->second;
  return std::nullopt;
}

/// Horovod reads its switches with strtol(...) > 0.
using horovod_switches::switched_on;

}  // namespace

std::vector<std::string> ineffective_setting_warnings(const Options& options, const EnvMap& launcher_env) {
  const TuningOptions& t = options.tuning;
  std::vector<std::string> lines;
  // `asked`: what asked for the feature, in table order; `variable`: the
  // switch a user may set directly when no flag did.
  auto report = [&](std::vector<std::string> asked, const char* variable, bool flag_set,
                    bool (*on)(const std::optional<std::string>&), const char* why) {
    if (!flag_set) {
      const auto value = user_value(variable, options, launcher_env);
      if (on(value)) asked.push_back(fmt::format("{}={}", variable, *value));
    }
    if (asked.empty()) return;
    std::string names;
    for (size_t i = 0; i < asked.size(); ++i) names += (i ? ", " : "") + asked[i];
    lines.push_back(fmt::format("{} {} no effect yet: {}; ignored", names, asked.size() == 1 ? "has" : "have", why));
  };
  auto non_empty = [](const std::optional<std::string>& v) { return v && !v->empty(); };
  auto not_one = [](const std::optional<std::string>& v) {
    return v && v->find_first_not_of(" ") != std::string::npos && *v != "1";
  };

  // The library autotunes (docs/collective.md, "Autotune"); its knobs act
  // only with the switch, and the Gaussian-process noise not at all.
  const bool tuning =
      t.autotune.has_value() ? *t.autotune : switched_on(user_value(job_env::kAutotune, options, launcher_env));
  if (!tuning) {
    std::vector<std::string> knobs;
    if (t.autotune_log_file) knobs.push_back(row_name("--autotune-log-file"));
    if (t.autotune_warmup_samples) knobs.push_back(row_name("--autotune-warmup-samples"));
    if (t.autotune_steps_per_sample) knobs.push_back(row_name("--autotune-steps-per-sample"));
    if (t.autotune_bayes_opt_max_samples) knobs.push_back(row_name("--autotune-bayes-opt-max-samples"));
    if (t.autotune_gaussian_process_noise) knobs.push_back(row_name("--autotune-gaussian-process-noise"));
    report(knobs, job_env::kAutotune, true, switched_on, "autotune is off (--autotune turns it on)");
  } else {
    std::vector<std::string> noise;
    if (t.autotune_gaussian_process_noise) noise.push_back(row_name("--autotune-gaussian-process-noise"));
    report(noise, job_env::kAutotuneGaussianProcessNoise, t.autotune_gaussian_process_noise.has_value(), non_empty,
           "the collective library's autotune searches a grid of settings, with no Gaussian process");
  }

  // The library writes the timeline (docs/collective.md, "Timeline"); only
  // cycle marks without a timeline file do nothing (and are not exported).
  std::vector<std::string> timeline;
  if (t.timeline_mark_cycles.value_or(false) && !(t.timeline_filename && !t.timeline_filename->empty())) {
    timeline.push_back(row_name("--timeline-mark-cycles"));
  }
  report(timeline, job_env::kTimelineMarkCycles, true, non_empty, "cycle marks need --timeline-filename");

  // --hierarchical-allreduce / --hierarchical-allgather are honoured by the
  // library (docs/collective.md): nothing to warn about.

  std::vector<std::string> torus;
  if (t.torus_allreduce.value_or(false)) torus.push_back(row_name("--torus-allreduce"));
  report(torus, job_env::kTorusAllreduce, t.torus_allreduce.has_value(), switched_on,
         "the collective library has no torus allreduce");

  std::vector<std::string> streams;
  if (t.num_nccl_streams && *t.num_nccl_streams != 1) streams.push_back(row_name("--num-nccl-streams"));
  report(streams, job_env::kNumNcclStreams, t.num_nccl_streams.has_value(), not_one,
         "the collective library's NCCL path uses one stream");

  // Horovod switches no flag sets, given in the environment or by -x; the
  // ones hvdrun sets itself (gloo) reach the workers only by -x.
  auto reaching_workers = [&](const char* name) {
    return horovod_switches::set_by_hvdrun(name) ? exported_value(name, options, launcher_env)
                                                   : user_value(name, options, launcher_env);
  };
  for (const auto& u : horovod_switches::unhonoured(reaching_workers)) {
    lines.push_back(fmt::format("{}={} has no effect yet: {}; ignored", u.variable, u.value, u.why));
  }
  return lines;
}

EnvMap build_common_env(const EnvMap& launcher_env, const Options& options) {
  EnvMap env;
  for (const auto& [name, value] : launcher_env) {
    if (is_forwardable(name, options.forward_loader_env)) env[name] = value;
  }
  env[job_env::kPythonUnbuffered] = "1";
  env[job_env::kStartTimeout] = std::to_string(options.start_timeout.count());
  env[job_env::kController] = "gloo";
  env[job_env::kCpuOperations] = "gloo";
  if (options.verbose) env[job_env::kVerbose] = "1";
  if (!options.network_interfaces.empty()) {
    env[job_env::kGlooIface] = options.network_interfaces.front();
    std::string all;
    for (const auto& nic : options.network_interfaces) all += (all.empty() ? "" : ",") + nic;
    env[job_env::kNcclSocketIfname] = all;
  }
  for (const auto& [name, value] : tuning_env(options)) env[name] = value;
  for (const auto& item : options.env_exports) {
    size_t eq = item.find('=');
    std::string name = item.substr(0, eq);
    if (name.empty()) {
      throw InvalidArgument(fmt::format("-x '{}': missing variable name (use -x NAME or -x NAME=VALUE)", item));
    }
    if (eq != std::string::npos) {
      env[name] = item.substr(eq + 1);
      continue;
    }
    auto it = launcher_env.find(name);
    if (it == launcher_env.end()) {
      spdlog::warn("-x {}: not set in hvdrun's environment; not forwarded", name);
      continue;
    }
    // Explicit -x forwards even variables the filter would drop.
    env[name] = it->second;
  }
  return env;
}

EnvMap add_slot_env(EnvMap env, const SlotAssignment& slot, std::size_t total) {
  env[job_env::kHostname] = slot.hostname;
  env[job_env::kRank] = std::to_string(slot.rank);
  env[job_env::kSize] = std::to_string(total);
  env[job_env::kLocalRank] = std::to_string(slot.local_rank);
  env[job_env::kLocalSize] = std::to_string(slot.local_size);
  env[job_env::kCrossRank] = std::to_string(slot.cross_rank);
  env[job_env::kCrossSize] = std::to_string(slot.cross_size);
  return env;
}

EnvMap build_worker_env(const EnvMap& launcher_env, const SlotAssignment& slot, const Options& options,
                        std::size_t total) {
  return add_slot_env(build_common_env(launcher_env, options), slot, total);
}

EnvMap rendezvous_env(const std::string& addr, uint16_t port, const std::string& secret) {
  EnvMap env;
  env[job_env::kRendezvousAddr] = addr;
  env[job_env::kRendezvousPort] = std::to_string(port);
  env[job_env::kSecret] = secret;
  return env;
}

void add_rendezvous_env(JobPlan& plan, const std::string& addr, uint16_t port, const std::string& secret) {
  const EnvMap rendezvous = rendezvous_env(addr, port, secret);
  for (auto& worker : plan.workers) {
    for (const auto& [name, value] : rendezvous) worker.env[name] = value;
  }
}

bool is_secret_name(const std::string& name) {
  if (name == job_env::kSecret) return true;
  std::string upper = name;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  for (const char* word : {"SECRET", "PASSWORD", "PASSWD", "TOKEN", "CREDENTIAL", "_KEY", "APIKEY"}) {
    if (upper.find(word) != std::string::npos) return true;
  }
  return false;
}

}  // namespace hvd::launcher
