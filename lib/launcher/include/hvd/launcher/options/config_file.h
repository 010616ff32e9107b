#pragma once
/// horovodrun's YAML config file (--config-file), read with yaml-cpp
/// through the flag table (flags.h): a key is the Flag::config_key of a
/// row, and its value goes through that row's parser into that row's
/// Options field, exactly as the flag's value would.
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
/// (min_num_proc, max_num_proc, slots, cooldown_range: Flag::config_aliases).
/// Unknown keys log a warning (a typo should not stop a job, but should be
/// seen); a value of the wrong type throws hvd::InvalidArgument as
/// "path:LINE: key: expected ...". The command line overrides the file
/// (cli.cpp merges them row by row).
#include <string>
#include <vector>

#include "hvd/launcher/options/flags.h"
#include "hvd/launcher/options/options.h"

namespace hvd::launcher {

/// What the file sets.
struct ConfigFileValues {
  /// The file's values in Options' own fields; fields of rows not in
  /// `given` keep Options' defaults.
  Options options;
  /// The rows the file sets: keys with a value, and the switch a present
  /// section implies (Flag::section_default).
  FlagSet given;
  /// Keys hvdrun accepts (checked) and ignores, each with why, for a
  /// warning: "library_options.ccl_bgt_affinity only applies to CCL".
  std::vector<std::string> ignored;

  bool sets(const Flag& flag) const { return given.count(&flag) > 0; }
  /// Any elastic-only setting given: the file was meant for elastic mode
  /// (cli.cpp warns when no discovery script turns that mode on).
  bool elastic_given() const;
};

/// Parses YAML text; `origin` names the file in messages.
ConfigFileValues parse_config_text(const std::string& text, const std::string& origin);

/// Reads and parses a file; unreadable -> InvalidArgument naming the path.
ConfigFileValues load_config_file(const std::string& path);

}  // namespace hvd::launcher
