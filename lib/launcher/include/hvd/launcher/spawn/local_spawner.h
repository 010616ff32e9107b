#pragma once
/// Starts a launch's workers on this machine through ONE agent
/// (`hvdrun-agent`, agent.h) for all of them: its stdin a socket from the
/// launcher, its stdout a pipe carrying every worker's output and exit
/// (agent_protocol.h), in its own process group. Under --launcher srun the
/// agent command is an `srun ... hvdrun-agent` step (spawn/srun/): one step
/// per node and launch.
#include "hvd/launcher/spawn/spawner.h"

#include <chrono>
#include <csignal>
#include <memory>
#include <string>
#include <vector>

namespace hvd::launcher {

struct LocalSpawnerOptions {
  /// argv that starts the agent, e.g. {"/usr/bin/hvdrun-agent"}.
  /// Empty: local_agent_path().
  std::vector<std::string> agent_command;
  /// Sent to the agent in its Hello: how long a worker gets between
  /// SIGTERM and SIGKILL once the agent's stdin closes.
  std::chrono::milliseconds kill_grace{3000};
  /// PR_SET_PDEATHSIG for the agent: fires when the *thread* that launched
  /// it exits. 0 for agents launched from a short-lived thread (srun agents
  /// of other nodes, spawn/srun/srun_launch.h): the EOF on the agent's stdin
  /// when hvdrun goes away still stops them.
  int parent_death_signal = SIGTERM;
  /// Names the agent's host in messages ("localhost", a Slurm node).
  std::string host = "localhost";
};

/// launch() must be called from a thread that outlives the workers (run_job
/// uses its own thread): the agent gets PR_SET_PDEATHSIG, which fires when
/// the *thread* that forked it exits. Output and exits are delivered from
/// one reader thread owned by the spawner. launch() may be called once.
std::unique_ptr<Spawner> make_local_spawner(const LocalSpawnerOptions& options);

/// The absolute path of the running hvdrun binary (/proc/self/exe).
std::string self_executable();

/// The agent beside the running hvdrun: <dir of self_executable()>/hvdrun-agent.
std::string local_agent_path();

}  // namespace hvd::launcher
