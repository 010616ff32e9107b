#pragma once
/// hvdrun's modes as a table (as ninja's tools are): hvdrun_main is a thin
/// dispatcher over it.
///
///  1. Early modes, before the command line is parsed (early_modes()): the
///     internal ones chosen by their first word (the platform follower
///     protocol, `--kubernetes-pod-hosts` for discover_hosts.sh) and an OCI
///     Data Science run (OCI__MODE), whose variables add flags of their
///     own. The first row that answers ends hvdrun.
///  2. Job modes: the command line is parsed and resolved ONCE into a
///     JobDecision (resolve_job: options + host-source choice + launch
///     decision); its `mode` picks one row of job_modes(), which reads
///     nothing but the decision.
///
/// Data flows down only: options -> host source (discovery/) -> launch
/// decision -> plan (plan/) -> spawners (spawn/) -> Supervisor or
/// ElasticRunner -> exit code. Errors are thrown as JobError or
/// InvalidArgument and reported once (process/report.h).
#include "hvd/launcher/discovery/choose.h"
#include "hvd/launcher/discovery/host_source.h"
#include "hvd/launcher/discovery/platform/platform.h"
#include "hvd/launcher/job/launch_mode.h"
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/plan/job_plan.h"
#include "hvd/launcher/plan/plan.h"
#include "hvd/launcher/process/environment.h"
#include "hvd/launcher/spawn/mpi/mpi_launch.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

/// One row of job_modes() per value.
enum class JobMode {
  CheckBuild,  ///< --check-build: what this build supports
  DryRun,  ///< --dry-run (text or JSON) of any job: nothing starts
  Unranked,  ///< a platform machine that gets no ranks (Vertex's reduction servers): one line, exit 0
  Follower,  ///< a platform job's follower: waits for its leader (docs/platforms.md#followers)
  Elastic,  ///< --elastic: the ElasticRunner over the host source
  Mpirun,  ///< the workers through mpirun (docs/mpi.md)
  Static,  ///< a fixed plan, hvdrun's own spawners, the Supervisor
};

/// The one resolved decision every job mode reads: made once by
/// resolve_job, never re-derived.
struct JobDecision {
  JobMode mode = JobMode::Static;
  /// The options the job runs with: parsed, with the platform's settings
  /// (choose_host_source) and --mpi-args' output flags (decide_launch)
  /// folded in.
  Options options;
  /// Where the job's hosts come from; null for --check-build.
  std::unique_ptr<HostSource> source;
  /// The platform whose hosts are used, if any (its role, its dry-run block).
  std::optional<platform::PlatformDescription> platform;
  /// Who starts the workers (decide_launch).
  LaunchMode launch = LaunchMode::Own;
  /// mpirun found by decide_launch's probe (--mpi-args chose mpirun mode).
  std::optional<MpiInfo> mpirun;
  /// Print the placement table before starting (--mpi-args --display-map).
  bool display_map = false;
  /// The machine's environment, as read once at the start.
  Environment environment;
};

/// The decision for `parsed` on a machine with `environment`: the host
/// source (choose_host_source), then who starts the workers (decide_launch,
/// which calls `probe` only when it matters), then the mode. Logs the info
/// and warning lines of each step as it goes (so they precede any error of
/// a later step). Throws InvalidArgument on a usage error. Starts nothing.
JobDecision resolve_job(Options parsed, Environment environment, const std::function<MpirunProbe()>& probe);

/// A mode decided before parsing: returns the exit code when it applies
/// to this command line (and ran), nullopt to let the next row decide.
struct EarlyMode {
  const char* name;
  std::optional<int> (*run)(int argc, char** argv);
};
/// follower-attach, follower-status, kubernetes-pod-hosts, oci: in that
/// order.
const std::vector<EarlyMode>& early_modes();

/// A job mode: runs a resolved decision to hvdrun's exit code.
struct JobModeRow {
  JobMode mode;
  const char* name;
  int (*run)(JobDecision& decision);
};
/// One row per JobMode, in enum order.
const std::vector<JobModeRow>& job_modes();
/// The row for `mode`.
const JobModeRow& job_mode(JobMode mode);

// The modes' bodies (one file each under job/). Each returns hvdrun's exit
// code and never calls exit().

/// The static mode: starts the plan's workers and supervises them to the
/// end (job/static_job.cpp).
int run_job(const Options& options, const JobPlan& plan);

/// The elastic mode: discovery, membership changes, recovery over `source`
/// (choose_host_source, or OCI's shared directory: job/oci_job.cpp;
/// docs/elastic.md; job/elastic_job.cpp).
int run_elastic_job(const Options& options, HostSource& source);

/// The mpirun mode (job/mpi_job.cpp; contracts in spawn/mpi/mpi_launch.h):
///  - probes mpirun unless `probed` (missing/unsupported: exit_code::kLaunch);
///  - starts the rendezvous store (choose_driver_address), adds
///    HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT and HVDRUN_SECRET to `job_env`
///    (mpi_job_env());
///  - starts mpirun in its own process group, stdin /dev/null, output passed
///    through untouched (mpirun multiplexes the ranks itself), with
///    PR_SET_PDEATHSIG so mpirun is told to stop if hvdrun is killed;
///  - forwards SIGINT/SIGTERM/SIGHUP to mpirun (which tears its ranks down);
///    SIGKILLs mpirun's process group if it is still running kill_grace + 5 s
///    after a forwarded signal, or at once on a second signal;
///  - returns mpirun's exit code, 128+signal if mpirun died of a signal, and
///    128+signal of the forwarded signal when the job was interrupted.
int run_mpi_job(const Options& options, const JobPlan& plan, const std::map<std::string, std::string>& job_env,
                const MpiInfo* probed = nullptr);

/// An OCI Data Science run (OCI__MODE), before anything else is parsed:
/// nullopt when OCI does not apply here (job/oci_job.cpp).
std::optional<int> run_oci_if_detected(int argc, char** argv);

/// A static (or mpirun) job's plan over its source's first look, its slots
/// checked as the launcher that starts the ranks checks them
/// (make_plan's SlotCheck). Throws InvalidArgument (usage).
JobPlan plan_from_source(const Options& options, HostSource& source, LaunchMode launch);

}  // namespace hvd::launcher
