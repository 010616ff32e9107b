#pragma once
/// horovodrun's YAML config file (--config-file), read with yaml-cpp.
///
/// Layout (as horovod/runner/common/util/config_parser.py):
///   controller: gloo|mpi
///   params:    {fusion_threshold_mb, cycle_time_ms, cache_capacity,
///               hierarchical_allreduce, hierarchical_allgather}
///   autotune:  {enabled, log_file, warmup_samples, steps_per_sample,
///               bayes_opt_max_samples, gaussian_process_noise}
///   timeline:  {filename, mark_cycles}
///   stall_check: {enabled, warning_time_seconds, shutdown_time_seconds}
///   library_options: {mpi_threads_disable, num_nccl_streams,
///               thread_affinity, ccl_bgt_affinity, gloo_timeout_seconds}
///   logging:   {level, with_timestamp}
///   elastic:   {min_np, max_np, slots_per_host, host_discovery_script,
///               elastic_timeout, reset_limit, blacklist_cooldown_range,
///               discovery_interval, discovery_timeout, blacklist_failures,
///               blacklist_window}
/// horovodrun's config_parser has no elastic section; ours uses the flag
/// names with '_' and also accepts horovodrun's argparse dest names
/// (min_num_proc, max_num_proc, slots, cooldown_range).
/// Unknown keys log a warning (a typo should not stop a job, but should be
/// seen); a value of the wrong type throws hvd::InvalidArgument as
/// "path:LINE: key: expected ...". The command line overrides the file.
#include <chrono>
#include <optional>
#include <string>
#include <utility>

#include "hvd/launcher/options/options.h"

namespace hvd::launcher {

/// Elastic settings as one source gave them (command line or config file).
/// Every field is optional, unlike ElasticOptions whose defaults would hide
/// whether a value was given -- merging needs "absent" to differ from
/// "default". Each value is already range-checked on its own; checks across
/// fields (min <= max, ...) happen after merging, in cli.cpp.
struct ElasticSettings {
  std::optional<int> min_np;
  std::optional<int> max_np;
  std::optional<int> slots_per_host;
  std::optional<std::string> host_discovery_script;
  std::optional<std::chrono::seconds> elastic_timeout;
  std::optional<int> reset_limit;
  std::optional<std::pair<int, int>> blacklist_cooldown_range;
  std::optional<std::chrono::milliseconds> discovery_interval;
  std::optional<std::chrono::milliseconds> discovery_timeout;
  std::optional<int> blacklist_failures;
  std::optional<std::chrono::milliseconds> blacklist_window;
};

/// Field by field: `preferred` where set, else `fallback`.
ElasticSettings overlay(const ElasticSettings& preferred, const ElasticSettings& fallback);

/// Copies every set field of `settings` into `options` (unset fields keep
/// the ElasticOptions defaults).
void apply_elastic_settings(const ElasticSettings& settings, ElasticOptions& options);

/// What the file sets. Fields the file does not mention stay unset.
struct ConfigFileValues {
  TuningOptions tuning;
  ElasticSettings elastic;
  bool elastic_given = false;    // any elastic key present
  std::optional<Engine> engine;  // controller:
  std::optional<long> ccl_bgt_affinity;
};

/// Parses YAML text; `origin` names the file in messages.
ConfigFileValues parse_config_text(const std::string& text, const std::string& origin);

/// Reads and parses a file; unreadable -> InvalidArgument naming the path.
ConfigFileValues load_config_file(const std::string& path);

/// "warning" -> "WARNING"; one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL
/// (horovodrun's choices, case-insensitive). Else InvalidArgument.
std::string normalize_log_level(const std::string& level);

/// Fills every tuning field of `options` that is unset from `file`
/// (so values given on the command line win). Elastic settings are merged
/// by cli.cpp (overlay + apply_elastic_settings), which knows which flags
/// were given.
void merge_config(Options& options, const ConfigFileValues& file);

}  // namespace hvd::launcher
