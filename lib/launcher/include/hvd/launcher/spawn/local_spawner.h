#pragma once
/// Starts workers on this machine: each under `hvdrun --agent` (agent.h)
/// with stdin a pipe from the launcher, stdout/stderr pipes read by a
/// reader thread, in its own process group.
#include "hvd/launcher/spawn/spawner.h"

#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

namespace hvd::launcher {

struct LocalSpawnerOptions {
  /// argv prefix that starts the agent, e.g. {"/usr/bin/hvdrun", "--agent"}.
  /// Empty: {self_executable(), "--agent"}.
  std::vector<std::string> agent_command;
  /// Passed to each agent as HVDRUN_KILL_GRACE_MS: how long a worker gets
  /// between SIGTERM and SIGKILL once the agent's stdin closes.
  std::chrono::milliseconds kill_grace{3000};
  /// PR_SET_PDEATHSIG for each agent: fires when the *thread* that launched
  /// it exits. 0 for agents launched from a short-lived thread (srun agents
  /// of other nodes, spawn/srun/srun_launch.h): the EOF on the agent's stdin
  /// when hvdrun goes away still stops them.
  int parent_death_signal = SIGTERM;
};

/// launch() must be called from a thread that outlives the workers (run_job
/// uses its own thread): agents get PR_SET_PDEATHSIG, which fires when the
/// *thread* that forked them exits. Output and exits are delivered from one
/// reader thread owned by the spawner.
std::unique_ptr<Spawner> make_local_spawner(const LocalSpawnerOptions& options);

/// The absolute path of the running hvdrun binary (/proc/self/exe).
std::string self_executable();

}  // namespace hvd::launcher
