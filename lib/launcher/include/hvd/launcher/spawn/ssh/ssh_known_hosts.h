#pragma once
/// Host-key verification against OpenSSH known_hosts files, with
/// OpenSSH's StrictHostKeyChecking semantics (HostKeyPolicy, ssh_config.h):
///
/// | key in the files        | yes     | accept-new           | no                         |
/// |-------------------------|---------|----------------------|----------------------------|
/// | recorded and equal      | accepted| accepted             | accepted                   |
/// | host not recorded       | refused | accepted + appended  | accepted + appended        |
/// | a different key recorded| refused | refused              | accepted, one warning line |
///
/// Every file is read, the GlobalKnownHostsFile ones too (a match in any
/// accepts); a new key is appended to the first UserKnownHostsFile (not
/// when it is /dev/null), creating it and its directory (0700) if needed.
/// The files are parsed line by line
/// (libssh2_knownhost_readline) so that one line libssh2 cannot parse
/// (@cert-authority, unknown key types) does not hide the rest, and they are
/// only ever appended to, never rewritten: the user's other entries and
/// comments survive byte for byte.
#include "hvd/launcher/hosts/ssh_config.h"

#include <string>
#include <vector>

struct _LIBSSH2_SESSION;

namespace hvd::launcher::ssh {

struct HostKeyCheck {
  std::string host;  // name as the user wrote it (starts every message)
  /// The name the key is recorded under: the HostName hvdrun connects to
  /// (as OpenSSH does); empty: `host`.
  std::string known_name;
  /// The name or address connected to, when known_name is something else
  /// (ssh_config HostKeyAlias): the ssh-keyscan hint scans it and renames
  /// the line.
  std::string address;
  int port = 22;  // non-22 ports are recorded as "[host]:port"
  /// The host is reached through ProxyJump (the last jump host's name) or a
  /// ProxyCommand: ssh-keyscan from here cannot reach it, so the hint
  /// scans from the jump host, or connects once with OpenSSH.
  std::string jump_host;
  bool proxy_command = false;
  std::vector<std::string> known_hosts_files;  // first: where new keys go
  /// GlobalKnownHostsFile: read like the others, never written.
  std::vector<std::string> global_known_hosts_files;
  HostKeyPolicy policy = HostKeyPolicy::AcceptNew;
  /// Where the policy comes from, for messages: "--ssh-strict-host-key-checking",
  /// "~/.ssh/config:3", "hvdrun's default".
  std::string policy_source = "hvdrun's default";
};

/// Verifies the server key of a session whose handshake is done. Throws
/// LaunchError with a one-line message on refusal.
void verify_host_key(_LIBSSH2_SESSION* session, const HostKeyCheck& check);

/// The key types (LIBSSH2_KNOWNHOST_KEY_*) the files record for the host,
/// in the order of LIBSSH2's list: what the handshake should ask for first
/// (OpenSSH's order_hostkeyalgs). Needs a session (libssh2's known-hosts
/// collections belong to one) but no handshake.
std::vector<int> recorded_key_types(_LIBSSH2_SESSION* session, const HostKeyCheck& check);

/// "SHA256:base64" fingerprint of the session's host key, as ssh prints it.
std::string host_key_fingerprint(_LIBSSH2_SESSION* session);

}  // namespace hvd::launcher::ssh
