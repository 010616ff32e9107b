#pragma once
/// Starts workers on remote hosts over SSH (libssh2): one SSH session per
/// host, opened in parallel, carrying ONE channel per host. The channel runs
/// the host's agent (`hvdrun-agent`, agent.h) and speaks the agent protocol
/// over its stdin and stdout (agent_protocol.h: the workers, their output,
/// their exits, signals), so the environment never appears on a remote
/// command line. A closed channel or lost connection makes the remote agent
/// kill every worker's group.
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
///  * The remote command is `agent_command` shell-quoted (default:
///    hvdrun-agent beside this binary, local_agent_path()). When its program
///    is an absolute path that does not exist on a host, `hvdrun-agent` from
///    that host's PATH is used instead (one log line says so); with neither,
///    launch() fails naming both. $HVDRUN_REMOTE_AGENT, when set, is used
///    verbatim instead.
///  * Each host's settings come from the OpenSSH client configuration
///    (ssh_config.h: ~/.ssh/config, then /etc/ssh/ssh_config); the options
///    below that are set (hvdrun's command-line flags) win over it.
///  * cancel_launch() (another thread, e.g. on SIGINT) makes a launch()
///    that is still connecting throw within about 100 ms.
#include "hvd/launcher/spawn/spawner.h"
#include "hvd/launcher/spawn/ssh/ssh_session.h"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

struct SshSpawnerOptions {
  std::optional<int> port;  // -p; else ssh_config Port, else 22
  std::optional<std::string> identity_file;  // -i; else ssh-agent + ssh_config IdentityFile or default keys
  std::optional<std::string> user;  // else ssh_config User, else $USER / getpwuid
  /// --ssh-strict-host-key-checking: StrictHostKeyChecking yes whatever the
  /// configuration says. false: ssh_config's value, else accept-new.
  bool strict_host_key_checking = false;
  /// Set: the only known_hosts file (tests). Empty: ssh_config's
  /// UserKnownHostsFile, else <home>/.ssh/known_hosts.
  std::string known_hosts_file;
  /// OpenSSH client configuration files, read in order; unset:
  /// <home>/.ssh/config then /etc/ssh/ssh_config. Empty: none.
  std::optional<std::vector<std::string>> config_files;
  std::vector<std::string> agent_command;  // remote argv of the agent; empty: local_agent_path()
  /// Sent to each host's agent in its Hello: how long a worker gets between
  /// SIGTERM and SIGKILL once the agent's stdin closes (--kill-grace-ms).
  std::chrono::milliseconds kill_grace{3000};
  /// Liveness probe interval (TCP keepalive; ssh::set_liveness_checks): a
  /// vanished host is declared lost after about 4 intervals.
  std::chrono::seconds keepalive{5};
  bool verbose = false;
  /// Home directory for ~/.ssh defaults; empty: $HOME, else the passwd entry.
  std::string home;
};

std::unique_ptr<Spawner> make_ssh_spawner(const SshSpawnerOptions& options);

/// How launch() would reach `host`, resolved as it resolves it (the flags,
/// then ssh_config) without connecting: --dry-run's "reached" section.
/// `options` is unset and `error` holds launch()'s line for this host when
/// the configuration does not let it be reached (a bad Port, a ProxyJump
/// loop, a missing BindInterface, an algorithm list left empty, ...).
/// Configuration warnings are logged as launch() logs them.
struct SshRoute {
  std::string host;
  std::optional<ssh::SessionOptions> options;
  std::string error;
};
SshRoute describe_ssh_route(const SshSpawnerOptions& options, const std::string& host);

}  // namespace hvd::launcher
