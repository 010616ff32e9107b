#include "hvd/launcher/spawn/ssh/ssh_known_hosts.h"

#include "hvd/common/error.h"
#include "hvd/launcher/spawn/spawner.h"

#include <fcntl.h>
#include <libssh2.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <vector>

namespace hvd::launcher::ssh {

namespace {

struct KeyType {
  int knownhost_bits;  // LIBSSH2_KNOWNHOST_KEY_*
  const char* name;  // as OpenSSH writes it
};

KeyType key_type(int hostkey_type) {
  switch (hostkey_type) {
    case LIBSSH2_HOSTKEY_TYPE_RSA: return {LIBSSH2_KNOWNHOST_KEY_SSHRSA, "ssh-rsa"};
    case LIBSSH2_HOSTKEY_TYPE_DSS: return {LIBSSH2_KNOWNHOST_KEY_SSHDSS, "ssh-dss"};
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_256: return {LIBSSH2_KNOWNHOST_KEY_ECDSA_256, "ecdsa-sha2-nistp256"};
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_384: return {LIBSSH2_KNOWNHOST_KEY_ECDSA_384, "ecdsa-sha2-nistp384"};
    case LIBSSH2_HOSTKEY_TYPE_ECDSA_521: return {LIBSSH2_KNOWNHOST_KEY_ECDSA_521, "ecdsa-sha2-nistp521"};
    case LIBSSH2_HOSTKEY_TYPE_ED25519: return {LIBSSH2_KNOWNHOST_KEY_ED25519, "ssh-ed25519"};
    default: return {LIBSSH2_KNOWNHOST_KEY_UNKNOWN, "unknown"};
  }
}

using KnownHosts = std::unique_ptr<LIBSSH2_KNOWNHOSTS, decltype(&libssh2_knownhost_free)>;

KnownHosts new_collection(LIBSSH2_SESSION* session) {
  LIBSSH2_KNOWNHOSTS* kh = libssh2_knownhost_init(session);
  if (kh == nullptr) throw hvd::Error("libssh2_knownhost_init failed (out of memory?)");
  return KnownHosts(kh, &libssh2_knownhost_free);
}

std::vector<std::string> read_lines(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

/// Adds one known_hosts line to `kh`; false if libssh2 cannot parse it.
bool add_line(LIBSSH2_KNOWNHOSTS* kh, std::string line) {
  line += '\n';
  return libssh2_knownhost_readline(kh, line.data(), line.size(), LIBSSH2_KNOWNHOST_FILE_OPENSSH) == 0;
}

std::string base64_nopad(const unsigned char* data, std::size_t len) {
  static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < len; i += 3) {
    uint32_t v = static_cast<uint32_t>(data[i]) << 16;
    if (i + 1 < len) v |= static_cast<uint32_t>(data[i + 1]) << 8;
    if (i + 2 < len) v |= data[i + 2];
    out += tbl[(v >> 18) & 63];
    out += tbl[(v >> 12) & 63];
    if (i + 1 < len) out += tbl[(v >> 6) & 63];
    if (i + 2 < len) out += tbl[v & 63];
  }
  return out;
}

std::string dir_of(const std::string& path) {
  auto pos = path.rfind('/');
  if (pos == std::string::npos) return ".";
  return pos == 0 ? "/" : path.substr(0, pos);
}

/// Appends `line` to the file (never rewrites it). A process-wide mutex
/// orders our own threads; flock orders concurrent hvdrun processes.
void append_line(const std::string& path, const std::string& line) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  const std::string dir = dir_of(path);
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw hvd::IoError(fmt::format("cannot create {}: {}", dir, std::strerror(errno)));
  }
  int fd = ::open(path.c_str(), O_RDWR | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throw hvd::IoError(fmt::format("cannot open {}: {}", path, std::strerror(errno)));
  UniqueFd guard(fd);
  ::flock(fd, LOCK_EX);
  std::string text;
  // Keep the file line-structured even if its last line lacks a newline.
  off_t size = ::lseek(fd, 0, SEEK_END);
  if (size > 0) {
    char last = '\n';
    if (::pread(fd, &last, 1, size - 1) == 1 && last != '\n') text += '\n';
  }
  text += line;
  if (text.empty() || text.back() != '\n') text += '\n';
  write_all(fd, text.data(), text.size());
  ::flock(fd, LOCK_UN);
}

}  // namespace

std::string host_key_fingerprint(LIBSSH2_SESSION* session) {
  const char* hash = libssh2_hostkey_hash(session, LIBSSH2_HOSTKEY_HASH_SHA256);
  if (hash == nullptr) return "SHA256:?";
  return "SHA256:" + base64_nopad(reinterpret_cast<const unsigned char*>(hash), 32);
}

namespace {

std::string join_files(const std::vector<std::string>& files) {
  std::string out;
  for (const auto& f : files) out += (out.empty() ? "" : ", ") + f;
  return out;
}

}  // namespace

namespace {

/// Every file the check reads: the user's, then the global ones.
std::vector<std::string> files_read(const HostKeyCheck& check) {
  std::vector<std::string> files = check.known_hosts_files;
  files.insert(files.end(), check.global_known_hosts_files.begin(), check.global_known_hosts_files.end());
  return files;
}

/// The files for messages: the user's, and the global ones that exist.
std::vector<std::string> files_named(const HostKeyCheck& check) {
  std::vector<std::string> files = check.known_hosts_files;
  for (const auto& f : check.global_known_hosts_files) {
    if (::access(f.c_str(), F_OK) == 0) files.push_back(f);
  }
  return files;
}

std::string recorded_name_of(const HostKeyCheck& check) {
  const std::string& name = check.known_name.empty() ? check.host : check.known_name;
  return check.port == 22 ? name : fmt::format("[{}]:{}", name, check.port);
}

}  // namespace

std::vector<int> recorded_key_types(LIBSSH2_SESSION* session, const HostKeyCheck& check) {
  const std::string& name = check.known_name.empty() ? check.host : check.known_name;
  KnownHosts all = new_collection(session);
  for (const auto& file : files_read(check)) {
    for (const auto& line : read_lines(file)) add_line(all.get(), line);
  }
  // libssh2 answers MISMATCH when the host is recorded with a key of the
  // asked type that differs from the one given: a key no entry can hold
  // tells whether the type is recorded at all (hashed entries included).
  static const char kNoKey[] = "\x01";
  std::vector<int> types;
  for (int t : {LIBSSH2_KNOWNHOST_KEY_ECDSA_256, LIBSSH2_KNOWNHOST_KEY_ECDSA_384, LIBSSH2_KNOWNHOST_KEY_ECDSA_521,
                LIBSSH2_KNOWNHOST_KEY_ED25519, LIBSSH2_KNOWNHOST_KEY_SSHRSA, LIBSSH2_KNOWNHOST_KEY_SSHDSS}) {
    const int mask = LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | t;
    const int rc = libssh2_knownhost_checkp(all.get(), name.c_str(), check.port, kNoKey, 1, mask, nullptr);
    if (rc == LIBSSH2_KNOWNHOST_CHECK_MISMATCH || rc == LIBSSH2_KNOWNHOST_CHECK_MATCH) types.push_back(t);
  }
  return types;
}

void verify_host_key(LIBSSH2_SESSION* session, const HostKeyCheck& check) {
  // One check at a time in this process: hosts connect in parallel, and two
  // connections to one new host (a jump host every worker goes through) must
  // record its key once -- the second check reads the file after the first
  // wrote it.
  static std::mutex check_mu;
  std::lock_guard<std::mutex> check_lock(check_mu);
  const std::string& host = check.host;
  const std::string& name = check.known_name.empty() ? check.host : check.known_name;
  if (check.known_hosts_files.empty())
    throw LaunchError(host, fmt::format("{}: no known_hosts file to check the host key against", host));
  const std::vector<std::string> files = files_read(check);
  const std::vector<std::string> named = files_named(check);
  std::size_t key_len = 0;
  int raw_type = 0;
  const char* key = libssh2_session_hostkey(session, &key_len, &raw_type);
  if (key == nullptr) throw LaunchError(host, fmt::format("{}: the server sent no host key", host));
  const KeyType type = key_type(raw_type);
  const int mask = LIBSSH2_KNOWNHOST_TYPE_PLAIN | LIBSSH2_KNOWNHOST_KEYENC_RAW | type.knownhost_bits;
  const std::string fingerprint = host_key_fingerprint(session);
  const std::string recorded_name = recorded_name_of(check);

  std::vector<std::vector<std::string>> lines;
  KnownHosts all = new_collection(session);
  for (const auto& file : files) {
    lines.push_back(read_lines(file));
    for (std::size_t i = 0; i < lines.back().size(); ++i) {
      if (!add_line(all.get(), lines.back()[i])) {
        spdlog::debug("{}:{}: line not understood by libssh2, ignored", file, i + 1);
      }
    }
  }
  int rc = libssh2_knownhost_checkp(all.get(), name.c_str(), check.port, key, key_len, mask, nullptr);
  if (rc == LIBSSH2_KNOWNHOST_CHECK_MATCH) {
    spdlog::debug("{}: host key {} matches {}", host, type.name, join_files(named));
    return;
  }
  if (rc == LIBSSH2_KNOWNHOST_CHECK_MISMATCH) {
    // Find the offending line: check each line on its own.
    std::string where = join_files(named);
    std::string where_file = files.front();
    bool found = false;
    for (std::size_t f = 0; f < files.size() && !found; ++f) {
      for (std::size_t i = 0; i < lines[f].size() && !found; ++i) {
        KnownHosts one = new_collection(session);
        if (!add_line(one.get(), lines[f][i])) continue;
        if (libssh2_knownhost_checkp(one.get(), name.c_str(), check.port, key, key_len, mask, nullptr) ==
            LIBSSH2_KNOWNHOST_CHECK_MISMATCH) {
          where = fmt::format("{}:{}", files[f], i + 1);
          where_file = files[f];
          found = true;
        }
      }
    }
    if (check.policy == HostKeyPolicy::No) {
      spdlog::warn(
          "{}: the {} host key ({}) differs from the one recorded in {}; accepted because StrictHostKeyChecking is "
          "no ({}), as expected when a pod or host was recreated",
          host, type.name, fingerprint, where, check.policy_source);
      return;
    }
    throw LaunchError(
        host,
        fmt::format("{}: REFUSED: the {} host key ({}) differs from the one recorded in {} (StrictHostKeyChecking "
                    "{}, {}) -- someone may be intercepting the connection; if the host was reinstalled or "
                    "recreated, remove the old key with ssh-keygen -R {} -f {} (or set StrictHostKeyChecking no "
                    "for this host in ~/.ssh/config)",
                    host, type.name, fingerprint, where, policy_name(check.policy), check.policy_source,
                    check.port == 22 ? name : fmt::format("'{}'", recorded_name), where_file));
  }
  if (rc != LIBSSH2_KNOWNHOST_CHECK_NOTFOUND) {
    throw LaunchError(host, fmt::format("{}: could not check the host key against {}", host, join_files(named)));
  }
  const std::string& target = check.known_hosts_files.front();
  if (check.policy == HostKeyPolicy::Yes) {
    // Under a HostKeyAlias the scanned line names the address: rename it.
    const std::string file = target == "/dev/null" ? "~/.ssh/known_hosts" : target;
    std::string add;
    if (check.proxy_command) {
      // Only the ProxyCommand reaches the host: let OpenSSH run it once.
      add = fmt::format("ssh -o StrictHostKeyChecking=accept-new -o UserKnownHostsFile={} {} true", file, host);
    } else {
      // Through a jump host, the scan runs there.
      const std::string via = check.jump_host.empty() ? "" : fmt::format("ssh {} ", check.jump_host);
      add = check.address.empty() || check.address == name
                ? fmt::format("{}ssh-keyscan -p {} {} >> {}", via, check.port, name, file)
                : fmt::format("{}ssh-keyscan -p {} {} | sed 's/^[^ ]*/{}/' >> {}", via, check.port, check.address,
                              recorded_name, file);
    }
    throw LaunchError(
        host, fmt::format("{}: REFUSED: the {} host key ({}) of {} is not in {} and StrictHostKeyChecking is "
                          "yes ({}); add it with: {}",
                          host, type.name, fingerprint, recorded_name, join_files(named), check.policy_source, add));
  }
  if (type.knownhost_bits == LIBSSH2_KNOWNHOST_KEY_UNKNOWN) {
    throw LaunchError(host, fmt::format("{}: host key of an unknown type; cannot record it in {}", host, target));
  }
  if (target == "/dev/null") {
    spdlog::debug("{}: accepted the new {} host key ({}) without recording it (UserKnownHostsFile /dev/null)", host,
                  type.name, fingerprint);
    return;
  }
  // accept-new / no: record it.
  KnownHosts fresh = new_collection(session);
  libssh2_knownhost* entry = nullptr;
  if (libssh2_knownhost_addc(fresh.get(), recorded_name.c_str(), nullptr, key, key_len, nullptr, 0, mask, &entry) !=
      0) {
    throw LaunchError(host, fmt::format("{}: could not record the host key", host));
  }
  std::vector<char> buf(16384);
  std::size_t out_len = 0;
  if (libssh2_knownhost_writeline(fresh.get(), entry, buf.data(), buf.size(), &out_len,
                                  LIBSSH2_KNOWNHOST_FILE_OPENSSH) != 0) {
    throw LaunchError(host, fmt::format("{}: could not format the host key for {}", host, target));
  }
  try {
    append_line(target, std::string(buf.data(), out_len));
  } catch (const hvd::Error& e) {
    throw LaunchError(host, fmt::format("{}: cannot record the new host key: {}", host, e.what()));
  }
  spdlog::warn("{}: permanently added the {} host key ({}) of {} to {} (StrictHostKeyChecking {}, {})", host, type.name,
               fingerprint, recorded_name, target, policy_name(check.policy), check.policy_source);
}

}  // namespace hvd::launcher::ssh
