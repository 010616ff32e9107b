#pragma once
/// Which keys public-key authentication tries, in OpenSSH's order
/// (sshconnect2.c, pubkey_prepare):
///
///  1. the identity files' keys that ssh-agent holds, used through the
///     agent (in the agent's order): a passphrase-protected key loaded in
///     the agent works, and it is tried before the agent's other keys, so
///     a server's MaxAuthTries (6 by default) is not spent on them first;
///  2. the agent's other keys, unless IdentitiesOnly (or -i) says no;
///  3. the identity files the agent does not hold, read from disk.
///
/// An identity file's public key comes from FILE.pub, else from the private
/// key file itself when it is in OpenSSH's own format (whose public key is
/// stored unencrypted, as OpenSSH reads it), else from FILE itself when it
/// is a public key (`IdentityFile ~/.ssh/key.pub` selects an agent's key
/// whose private half is nowhere on disk).
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher::ssh {

/// The public key blob (the SSH wire encoding) of an identity file;
/// nullopt when neither FILE.pub nor the file itself tells it.
std::optional<std::string> identity_public_blob(const std::string& path);

struct IdentityFile {
  std::string path;
  std::optional<std::string> blob;  // identity_public_blob
};

struct AuthStep {
  enum class Kind { Agent, File } kind = Kind::File;
  std::size_t agent_index = 0;  // Agent: which of the agent's keys
  std::size_t file_index = 0;  // File, or the file an Agent step stands for (when `for_file`)
  bool for_file = false;  // Agent: the agent's copy of an identity file
};

/// The order above. `agent_blobs`: the agent's keys in its order (empty: no
/// agent); `agent_others`: whether the agent's keys that are no identity
/// file's are tried (not under IdentitiesOnly or -i).
std::vector<AuthStep> order_identities(const std::vector<std::string>& agent_blobs,
                                       const std::vector<IdentityFile>& files, bool agent_others);

}  // namespace hvd::launcher::ssh
