#include "hvd/launcher/spawn/ssh/ssh_algorithms.h"

#include "hvd/common/error.h"

#include <libssh2.h>

#include <fmt/format.h>

#include <fnmatch.h>

#include <algorithm>
#include <array>
#include <mutex>

namespace hvd::launcher::ssh {

namespace {

int method_of(AlgorithmKind kind) {
  switch (kind) {
    case AlgorithmKind::Kex: return LIBSSH2_METHOD_KEX;
    case AlgorithmKind::HostKey: return LIBSSH2_METHOD_HOSTKEY;
    case AlgorithmKind::Cipher: return LIBSSH2_METHOD_CRYPT_CS;
    case AlgorithmKind::Mac: return LIBSSH2_METHOD_MAC_CS;
  }
  return LIBSSH2_METHOD_KEX;
}

bool matches(const std::string& name, const std::string& pattern) {
  // Algorithm names compare exactly (OpenSSH's match_pattern: case-sensitive).
  return ::fnmatch(pattern.c_str(), name.c_str(), 0) == 0;
}

void append_unique(std::vector<std::string>& out, const std::string& name) {
  if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
}

}  // namespace

const char* algorithm_keyword(AlgorithmKind kind) {
  switch (kind) {
    case AlgorithmKind::Kex: return "KexAlgorithms";
    case AlgorithmKind::HostKey: return "HostKeyAlgorithms";
    case AlgorithmKind::Cipher: return "Ciphers";
    case AlgorithmKind::Mac: return "MACs";
  }
  return "?";
}

const std::vector<std::string>& libssh2_algorithms(AlgorithmKind kind) {
  static std::once_flag once;
  static std::array<std::vector<std::string>, 4> lists;
  std::call_once(once, [] {
    libssh2_init(0);  // reference counted: harmless when already done
    LIBSSH2_SESSION* s = libssh2_session_init();
    if (s == nullptr) throw hvd::Error("libssh2_session_init failed (out of memory?)");
    for (AlgorithmKind k : {AlgorithmKind::Kex, AlgorithmKind::HostKey, AlgorithmKind::Cipher, AlgorithmKind::Mac}) {
      const char** algs = nullptr;
      const int n = libssh2_session_supported_algs(s, method_of(k), &algs);
      for (int i = 0; i < n; ++i) lists[static_cast<std::size_t>(k)].emplace_back(algs[i]);
      if (n > 0) libssh2_free(s, algs);
    }
    libssh2_session_free(s);
  });
  return lists[static_cast<std::size_t>(kind)];
}

std::string libssh2_version_text() {
  const char* v = libssh2_version(0);
  return std::string("libssh2 ") + (v != nullptr ? v : LIBSSH2_VERSION);
}

AlgorithmList assemble_algorithms(const std::string& spec, const std::vector<std::string>& available) {
  AlgorithmList out;
  if (spec.empty()) {
    out.names = available;
    return out;
  }
  const char op = spec[0];
  if (op == '-') {
    // The default without what the patterns match.
    const std::vector<std::string> drop = split_names(spec.substr(1));
    for (const auto& name : available) {
      const bool dropped =
          std::any_of(drop.begin(), drop.end(), [&](const std::string& p) { return matches(name, p); });
      if (!dropped) out.names.push_back(name);
    }
    return out;
  }
  std::vector<std::string> patterns;
  if (op == '+') {
    patterns = available;
    for (auto& p : split_names(spec.substr(1))) patterns.push_back(std::move(p));
  } else if (op == '^') {
    patterns = split_names(spec.substr(1));
    for (const auto& name : available) patterns.push_back(name);
  } else {
    patterns = split_names(spec);
    out.from_default = false;
  }
  for (const auto& p : patterns) {
    if (p[0] == '!') {
      // OpenSSH refuses negation outside a '-' list too.
      out.error = fmt::format("'{}': a negated name is only allowed in a list that starts with '-'", p);
      out.names.clear();
      return out;
    }
    bool any = false;
    for (const auto& name : available) {
      if (matches(name, p)) {
        append_unique(out.names, name);
        any = true;
      }
    }
    if (!any) append_unique(out.not_offered, p);
  }
  return out;
}

std::vector<std::string> host_key_algorithms_of(int knownhost_key_type) {
  switch (knownhost_key_type) {
    case LIBSSH2_KNOWNHOST_KEY_ED25519: return {"ssh-ed25519"};
    case LIBSSH2_KNOWNHOST_KEY_ECDSA_256: return {"ecdsa-sha2-nistp256"};
    case LIBSSH2_KNOWNHOST_KEY_ECDSA_384: return {"ecdsa-sha2-nistp384"};
    case LIBSSH2_KNOWNHOST_KEY_ECDSA_521: return {"ecdsa-sha2-nistp521"};
    case LIBSSH2_KNOWNHOST_KEY_SSHRSA: return {"rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"};
    case LIBSSH2_KNOWNHOST_KEY_SSHDSS: return {"ssh-dss"};
    default: return {};
  }
}

std::vector<std::string> prefer_known_types(const std::vector<std::string>& names, const std::vector<int>& known_types) {
  std::vector<std::string> known;
  for (int t : known_types) {
    for (auto& a : host_key_algorithms_of(t)) known.push_back(std::move(a));
  }
  std::vector<std::string> first, rest;
  for (const auto& n : names) {
    (std::find(known.begin(), known.end(), n) != known.end() ? first : rest).push_back(n);
  }
  first.insert(first.end(), rest.begin(), rest.end());
  return first;
}

std::vector<std::string> split_names(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = s.find(',', start);
    std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (!item.empty()) out.push_back(std::move(item));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string join_names(const std::vector<std::string>& names, const char* sep) {
  std::string out;
  for (const auto& n : names) {
    if (!out.empty()) out += sep;
    out += n;
  }
  return out;
}

}  // namespace hvd::launcher::ssh
