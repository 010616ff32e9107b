#pragma once
/// What carries an SSH connection that is not a direct TCP connection
/// (ssh_config ProxyCommand and ProxyJump). Either way the SSH session gets
/// one end of a socketpair, so libssh2 and the spawner's poll() loops see a
/// socket as they would for a direct connection:
///  * ProxyCommand: the command's stdin and stdout are the other end;
///  * ProxyJump: a direct-tcpip channel of an SSH session with the jump host,
///    relayed to the other end by a thread of its own (that thread alone
///    uses the jump host's session, shared by every host behind it).
#include "hvd/common/io.h"

#include <atomic>
#include <memory>
#include <string>

namespace hvd::launcher::ssh {

class Session;

class Proxy {
 public:
  virtual ~Proxy() = default;
  /// Why the proxy stopped carrying the connection, in words that follow
  /// "<host>: " ("its ProxyCommand exited with code 255", "jump host
  /// bastion: connection closed by the remote host"); "" while it works.
  /// `wait`: give a proxy that is ending a moment (up to 1 s) to say why.
  virtual std::string problem(bool wait = false) = 0;
  /// Stops it (bounded: about a second at most) and releases what it
  /// holds. Idempotent; the destructor calls it.
  virtual void stop() = 0;
};

/// Runs `command` as OpenSSH runs a ProxyCommand: `$SHELL -c "exec
/// <command>"` (/bin/sh without $SHELL), stdin and stdout one end of a
/// socketpair whose other end is returned in `connection`, stderr hvdrun's.
/// It runs in a process group of its own: a Ctrl-C on the terminal must not
/// cut the connection before hvdrun has stopped the workers through it.
/// stop() sends SIGTERM to its group, SIGKILL after 1 s, and reaps it.
/// Throws LaunchError ("<host>: ProxyCommand could not be started: ...").
std::unique_ptr<Proxy> start_proxy_command(const std::string& host, const std::string& command, UniqueFd* connection);

/// Connects to `to_host`:`to_port` through the jump host `jump` (ssh_config
/// ProxyJump) before `deadline`: a direct-tcpip channel of an SSH session
/// with the jump host, relayed to a socketpair whose other end is returned
/// in `connection`. Hosts behind one jump host share one session with it
/// (one login, whatever the number of hosts: a bastion's MaxStartups
/// counts concurrent unauthenticated connections), opened by the first
/// host that needs it; hosts arriving meanwhile wait for it, and share its
/// failure. libssh2 opens one channel at a time per session: while an open
/// has been pending for 2 s (a target the jump host cannot reach), the
/// next host opens a session of its own. The session is closed when the
/// last host's proxy is stopped. Throws LaunchError ("<host>: jump host
/// <jump>: ...", "<host>: jump host <jump> could not connect to
/// <to_host>:<to_port> (...)").
struct SessionOptions;
std::unique_ptr<Proxy> connect_through_jump_host(const std::string& host, const SessionOptions& jump,
                                                 const std::string& to_host, int to_port, Deadline deadline,
                                                 const std::atomic<bool>* cancel, UniqueFd* connection);

}  // namespace hvd::launcher::ssh
