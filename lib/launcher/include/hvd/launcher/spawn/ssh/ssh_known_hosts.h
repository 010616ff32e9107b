#pragma once
/// Host-key verification against an OpenSSH known_hosts file, with
/// OpenSSH's StrictHostKeyChecking semantics:
///  * key known and equal            -> accepted;
///  * host unknown, not strict       -> accepted and appended to the file
///                                      ("accept-new"), creating the file and
///                                      its directory (0700) if needed;
///  * host unknown, strict           -> refused, telling how to add it;
///  * a different key for the host   -> always refused, naming the file and
///                                      the line that holds the old key.
/// The file is parsed line by line (libssh2_knownhost_readline) so that one
/// line libssh2 cannot parse (@cert-authority, unknown key types) does not
/// hide the rest, and it is only ever appended to, never rewritten: the
/// user's other entries and comments survive byte for byte.
#include <string>

struct _LIBSSH2_SESSION;

namespace hvd::launcher::ssh {

struct HostKeyCheck {
  std::string host;  // name as the user wrote it
  int port = 22;  // non-22 ports are recorded as "[host]:port"
  std::string known_hosts_file;
  bool strict = false;
};

/// Verifies the server key of a session whose handshake is done. Throws
/// LaunchError with a one-line message on refusal.
void verify_host_key(_LIBSSH2_SESSION* session, const HostKeyCheck& check);

/// "SHA256:base64" fingerprint of the session's host key, as ssh prints it.
std::string host_key_fingerprint(_LIBSSH2_SESSION* session);

}  // namespace hvd::launcher::ssh
