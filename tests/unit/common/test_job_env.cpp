// hvd/common/job_env.h: the launcher<->worker contract's names are unique,
// look like environment variables, and kAll (what the Python binding and
// the literal check see) lists every constant the header declares.
#include "hvd/common/job_env.h"
#include "hvd/common/secret.h"

#include <catch2/catch.hpp>

#include <cctype>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace job_env = hvd::job_env;

namespace {

/// "RendezvousAddr" -> "RENDEZVOUS_ADDR": an underscore before every capital
/// that follows a lower-case letter or a digit.
std::string upper_snake(const std::string& camel) {
  std::string out;
  for (std::size_t i = 0; i < camel.size(); ++i) {
    const auto c = static_cast<unsigned char>(camel[i]);
    if (i > 0 && std::isupper(c) &&
        (std::islower(static_cast<unsigned char>(camel[i - 1])) ||
         std::isdigit(static_cast<unsigned char>(camel[i - 1])))) {
      out += '_';
    }
    out += static_cast<char>(std::toupper(c));
  }
  return out;
}

std::string header_text() {
  const std::string path = std::string(HVD_SOURCE_DIR) + "/lib/common/include/hvd/common/job_env.h";
  std::ifstream in(path);
  REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("job_env: names and keys are unique, upper-case letters, digits and underscores", "[common][job_env]") {
  const std::regex shape("[A-Z][A-Z0-9_]*");
  std::set<std::string> names, keys;
  for (const auto& v : job_env::kAll) {
    INFO(v.key << " = " << v.name);
    CHECK(std::regex_match(v.name, shape));
    CHECK(std::regex_match(v.key, shape));
    CHECK(names.insert(v.name).second);
    CHECK(keys.insert(v.key).second);
    CHECK(std::string(job_env::group_name(v.group)) != "?");
  }
  CHECK(names.size() == std::size(job_env::kAll));
  // The older spelling is the same variable.
  CHECK(std::string(hvd::kSecretEnv) == job_env::kSecret);
}

TEST_CASE("job_env: kAll lists every constant of job_env.h, keyed by the constant's name", "[common][job_env]") {
  const std::string text = header_text();
  // Every constant is declared in this one form; the literal check
  // (tests/check_job_env_literals.py) parses the header the same way.
  const std::regex decl(R"re(inline constexpr const char\* k([A-Za-z0-9]+) = "([^"]*)";)re");
  std::map<std::string, std::string> key_of_name;  // "HOROVOD_RANK" -> "RANK"
  for (auto it = std::sregex_iterator(text.begin(), text.end(), decl); it != std::sregex_iterator(); ++it) {
    const std::string name = (*it)[2];
    INFO(name);
    CHECK(key_of_name.emplace(name, upper_snake((*it)[1])).second);
  }
  REQUIRE(key_of_name.size() >= 10);  // the pattern still matches the header's declarations
  CHECK(key_of_name.size() == std::size(job_env::kAll));
  std::set<std::string> keys;
  for (const auto& v : job_env::kAll) {
    INFO(v.name);
    auto it = key_of_name.find(v.name);
    REQUIRE(it != key_of_name.end());
    CHECK(it->second == v.key);
    keys.insert(v.key);
  }
  // No variable declared in another form: every upper-case literal in the
  // header is a declared name or a key of kAll.
  const std::regex literal(R"re("([A-Z][A-Z0-9_]*)")re");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), literal); it != std::sregex_iterator(); ++it) {
    const std::string s = (*it)[1];
    INFO(s);
    CHECK((key_of_name.count(s) != 0 || keys.count(s) != 0));
  }
}

TEST_CASE("job_env: the contract's well-known names", "[common][job_env]") {
  // Spelled out here on purpose: these are what hvdrun and Horovod workers
  // agree on, so a change to one of them must fail a test.
  CHECK(std::string(job_env::kRendezvousAddr) == "HOROVOD_GLOO_RENDEZVOUS_ADDR");
  CHECK(std::string(job_env::kRendezvousPort) == "HOROVOD_GLOO_RENDEZVOUS_PORT");
  CHECK(std::string(job_env::kSecret) == "HVDRUN_SECRET");
  CHECK(std::string(job_env::kRank) == "HOROVOD_RANK");
  CHECK(std::string(job_env::kSize) == "HOROVOD_SIZE");
  CHECK(std::string(job_env::kElastic) == "HOROVOD_ELASTIC");
  CHECK(std::string(job_env::kWorkerId) == "HVDRUN_WORKER_ID");
}
