#pragma once
/// Starts workers on remote hosts over SSH (libssh2): one SSH session per
/// host, opened in parallel, carrying one channel per worker. Each channel
/// runs the remote agent (`<agent_command> ` e.g. "/usr/bin/hvdrun --agent")
/// and sends it the worker spec on stdin (agent.h), so the environment never
/// appears on a remote command line. A closed channel or lost connection
/// makes the remote agent kill its worker.
#include "hvd/launcher/spawner.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

struct SshSpawnerOptions {
  std::optional<int> port;                    // -p; default 22 (or ~/.ssh/config? no: 22)
  std::optional<std::string> identity_file;   // -i; else default keys + ssh-agent
  std::optional<std::string> user;            // default: $USER / getpwuid
  bool strict_host_key_checking = false;      // false: accept-new semantics
  std::string known_hosts_file;               // default ~/.ssh/known_hosts
  std::vector<std::string> agent_command;     // remote argv prefix for the agent
  /// Keepalive probe interval; a host silent for 3 intervals is lost.
  std::chrono::seconds keepalive{5};
  bool verbose = false;
};

std::unique_ptr<Spawner> make_ssh_spawner(const SshSpawnerOptions& options);

}  // namespace hvd::launcher
