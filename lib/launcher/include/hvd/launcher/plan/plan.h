#pragma once
/// A static job's plan (plan.cpp) and its --dry-run rendering (dry_run.cpp):
/// pure functions over Options and the HostSpecs of the job's host source
/// (discovery/choose.h). Declared here, in plan/, so that plan/ never
/// includes job/ (docs/design.md, "The launcher's layers").
#include <map>
#include <string>
#include <vector>

#include "hvd/launcher/hosts/hosts.h"
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/plan/job_plan.h"

namespace hvd::launcher {

/// Placement and worker environments over `hosts` (the job's host
/// source's first look, discovery/choose.h), in plan.cpp. Pure apart from
/// reading the launcher's environment and working directory. Throws
/// hvd::InvalidArgument with a one-line message on any usage problem.
JobPlan make_plan(const Options& options, const std::vector<HostSpec>& hosts);

/// Who checks -np against the hosts' slots: hvdrun (its own launch), or
/// mpirun (mpirun mode: as horovodrun does, hvdrun hands -np and -H to
/// mpirun, which refuses or -- with --oversubscribe -- runs more ranks
/// than slots).
enum class SlotCheck { Hvdrun, Mpirun };
JobPlan make_plan(const Options& options, const std::vector<HostSpec>& hosts, SlotCheck check);

/// make_plan with the launcher environment and working directory given
/// explicitly (tests and golden files use this for stable output).
JobPlan make_plan(const Options& options, const std::vector<HostSpec>& hosts,
                  const std::map<std::string, std::string>& launcher_env, const std::string& cwd,
                  SlotCheck check = SlotCheck::Hvdrun);

/// --dry-run output: a placement table plus each worker's exact command, or
/// JSON (dry_run.cpp).
std::string render_dry_run(const JobPlan& plan, const Options& options, DryRunFormat format);

/// The placement table of the text dry run (a header line, then one line
/// per rank: rank, host, local/cross rank and size); also what
/// `--mpi-args --display-map` prints before a job hvdrun starts itself.
std::string render_placement_table(const JobPlan& plan);

}  // namespace hvd::launcher
