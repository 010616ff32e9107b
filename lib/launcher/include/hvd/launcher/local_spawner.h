#pragma once
/// Starts workers on this machine: each under `hvdrun --agent` (agent.h)
/// with stdin a pipe from the launcher, stdout/stderr pipes read by a
/// reader thread, in its own process group.
#include "hvd/launcher/spawner.h"

#include <memory>
#include <string>
#include <vector>

namespace hvd::launcher {

struct LocalSpawnerOptions {
  /// argv prefix that starts the agent, e.g. {"/usr/bin/hvdrun", "--agent"}.
  std::vector<std::string> agent_command;
};

std::unique_ptr<Spawner> make_local_spawner(const LocalSpawnerOptions& options);

/// The absolute path of the running hvdrun binary (/proc/self/exe).
std::string self_executable();

}  // namespace hvd::launcher
