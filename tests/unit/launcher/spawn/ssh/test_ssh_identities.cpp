// Key order for public-key authentication and identity files' public keys
// (spawn/ssh/ssh_identities.h), with keys made by the real ssh-keygen.
#include "hvd/launcher/spawn/ssh/ssh_identities.h"

#include "hvd/common/text.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

using namespace hvd::launcher::ssh;
using Kind = AuthStep::Kind;

namespace {

struct KeyDir {
  std::filesystem::path path;
  KeyDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "hvd-ids-XXXXXX").string();
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~KeyDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  /// ssh-keygen -t TYPE [extra] -N PASS -f NAME; returns the private key's path.
  std::string make(const std::string& name, const std::string& args, const std::string& pass = "") const {
    const std::string file = (path / name).string();
    const std::string cmd =
        "ssh-keygen -q " + args + " -N '" + pass + "' -C test -f '" + file + "' </dev/null >/dev/null 2>&1";
    REQUIRE(std::system(cmd.c_str()) == 0);
    return file;
  }
};

std::string pub_blob(const std::string& private_path) {
  std::ifstream in(private_path + ".pub");
  std::string type, b64;
  in >> type >> b64;
  auto blob = hvd::base64_decode(b64);
  REQUIRE(blob);
  return *blob;
}

}  // namespace

TEST_CASE("ssh identities: the public key of an identity file", "[ssh][identities]") {
  if (std::system("command -v ssh-keygen >/dev/null 2>&1") != 0) {
    WARN("ssh-keygen not installed (scripts/setup.sh): skipped");
    return;
  }
  KeyDir d;
  SECTION("from FILE.pub") {
    const std::string k = d.make("ed", "-t ed25519");
    CHECK(identity_public_blob(k) == pub_blob(k));
  }
  SECTION("from the private key in OpenSSH's format, encrypted or not") {
    for (const std::string pass : {"", "secret phrase"}) {
      const std::string k = d.make(pass.empty() ? "plain" : "locked", "-t ed25519", pass);
      const std::string want = pub_blob(k);
      std::filesystem::remove(k + ".pub");
      CHECK(identity_public_blob(k) == want);
    }
  }
  SECTION("an ECDSA key too") {
    const std::string k = d.make("ec", "-t ecdsa", "password");
    const std::string want = pub_blob(k);
    std::filesystem::remove(k + ".pub");
    CHECK(identity_public_blob(k) == want);
  }
  SECTION("a public key named as the identity (its private half in an agent)") {
    const std::string k = d.make("token", "-t ed25519");
    const std::string want = pub_blob(k);
    std::filesystem::remove(k);
    CHECK(identity_public_blob(k + ".pub") == want);
  }
  SECTION("a PEM key without FILE.pub, a missing file, garbage: unknown") {
    const std::string k = d.make("pem", "-t rsa -b 2048 -m PEM", "password");
    std::filesystem::remove(k + ".pub");
    CHECK_FALSE(identity_public_blob(k));
    CHECK_FALSE(identity_public_blob((d.path / "absent").string()));
    std::ofstream((d.path / "junk").string()) << "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
                                                 "-----END OPENSSH PRIVATE KEY-----\n";
    CHECK_FALSE(identity_public_blob((d.path / "junk").string()));
  }
}

TEST_CASE("ssh identities: OpenSSH's order", "[ssh][identities]") {
  const std::vector<std::string> agent = {"A", "B", "C"};
  const std::vector<IdentityFile> files = {{"/k/c", std::string("C")}, {"/k/d", std::string("D")},
                                           {"/k/e", std::nullopt}, {"/k/c2", std::string("C")}};
  auto describe = [&](const std::vector<AuthStep>& steps) {
    std::ostringstream out;
    for (const auto& s : steps) {
      if (s.kind == Kind::Agent) {
        out << "agent:" << agent[s.agent_index] << (s.for_file ? "=" + files[s.file_index].path : "") << " ";
      } else {
        out << "file:" << files[s.file_index].path << " ";
      }
    }
    return out.str();
  };
  SECTION("the files' keys in the agent first, then the agent's others, then the other files") {
    CHECK(describe(order_identities(agent, files, true)) == "agent:C=/k/c agent:A agent:B file:/k/d file:/k/e file:/k/c2 ");
  }
  SECTION("IdentitiesOnly (or -i): the agent only for the files' keys") {
    CHECK(describe(order_identities(agent, files, false)) == "agent:C=/k/c file:/k/d file:/k/e file:/k/c2 ");
  }
  SECTION("no agent: the files in their order") {
    CHECK(describe(order_identities({}, files, true)) == "file:/k/c file:/k/d file:/k/e file:/k/c2 ");
  }
}
