#pragma once
/// OCI Data Science (ads opctl distributed-training, Horovod clusters;
/// docs/platforms.md#oci-data-science): every job run of the cluster starts
/// the same container with OCI__MODE=MAIN (one run) or WORKER (the others).
/// Workers register in a shared directory and serve their sshd on
/// WORKER_PORT; the MAIN runs an elastic job whose hosts are the registered
/// workers and itself (job/oci_job.cpp, discovery/shared_dir/).
///
/// This file only reads the variables: parse_oci_env is pure over a
/// Environment, and oci_flags turns the variables into hvdrun flags
/// beneath the command line (options/cli.h PlatformFlags).
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "hvd/launcher/discovery/platform/platform.h"
#include "hvd/launcher/options/cli.h"

namespace hvd::launcher::platform {

/// The OCI variables of one job run, checked.
struct OciConfig {
  enum class Mode { Main, Worker };
  Mode mode = Mode::Main;  ///< OCI__MODE
  std::optional<int> worker_count;  ///< OCI__WORKER_COUNT
  int slots = 1;  ///< SLOTS, else the /dev/nvidiaN devices, else 1
  int min_np = 1;  ///< MIN_NP, else (OCI__WORKER_COUNT + 1) * SLOTS, else SLOTS
  int max_np = 1;  ///< MAX_NP, else MIN_NP
  std::chrono::seconds start_timeout{600};  ///< START_TIMEOUT
  std::optional<int> worker_port;  ///< WORKER_PORT: the workers' sshd
  std::string horovod_args;  ///< HOROVOD_ARGS as given
  std::vector<std::string> horovod_args_words;  ///< HOROVOD_ARGS split shell-style
  std::optional<std::string> timeline_file;  ///< ENABLE_TIMELINE=1: <OCI__SYNC_DIR or the job directory>/timeline.json
  /// OCI__ENTRY_SCRIPT + OCI__ENTRY_SCRIPT_ARGS (a .py script runs under
  /// python3); empty when OCI__ENTRY_SCRIPT is unset.
  std::vector<std::string> entry_command;
  std::string work_dir;  ///< OCI__WORK_DIR: a directory every run of the job sees
  std::string job_id;  ///< JOB_OCID, else "Undefined" (as ADS names the job's subdirectory)
  std::string run_id;  ///< JOB_RUN_OCID, else "<host name>-<pid>"
  /// The per-job directory: <OCI__WORK_DIR>/<job_id>/hvdrun.
  std::string job_dir() const;
  /// What was read ("OCI__MODE=WORKER", ...), in order.
  std::vector<std::string> evidence;
  /// Variables that were set but have no effect in this mode, one line each.
  std::vector<std::string> ignored;
  /// What this mode does with variables every run is given (info lines).
  std::vector<std::string> notes;
};

/// The variables, or nullopt when OCI__MODE is unset. Throws
/// InvalidArgument with one line naming the variable when one is malformed
/// (OCI__MODE not MAIN/WORKER, MIN_NP > MAX_NP, an oci:// OCI__WORK_DIR, ...).
std::optional<OciConfig> parse_oci_env(const Environment& ctx);

/// The flags the variables mean, beneath the command line: HOROVOD_ARGS
/// first (it wins over the variables), then --min-np/--max-np/-np, -p
/// WORKER_PORT, --start-timeout and --elastic-timeout START_TIMEOUT,
/// --timeline-filename; the entry script is the default command.
PlatformFlags oci_flags(const OciConfig& config);

/// A WORKER's command when it has none (never run: a WORKER runs no command).
inline constexpr const char* kWorkerPlaceholder = "true";

/// The --dry-run text block of an OCI job run.
std::string render_oci(const OciConfig& config, const std::string& this_address);

}  // namespace hvd::launcher::platform
