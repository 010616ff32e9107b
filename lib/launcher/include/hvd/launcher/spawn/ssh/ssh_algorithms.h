#pragma once
/// ssh_config algorithm lists (Ciphers, MACs, KexAlgorithms,
/// HostKeyAlgorithms) applied to what libssh2 offers, with OpenSSH's
/// syntax (ssh_config(5)):
///
///   "a,b"    exactly these, in this order (each may be a pattern with `*`
///            and `?`, matched against what libssh2 offers; `!pattern`
///            removes what matches)
///   "+a,b"   the default list, then these
///   "-a,b"   the default list without these (patterns)
///   "^a,b"   these first, then the rest of the default list
///
/// hvdrun's default list is libssh2's (its preference order, everything it
/// offers). A name libssh2 does not offer is left out and reported; a list
/// that ends up empty is an error.
///
/// The host key algorithms are also ordered as OpenSSH orders them: the
/// types the known_hosts files already hold for the host come first (unless
/// HostKeyAlgorithms gives an explicit list), so a host whose ssh-ed25519
/// key was recorded by OpenSSH is checked against that key even though
/// libssh2 would otherwise ask for ECDSA first.
#include <string>
#include <vector>

namespace hvd::launcher::ssh {

enum class AlgorithmKind { Kex, HostKey, Cipher, Mac };

/// The ssh_config keyword: "KexAlgorithms", "HostKeyAlgorithms", "Ciphers", "MACs".
const char* algorithm_keyword(AlgorithmKind kind);

/// What libssh2 offers for `kind`, in its order of preference (its default).
const std::vector<std::string>& libssh2_algorithms(AlgorithmKind kind);

/// libssh2's version, for messages ("libssh2 1.10.0").
std::string libssh2_version_text();

struct AlgorithmList {
  std::vector<std::string> names;  // what to offer, in order; empty: nothing left (an error)
  /// Names (not patterns) written in the list that libssh2 does not offer,
  /// and patterns that match nothing.
  std::vector<std::string> not_offered;
  /// The list starts from the default (+, -, ^ or nothing written): the
  /// host key types known for the host may be moved first (OpenSSH does so
  /// only then).
  bool from_default = true;
  /// Set when the value cannot be used at all ("'!aes*': a negated name is
  /// only allowed in a list that starts with '-'"); `names` is then empty.
  std::string error;
};

/// Applies `spec` (the keyword's value; "" for none) to `available`
/// (libssh2's list for the kind).
AlgorithmList assemble_algorithms(const std::string& spec, const std::vector<std::string>& available);

/// The host key algorithm names of a known_hosts key type
/// (LIBSSH2_KNOWNHOST_KEY_* bits): "ssh-ed25519", "ecdsa-sha2-nistp256", ...
std::vector<std::string> host_key_algorithms_of(int knownhost_key_type);

/// `names` with the algorithms of `known_types` (LIBSSH2_KNOWNHOST_KEY_*)
/// first, each group keeping its order.
std::vector<std::string> prefer_known_types(const std::vector<std::string>& names, const std::vector<int>& known_types);

std::string join_names(const std::vector<std::string>& names, const char* sep = ",");
/// "a,b,,c" -> {a, b, c}.
std::vector<std::string> split_names(const std::string& s);

}  // namespace hvd::launcher::ssh
