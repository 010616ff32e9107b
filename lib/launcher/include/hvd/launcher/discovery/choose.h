#pragma once
/// Choosing where a job's hosts come from (PRRTE's ras selection): the one
/// place that reads -H, --hostfile, --host-discovery-script,
/// --kubernetes-selector and --hosts-from together and returns the job's
/// HostSource. Static jobs take the source's first look as their hosts;
/// elastic jobs hand the source to the ElasticRunner. OCI Data Science runs
/// (job/oci_job.cpp) use the shared directory's source
/// (discovery/shared_dir/) and are decided before the Options exist.
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hvd/launcher/discovery/host_source.h"
#include "hvd/launcher/discovery/platform/platform.h"
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/process/environment.h"

namespace hvd::launcher {

/// The flag that names the hosts explicitly ("-H/--hosts", "--hostfile",
/// "--host-discovery-script", "--kubernetes-selector"), or "" when none
/// does (then a platform's hosts may be used, or localhost:np).
std::string explicit_host_flag(const Options& options);

/// The outcome of choose_host_source.
struct HostSourceChoice {
  /// Where the job's hosts come from; never null.
  std::unique_ptr<HostSource> source;
  /// The options the job runs with: with a platform's -np, interface and
  /// custom MPI options merged in (platform::apply_platform).
  Options options;
  /// Set when a platform's hosts are used: its description, which says this
  /// machine's role (leader, follower, unranked).
  std::optional<platform::PlatformDescription> platform;
  /// This machine is a platform job's follower (not the leader).
  bool follower = false;
  /// Lines for the caller to log, at info and warning level.
  std::vector<std::string> info;
  std::vector<std::string> warnings;
};

/// The job's host source, in this order:
///  * a platform's hosts (--hosts-from; platform::apply_platform decides);
///  * --kubernetes-selector: the pods (a watch, unless --dry-run: one list);
///  * --host-discovery-script: the script, run once per look;
///  * -H, else --hostfile (the command line refuses both; horovodrun reads
///    the hostfile only when no -H is given), else horovodrun's default
///    localhost:<np> (1 without -np in an elastic job).
/// Reads the machine only through `env` and the files the flags name.
/// Throws InvalidArgument (one line) for a malformed -H or hostfile, a
/// Kubernetes configuration that cannot be used, a platform contradiction,
/// or -np left out where no platform gives the job its slots.
HostSourceChoice choose_host_source(const Options& options, const Environment& env);

}  // namespace hvd::launcher
