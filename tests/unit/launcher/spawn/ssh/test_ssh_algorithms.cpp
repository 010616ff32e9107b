// ssh_config algorithm lists against libssh2, and the host key types the
// known_hosts files record (spawn/ssh/ssh_algorithms.h, ssh_known_hosts.h).
#include "hvd/launcher/spawn/ssh/ssh_algorithms.h"
#include "hvd/launcher/spawn/ssh/ssh_known_hosts.h"

#include <libssh2.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

using namespace hvd::launcher::ssh;
using Names = std::vector<std::string>;

namespace {

const Names kAvailable = {"curve25519-sha256", "ecdh-sha2-nistp256", "ecdh-sha2-nistp384",
                          "diffie-hellman-group14-sha256", "diffie-hellman-group1-sha1"};

// Public keys (generated once for this test; only their type and bytes matter).
const char* kEd25519 = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIO3Ut8YFsz1c6DY1VGZscsTIY14vk2UBbrYEvQWQJ+Eg";
const char* kEcdsa =
    "ecdsa-sha2-nistp256 "
    "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBGfPJtAKRMKUe9gSYKR8N9XL81xZ2JGGb6Ckuw2RruQAIJoDOno8OWWpm9pK7cR1"
    "LbrG//Ad++uJKtnCV4aWel0=";
const char* kRsa =
    "ssh-rsa "
    "AAAAB3NzaC1yc2EAAAADAQABAAAAgQC5yFV+r3QhM6voNhkoiYnHTuSU0+ve5Lij5feokKfGVI1hL5+Zlk92yJxr84c6xY4btx193I43jLBhkCxmdFyO"
    "BP+Ozx9hzJXkf6JJkv+3N9c3/2usdDceJvz6CgrA9bV8Z6yJUJSH167zes2pz4lCV1TCY3JHW1sUpDseDGSaqQ==";
// "node9" hashed (ssh-keygen -H) with the ECDSA key.
const char* kHashedNode9Ecdsa =
    "|1|p/gl99YbZyINjdJA2dBz2iSX8X4=|5b8yf0G4Sy5157q8acdjes89py0= ecdsa-sha2-nistp256 "
    "AAAAE2VjZHNhLXNoYTItbmlzdHAyNTYAAAAIbmlzdHAyNTYAAABBBGfPJtAKRMKUe9gSYKR8N9XL81xZ2JGGb6Ckuw2RruQAIJoDOno8OWWpm9pK7cR1"
    "LbrG//Ad++uJKtnCV4aWel0=";

struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "hvd-algs-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path / name) << text;
    return (path / name).string();
  }
};

struct SessionGuard {
  LIBSSH2_SESSION* s;
  SessionGuard() : s((libssh2_init(0), libssh2_session_init())) { REQUIRE(s != nullptr); }
  ~SessionGuard() { libssh2_session_free(s); }
};

}  // namespace

TEST_CASE("ssh algorithms: OpenSSH's list syntax over what libssh2 offers", "[ssh][algorithms]") {
  SECTION("no value: the default") {
    AlgorithmList l = assemble_algorithms("", kAvailable);
    CHECK(l.names == kAvailable);
    CHECK(l.from_default);
  }
  SECTION("an explicit list: those, in the order written; names libssh2 lacks are reported") {
    AlgorithmList l = assemble_algorithms("ecdh-sha2-nistp384,sntrup761x25519-sha512@openssh.com,curve25519-sha256",
                                          kAvailable);
    CHECK(l.names == Names{"ecdh-sha2-nistp384", "curve25519-sha256"});
    CHECK(l.not_offered == Names{"sntrup761x25519-sha512@openssh.com"});
    CHECK_FALSE(l.from_default);
    CHECK(l.error.empty());
  }
  SECTION("patterns expand in libssh2's order; a pattern matching nothing is reported") {
    AlgorithmList l = assemble_algorithms("ecdh-*,mlkem*", kAvailable);
    CHECK(l.names == Names{"ecdh-sha2-nistp256", "ecdh-sha2-nistp384"});
    CHECK(l.not_offered == Names{"mlkem*"});
  }
  SECTION("+: appended to the default (nothing twice)") {
    AlgorithmList l = assemble_algorithms("+diffie-hellman-group1-sha1,gss-foo", kAvailable);
    CHECK(l.names == kAvailable);
    CHECK(l.not_offered == Names{"gss-foo"});
    CHECK(l.from_default);
  }
  SECTION("-: removed from the default, patterns allowed, nothing reported") {
    AlgorithmList l = assemble_algorithms("-diffie-hellman-*,chacha20-poly1305@openssh.com", kAvailable);
    CHECK(l.names == Names{"curve25519-sha256", "ecdh-sha2-nistp256", "ecdh-sha2-nistp384"});
    CHECK(l.not_offered.empty());
    CHECK(l.from_default);
  }
  SECTION("^: first, then the rest of the default") {
    AlgorithmList l = assemble_algorithms("^diffie-hellman-group14-sha256", kAvailable);
    CHECK(l.names == Names{"diffie-hellman-group14-sha256", "curve25519-sha256", "ecdh-sha2-nistp256",
                           "ecdh-sha2-nistp384", "diffie-hellman-group1-sha1"});
  }
  SECTION("nothing offered: an empty list (the caller's error)") {
    AlgorithmList l = assemble_algorithms("aes256-gcm@openssh.com", kAvailable);
    CHECK(l.names.empty());
    CHECK(l.not_offered == Names{"aes256-gcm@openssh.com"});
  }
  SECTION("a negated name outside a '-' list is refused, as OpenSSH refuses it") {
    AlgorithmList l = assemble_algorithms("curve25519-sha256,!ecdh-*", kAvailable);
    CHECK(l.names.empty());
    CHECK(l.error == "'!ecdh-*': a negated name is only allowed in a list that starts with '-'");
  }
}

TEST_CASE("ssh algorithms: libssh2's own lists", "[ssh][algorithms]") {
  const Names& hk = libssh2_algorithms(AlgorithmKind::HostKey);
  CHECK(std::find(hk.begin(), hk.end(), "ssh-ed25519") != hk.end());
  const Names& c = libssh2_algorithms(AlgorithmKind::Cipher);
  CHECK(std::find(c.begin(), c.end(), "aes128-ctr") != c.end());
  CHECK_FALSE(libssh2_algorithms(AlgorithmKind::Kex).empty());
  CHECK_FALSE(libssh2_algorithms(AlgorithmKind::Mac).empty());
  CHECK_THAT(libssh2_version_text(), Catch::StartsWith("libssh2 1."));
  CHECK(std::string(algorithm_keyword(AlgorithmKind::Mac)) == "MACs");
}

TEST_CASE("ssh algorithms: the recorded key types go first, each group in its order", "[ssh][algorithms]") {
  const Names libssh2_order = {"ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ssh-ed25519", "ssh-rsa", "ssh-dss"};
  CHECK(prefer_known_types(libssh2_order, {LIBSSH2_KNOWNHOST_KEY_ED25519}) ==
        Names{"ssh-ed25519", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384", "ssh-rsa", "ssh-dss"});
  CHECK(prefer_known_types(libssh2_order, {LIBSSH2_KNOWNHOST_KEY_SSHRSA, LIBSSH2_KNOWNHOST_KEY_ECDSA_384}) ==
        Names{"ecdsa-sha2-nistp384", "ssh-rsa", "ecdsa-sha2-nistp256", "ssh-ed25519", "ssh-dss"});
  CHECK(prefer_known_types(libssh2_order, {}) == libssh2_order);
  CHECK(host_key_algorithms_of(LIBSSH2_KNOWNHOST_KEY_SSHRSA) == Names{"rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"});
}

TEST_CASE("ssh known_hosts: the key types recorded for a host, user and global files, hashed names, ports",
          "[ssh][algorithms]") {
  TempDir d;
  SessionGuard g;
  const std::string user = d.write(
      "known_hosts", std::string("# comment\n@cert-authority *.example ") + kEd25519 + "\nnode1 " + kEd25519 +
                         "\nnode1,other " + kRsa + "\n[node2]:2222 " + kEcdsa + "\n" + kHashedNode9Ecdsa + "\n");
  const std::string global = d.write("ssh_known_hosts", std::string("node3 ") + kRsa + "\n");
  HostKeyCheck c;
  c.known_hosts_files = {user};
  c.global_known_hosts_files = {global, (d.path / "absent").string()};
  auto types_for = [&](const std::string& host, int port) {
    c.host = host;
    c.port = port;
    return recorded_key_types(g.s, c);
  };
  CHECK(types_for("node1", 22) == std::vector<int>{LIBSSH2_KNOWNHOST_KEY_ED25519, LIBSSH2_KNOWNHOST_KEY_SSHRSA});
  CHECK(types_for("other", 22) == std::vector<int>{LIBSSH2_KNOWNHOST_KEY_SSHRSA});
  CHECK(types_for("node2", 2222) == std::vector<int>{LIBSSH2_KNOWNHOST_KEY_ECDSA_256});
  CHECK(types_for("node9", 22) == std::vector<int>{LIBSSH2_KNOWNHOST_KEY_ECDSA_256});  // hashed
  CHECK(types_for("node3", 22) == std::vector<int>{LIBSSH2_KNOWNHOST_KEY_SSHRSA});  // global file
  CHECK(types_for("nodeX", 22).empty());
  c.known_name = "node1";  // HostKeyAlias
  CHECK(types_for("anything", 22) == std::vector<int>{LIBSSH2_KNOWNHOST_KEY_ED25519, LIBSSH2_KNOWNHOST_KEY_SSHRSA});
}
