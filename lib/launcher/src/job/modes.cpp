// hvdrun's modes: the decision made once (resolve_job) and one row per mode.
#include "hvd/launcher/job/modes.h"

#include "hvd/common/error.h"
#include "hvd/launcher/discovery/kubernetes/pod_list_hosts.h"
#include "hvd/launcher/job/check_build.h"
#include "hvd/launcher/job/dry_run_report.h"
#include "hvd/launcher/job/platform_follower.h"
#include "hvd/launcher/job/platform_leader.h"
#include "hvd/common/job_env.h"
#include "hvd/launcher/hosts/network.h"
#include "hvd/launcher/plan/plan.h"
#include "hvd/launcher/plan/worker_env.h"
#include "hvd/launcher/process/report.h"
#include "hvd/launcher/spawn/local_spawner.h"
#include "hvd/launcher/spawn/spawner_factory.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace hvd::launcher {

JobDecision resolve_job(Options parsed, Environment environment, const std::function<MpirunProbe()>& probe) {
  JobDecision d;
  d.environment = std::move(environment);
  if (parsed.check_build) {  // the build, not a job: nothing else is read
    d.mode = JobMode::CheckBuild;
    d.options = std::move(parsed);
    return d;
  }
  // Where the hosts come from: -H, --hostfile, a discovery script, the
  // Kubernetes pods, or a platform's hosts (--hosts-from; docs/platforms.md).
  HostSourceChoice source = choose_host_source(parsed, d.environment);
  d.source = std::move(source.source);
  d.platform = std::move(source.platform);
  d.options = std::move(source.options);
  const bool dry_run = d.options.dry_run != DryRunFormat::None;
  // A platform machine that gets no ranks: nothing more to decide (its dry
  // run shows only the platform).
  if (d.platform && d.platform->unranked) {
    d.mode = dry_run ? JobMode::DryRun : JobMode::Unranked;
    return d;
  }
  for (const auto& line : source.info) spdlog::info("{}", line);
  for (const auto& line : source.warnings) spdlog::warn("{}", line);
  if (source.follower && !dry_run) {
    d.mode = JobMode::Follower;
    return d;
  }
  LaunchDecision launch = decide_launch(d.options, probe);
  for (const auto& line : launch.info) spdlog::info("{}", line);
  for (const auto& line : launch.warnings) spdlog::warn("{}", line);
  d.options = std::move(launch.options);
  d.launch = launch.mode;
  d.mpirun = std::move(launch.mpirun);
  d.display_map = launch.display_map;
  for (const auto& line : ineffective_setting_warnings(d.options, d.environment.env)) spdlog::warn("{}", line);
  if (dry_run) {
    d.mode = JobMode::DryRun;
  } else if (d.options.elastic.enabled) {
    d.mode = JobMode::Elastic;
  } else {
    d.mode = d.launch == LaunchMode::Mpirun ? JobMode::Mpirun : JobMode::Static;
  }
  return d;
}

namespace {

// ---- early modes ----------------------------------------------------------

/// `run` when the first word is `word`.
template <int (*Main)(int, char**)>
std::optional<int> when_first_word(const char* word, int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], word) == 0) return Main(argc, argv);
  return std::nullopt;
}

// Internal: what a platform job's leader runs on its follower hosts (docs/platforms.md#followers).
std::optional<int> follower_attach_row(int argc, char** argv) {
  return when_first_word<platform::follower_attach_main>("--follower-attach", argc, argv);
}
std::optional<int> follower_status_row(int argc, char** argv) {
  return when_first_word<platform::follower_status_main>("--follower-status", argc, argv);
}
// The pod rules for scripts/kubernetes/discover_hosts.sh: a pod list on stdin, hosts out.
std::optional<int> kubernetes_pod_hosts_row(int argc, char** argv) {
  return when_first_word<kube::pod_list_hosts_main>("--kubernetes-pod-hosts", argc, argv);
}

// ---- job modes --------------------------------------------------------------

/// A platform job's leader: attached to its followers while `body` runs,
/// and reports the job's status to them at the end.
int lead(JobDecision& d, const std::function<int()>& body) {
  if (!d.platform) return body();
  DefaultSpawnerFactory spawners(spawner_options(d.options));
  std::unique_ptr<platform::PlatformLeader> leader;
  std::string why;
  auto followers = platform::follower_hosts(*d.platform, d.environment, &why);
  if (!why.empty()) spdlog::info("{}: {}", d.platform->name, why);
  if (!followers.empty()) {
    leader = std::make_unique<platform::PlatformLeader>(spawners, std::move(followers), d.options.start_timeout,
                                                        self_executable());
    if (int code = leader->attach()) return code;
  }
  const int code = body();
  if (leader) leader->report(code);
  return code;
}

int check_build_mode(JobDecision&) {
  std::fputs(render_check_build().c_str(), stdout);
  return exit_code::kOk;
}

int dry_run_mode(JobDecision& d) {
  const Options& options = d.options;
  DryRunReport report;
  report.platform = d.platform ? &*d.platform : nullptr;
  if (d.launch != LaunchMode::Mpirun && (options.launcher == "srun" || !options.srun_nodes.empty())) {
    report.launcher = options.launcher == "srun" ? "srun" : "ssh";
    report.srun_nodes = options.srun_nodes;
  }
  JobPlan plan;
  if (d.platform && d.platform->unranked) {
    // Only the platform: the machine has no placement of its own.
  } else if (options.elastic.enabled) {
    // One look at the host source: what a job would find now.
    report.elastic = look_once(*d.source, options.num_proc.value_or(1));
    if (!d.platform) {
      DefaultSpawnerFactory spawners(spawner_options(options));
      report.reach = reach_hosts(spawners, report.elastic->hosts);
    }
  } else {
    // The plan first: a usage error is reported before mpirun is probed.
    plan = plan_from_source(options, *d.source, d.launch);
    if (d.launch == LaunchMode::Mpirun) {
      auto job_env = mpi_job_env(options, current_environment());
      // The address the store would listen on, as the job would choose it
      // (the command line may carry it: MPICH's -localhost); the port
      // exists only once it listens.
      try {
        job_env[job_env::kRendezvousAddr] = choose_driver_address(options.network_interfaces, plan.hosts);
      } catch (const std::exception&) {
        // The job would fail here; the dry run shows the placeholder.
      }
      try {
        const MpiInfo info = d.mpirun ? *d.mpirun : probe_mpirun();
        for (const auto& line : mpi_unapplied_options(info, options)) spdlog::warn("{}", line);
        report.mpirun = render_mpi_dry_run(info, options, plan, job_env, ::geteuid() == 0, options.dry_run);
      } catch (const Error& e) {  // no/unsupported mpirun, uneven Intel MPI slots, bad --mpi-args
        throw JobError(exit_code::kLaunch, e.what());
      }
    } else {
      report.plan = &plan;
      report.plan_options = &options;
      if (!d.platform) {
        DefaultSpawnerFactory spawners(spawner_options(options));
        report.reach = reach_hosts(spawners, plan.hosts);
      }
    }
  }
  std::fputs(render_dry_run_report(report, options.dry_run).c_str(), stdout);
  // A host the configuration does not let hvdrun reach fails the dry run as
  // it would fail the launch (after the whole report).
  if (report.reach) {
    for (const auto& h : *report.reach) {
      if (h.ssh && !h.ssh->options) {
        std::fflush(stdout);
        throw JobError(exit_code::kLaunch, h.ssh->error);
      }
    }
  }
  return exit_code::kOk;
}

int unranked_mode(JobDecision& d) {
  spdlog::warn("{}", d.platform->unranked_reason);
  return exit_code::kOk;
}

int follower_mode(JobDecision& d) {
  // A machine no leader attaches to (Slurm outside an srun step, LSF's
  // compute hosts) would only wait for --start-timeout: one line now.
  std::string why;
  if (!platform::followers_expected(*d.platform, d.environment, &why)) {
    throw JobError(exit_code::kPlatformFollower, "this machine (" + d.platform->this_host + ") is not the " +
                                                     d.platform->name +
                                                     " job's leader, and no leader attaches to it: " + why);
  }
  return platform::follow_leader(d.options, *d.platform, d.environment);
}

int elastic_mode(JobDecision& d) {
  return lead(d, [&] { return run_elastic_job(d.options, *d.source); });
}

int mpirun_mode(JobDecision& d) {
  // The plan first: a usage error is reported before any follower is attached.
  const JobPlan plan = plan_from_source(d.options, *d.source, d.launch);
  return lead(d, [&] {
    return run_mpi_job(d.options, plan, mpi_job_env(d.options, current_environment()), d.mpirun ? &*d.mpirun : nullptr);
  });
}

int static_mode(JobDecision& d) {
  // A static job's hosts are its source's first look (a fixed list: -H,
  // --hostfile, localhost:np or a platform's hosts).
  const JobPlan plan = plan_from_source(d.options, *d.source, d.launch);
  return lead(d, [&] {
    if (d.display_map) {
      // Before any worker writes: the placement, as mpirun --display-map shows its map.
      std::fputs(render_placement_table(plan).c_str(), stdout);
      std::fflush(stdout);
    }
    return run_job(d.options, plan);
  });
}

}  // namespace

const std::vector<EarlyMode>& early_modes() {
  static const std::vector<EarlyMode> rows = {
      {"follower-attach", follower_attach_row},
      {"follower-status", follower_status_row},
      {"kubernetes-pod-hosts", kubernetes_pod_hosts_row},
      // OCI Data Science runs (OCI__MODE) add flags of their own: decided before parsing.
      {"oci", run_oci_if_detected},
  };
  return rows;
}

const std::vector<JobModeRow>& job_modes() {
  static const std::vector<JobModeRow> rows = {
      {JobMode::CheckBuild, "check-build", check_build_mode},
      {JobMode::DryRun, "dry-run", dry_run_mode},
      {JobMode::Unranked, "unranked", unranked_mode},
      {JobMode::Follower, "follower", follower_mode},
      {JobMode::Elastic, "elastic", elastic_mode},
      {JobMode::Mpirun, "mpirun", mpirun_mode},
      {JobMode::Static, "static", static_mode},
  };
  return rows;
}

const JobModeRow& job_mode(JobMode mode) {
  for (const auto& row : job_modes()) {
    if (row.mode == mode) return row;
  }
  throw Error("no row for a job mode");  // every JobMode has one (tests/unit/launcher/job)
}

}  // namespace hvd::launcher
