#pragma once
/// Everything a --dry-run shows, as data, and the ONE place that turns it
/// into text or JSON (job/dry_run_report.cpp). The sections are rendered by
/// the folders that own them -- the placement (plan/dry_run.cpp), a
/// platform's block (discovery/platform/), the mpirun command
/// (spawn/mpi/) -- and combined here; the elastic job's look at its hosts
/// and the OCI runs' blocks are rendered here.
#include "hvd/launcher/discovery/host_source.h"
#include "hvd/launcher/discovery/kubernetes/pod_hosts.h"
#include "hvd/launcher/discovery/platform/platform.h"
#include "hvd/launcher/hosts/hosts.h"
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/plan/job_plan.h"
#include "hvd/launcher/spawn/spawner_factory.h"

#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

/// One look at an elastic job's host source (one run of the discovery
/// script, one list of the Kubernetes pods, the fixed hosts or the OCI
/// shared directory).
struct ElasticLook {
  std::string source;  ///< HostSource::describe()
  std::vector<HostSpec> hosts;
  std::vector<kube::PodHost> pods;  ///< Kubernetes only, in natural order of their names
  long slots = 0;
  int np = 1;  ///< -np (1 when not given)
};

/// Looks once. Throws JobError(exit_code::kLaunch) when the look fails, as
/// at the start of a job.
ElasticLook look_once(HostSource& source, int np);

/// An OCI WORKER's dry run: what it would register, where.
struct OciWorkerDryRun {
  std::string address;
  int slots = 0;
  std::string dir;
};

struct DryRunReport {
  /// The platform block ("platform" in JSON; its lines first in text).
  const platform::PlatformDescription* platform = nullptr;
  /// An OCI run's header (text only): platform::render_oci.
  std::optional<std::string> oci_header;
  /// A static job's placement and worker commands.
  const JobPlan* plan = nullptr;
  const Options* plan_options = nullptr;
  /// An mpirun job's dry run as spawn/mpi rendered it (text or JSON).
  std::optional<std::string> mpirun;
  /// An elastic job's look at its hosts.
  std::optional<ElasticLook> elastic;
  /// An OCI WORKER: what it would register.
  std::optional<OciWorkerDryRun> oci_worker;
  /// How workers on other hosts would start, when srun is involved
  /// (--launcher srun, or auto inside a Slurm allocation): "srun" for every
  /// other host, or the allocation's nodes that srun starts (ssh elsewhere).
  /// Text: one "launcher: ..." line after the body; JSON: "launcher".
  std::optional<std::string> launcher;
  std::vector<std::string> srun_nodes;
  /// How each host of the plan (or of the elastic look) would be reached:
  /// this machine, srun or SSH with its resolved settings (spawn/
  /// spawner_factory.h). Set for hvdrun's own launches (not mpirun's, not a
  /// platform's). Text: a section after the body when some host is not this
  /// machine; JSON: "reached".
  std::optional<std::vector<HostReach>> reach;
};

/// `spawners.reach` for each host, asked in parallel (each may resolve its
/// name, bounded in time).
std::vector<HostReach> reach_hosts(DefaultSpawnerFactory& spawners, const std::vector<HostSpec>& hosts);

/// The dry run's output, `format` Text or Json. Text: the platform block,
/// the OCI header, then the body (placement, mpirun command, elastic look
/// or OCI registration). JSON: the body's document with "platform" added
/// when there is a platform (a platform alone: {"platform": ...}).
std::string render_dry_run_report(const DryRunReport& report, DryRunFormat format);

}  // namespace hvd::launcher
