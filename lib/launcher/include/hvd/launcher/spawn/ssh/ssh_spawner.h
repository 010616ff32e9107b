#pragma once
/// Starts workers on remote hosts over SSH (libssh2): one SSH session per
/// host, opened in parallel, carrying one channel per worker. Each channel
/// runs the remote agent (`<agent_command> ` e.g. "/usr/bin/hvdrun --agent")
/// and sends it the worker spec on stdin (agent.h), so the environment never
/// appears on a remote command line. A closed channel or lost connection
/// makes the remote agent kill its worker.
///
/// Contract details beyond spawner.h (see docs/ssh.md):
///  * launch() connects to all hosts in parallel (a thread per host) and
///    starts no worker anywhere unless every host connected, verified and
///    authenticated; if one fails, the others are closed and the LaunchError
///    of the first failing host (in the order given) is thrown. No events are
///    delivered for a launch that threw.
///  * After launch() returns, one I/O thread per host owns that host's
///    session (libssh2 sessions are not thread-safe); signal() only queues a
///    control byte for it.
///  * A host that stops answering (TCP keepalive: about 4 keepalive
///    intervals) or whose connection fails is lost: each of its running workers gets on_exit
///    with status 255 and lost_reason "SSH connection to <host> lost: ...".
///  * shutdown() closes every channel (the remote agents then kill their
///    workers), and delivers on_exit (status 255, lost_reason "shut down")
///    for workers that had not exited yet, from the I/O threads, before it
///    returns -- do not hold a lock that on_exit needs while calling it.
///  * The remote command is `agent_command` shell-quoted, or verbatim the
///    value of $HVDRUN_REMOTE_AGENT when that is set (for hosts where hvdrun
///    lives at another path); with neither, this binary's own path + --agent.
#include "hvd/launcher/spawn/spawner.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

struct SshSpawnerOptions {
  std::optional<int> port;  // -p; default 22 (or ~/.ssh/config? no: 22)
  std::optional<std::string> identity_file;  // -i; else default keys + ssh-agent
  std::optional<std::string> user;  // default: $USER / getpwuid
  bool strict_host_key_checking = false;  // false: accept-new semantics
  std::string known_hosts_file;  // empty: <home>/.ssh/known_hosts
  std::vector<std::string> agent_command;  // remote argv prefix for the agent
  /// Liveness probe interval (TCP keepalive; ssh::set_liveness_checks): a
  /// vanished host is declared lost after about 4 intervals.
  std::chrono::seconds keepalive{5};
  bool verbose = false;
  /// Home directory for ~/.ssh defaults; empty: $HOME, else the passwd entry.
  std::string home;
};

std::unique_ptr<Spawner> make_ssh_spawner(const SshSpawnerOptions& options);

}  // namespace hvd::launcher
