// Key order for public-key authentication (contract in ssh_identities.h).
#include "hvd/launcher/spawn/ssh/ssh_identities.h"

#include "hvd/common/text.h"

#include <cstdint>
#include <fstream>
#include <sstream>

namespace hvd::launcher::ssh {

namespace {

constexpr std::size_t kMaxKeyFile = 1 << 20;  // no identity file is larger

std::optional<std::string> read_small(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(kMaxKeyFile + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  const auto n = static_cast<std::size_t>(in.gcount());
  if (n > kMaxKeyFile) return std::nullopt;
  text.resize(n);
  return text;
}

/// "ssh-ed25519 AAAA... comment" -> the decoded blob.
std::optional<std::string> blob_of_public_line(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string type, b64;
    if (!(words >> type >> b64) || type.empty() || type[0] == '#') continue;
    return hvd::base64_decode(b64);
  }
  return std::nullopt;
}

/// An SSH string (uint32 length, bytes) at `pos`; advances it.
std::optional<std::string> read_string(const std::string& buf, std::size_t& pos) {
  if (pos > buf.size() || buf.size() - pos < 4) return std::nullopt;
  const auto b = [&](std::size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(buf[pos + i])); };
  const uint32_t len = (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
  pos += 4;
  if (len > buf.size() - pos) return std::nullopt;
  std::string s = buf.substr(pos, len);
  pos += len;
  return s;
}

/// The first public key of an "openssh-key-v1" private key file (PROTOCOL.key):
/// magic, cipher, kdf, kdf options, key count, then the public keys in the
/// clear -- even when the private part is encrypted.
std::optional<std::string> blob_of_openssh_private(const std::string& text) {
  static const std::string begin = "-----BEGIN OPENSSH PRIVATE KEY-----";
  static const std::string end = "-----END OPENSSH PRIVATE KEY-----";
  const std::size_t b = text.find(begin);
  if (b == std::string::npos) return std::nullopt;
  const std::size_t e = text.find(end, b);
  if (e == std::string::npos) return std::nullopt;
  std::optional<std::string> raw = hvd::base64_decode(text.substr(b + begin.size(), e - b - begin.size()));
  if (!raw) return std::nullopt;
  static const std::string magic("openssh-key-v1\0", 15);
  if (raw->compare(0, magic.size(), magic) != 0) return std::nullopt;
  std::size_t pos = magic.size();
  for (int i = 0; i < 3; ++i) {  // cipher, kdf, kdf options
    if (!read_string(*raw, pos)) return std::nullopt;
  }
  if (raw->size() - pos < 4) return std::nullopt;
  pos += 4;  // the number of keys (OpenSSH writes one)
  return read_string(*raw, pos);
}

}  // namespace

std::optional<std::string> identity_public_blob(const std::string& path) {
  if (std::optional<std::string> pub = read_small(path + ".pub")) {
    if (std::optional<std::string> blob = blob_of_public_line(*pub)) return blob;
  }
  std::optional<std::string> text = read_small(path);
  if (!text) return std::nullopt;
  if (text->find("PRIVATE KEY-----") != std::string::npos) return blob_of_openssh_private(*text);
  // A public key named as the identity (`IdentityFile ~/.ssh/key.pub`, the
  // private half in an agent such as 1Password's or a hardware token's).
  return blob_of_public_line(*text);
}

std::vector<AuthStep> order_identities(const std::vector<std::string>& agent_blobs,
                                       const std::vector<IdentityFile>& files, bool agent_others) {
  std::vector<AuthStep> preferred, others;
  std::vector<bool> in_agent(files.size(), false);
  for (std::size_t a = 0; a < agent_blobs.size(); ++a) {
    bool found = false;
    for (std::size_t f = 0; f < files.size() && !found; ++f) {
      if (!in_agent[f] && files[f].blob && *files[f].blob == agent_blobs[a]) {
        in_agent[f] = true;
        found = true;
        preferred.push_back({AuthStep::Kind::Agent, a, f, true});
      }
    }
    if (!found && agent_others) others.push_back({AuthStep::Kind::Agent, a, 0, false});
  }
  preferred.insert(preferred.end(), others.begin(), others.end());
  for (std::size_t f = 0; f < files.size(); ++f) {
    if (!in_agent[f]) preferred.push_back({AuthStep::Kind::File, 0, f, false});
  }
  return preferred;
}

}  // namespace hvd::launcher::ssh
