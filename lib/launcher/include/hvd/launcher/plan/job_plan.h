#pragma once
/// The job plan: hosts, slot assignments and the exact worker specs.
/// Produced by pure functions (hosts.h, placement.h, worker_env.h) and
/// consumed by spawners. Plain data.
#include <map>
#include <string>
#include <vector>

#include "hvd/launcher/hosts/hosts.h"

namespace hvd::launcher {

/// One rank's place, as horovodrun's get_host_assignments computes it.
struct SlotAssignment {
  std::string hostname;
  int rank = 0;
  int local_rank = 0;
  int local_size = 0;
  int cross_rank = 0;  // index of this host among hosts with a slot at local_rank
  int cross_size = 0;  // number of hosts with a slot at local_rank
};

/// What one worker is started with.
struct WorkerSpec {
  SlotAssignment slot;
  std::vector<std::string> argv;  // the worker command, untouched
  std::map<std::string, std::string> env;  // the complete environment the worker gets
  std::string cwd;  // the launcher's working directory
  /// How reports name this worker when it is not one rank ("mpirun": the
  /// whole job under mpirun); empty: "rank N on HOST".
  std::string label;
};

/// The whole static job: the hosts that run a rank, in the order given, and
/// one spec per rank, ordered by rank. Rendezvous variables (store address,
/// secret) are added by run_job once the store is listening; they are not
/// part of the plan.
struct JobPlan {
  std::vector<HostSpec> hosts;
  std::vector<WorkerSpec> workers;
  /// The ranks each of `hosts` runs, ascending, index for index with
  /// `hosts`: the plan's one grouping of workers by host, made by make_plan
  /// with the placement; the static job launches host by host from it.
  std::vector<std::vector<int>> host_ranks;
};

}  // namespace hvd::launcher
