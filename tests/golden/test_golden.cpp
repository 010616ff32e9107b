// Golden tests for hvdrun's --dry-run output (placement table, worker
// commands and HOROVOD_* variables). See CMakeLists.txt for the layout.
#include <dirent.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "hvd/common/error.h"
#include "hvd/launcher/discovery/choose.h"
#include "hvd/launcher/options/cli.h"
#include "hvd/launcher/plan/plan.h"

namespace {

const std::string kGoldenDir = HVD_GOLDEN_DIR;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t pos = 0; (pos = s.find(from, pos)) != std::string::npos; pos += to.size())
    s.replace(pos, from.size(), to);
  return s;
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  DIR* dir = opendir(kGoldenDir.c_str());
  REQUIRE(dir != nullptr);
  while (dirent* e = readdir(dir)) {
    std::string n = e->d_name;
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".args") == 0) names.push_back(n.substr(0, n.size() - 5));
  }
  closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

/// What hvdrun would print for these arguments (stdout or the error line).
std::string run_case(const std::string& name) {
  std::vector<std::string> args{"hvdrun"};
  std::stringstream lines(read_file(kGoldenDir + "/" + name + ".args"));
  for (std::string line; std::getline(lines, line);) {
    args.push_back(replace_all(line, "@GOLDEN_DIR@", kGoldenDir));
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string out;
  try {
    auto parsed = hvd::launcher::parse_command_line(static_cast<int>(args.size()), argv.data());
    if (!parsed.options) {
      out = parsed.message + "(exit " + std::to_string(parsed.exit_code) + ")\n";
    } else {
      // A fixed launcher environment and directory keep the output stable on
      // every machine; the inherited variables below must not be shown.
      std::map<std::string, std::string> env = {{"PATH", "/usr/bin:/bin"},
                                                {"HOME", "/home/user"},
                                                {"SSH_AUTH_SOCK", "/tmp/ssh-agent.sock"},
                                                {"LD_PRELOAD", "/lib/inject.so"},
                                                {"FOO", "from-launcher"}};
      // No platform: an empty Environment, whatever machine runs the test.
      auto choice = hvd::launcher::choose_host_source(*parsed.options, hvd::launcher::Environment{});
      auto hosts = choice.source->discover();
      if (!hosts.ok()) throw hvd::InvalidArgument(*hosts.error);
      auto plan = hvd::launcher::make_plan(choice.options, hosts.hosts, env, "/home/user/job");
      auto format = parsed.options->dry_run == hvd::launcher::DryRunFormat::None ? hvd::launcher::DryRunFormat::Text
                                                                                 : parsed.options->dry_run;
      out = hvd::launcher::render_dry_run(plan, *parsed.options, format);
    }
  } catch (const hvd::InvalidArgument& e) {
    out = std::string("hvdrun: error: ") + e.what() + "\n(exit 2)\n";
  }
  return replace_all(out, kGoldenDir, "@GOLDEN_DIR@");
}

/// A message that shows where output and golden file part ways.
std::string describe_mismatch(const std::string& name, const std::string& expected, const std::string& actual) {
  std::stringstream e(expected), a(actual);
  std::string el, al;
  int line = 0;
  while (true) {
    ++line;
    bool he = static_cast<bool>(std::getline(e, el));
    bool ha = static_cast<bool>(std::getline(a, al));
    if (!he && !ha) break;
    if (!he || !ha || el != al) {
      return "golden mismatch in tests/golden/" + name + ".expected at line " + std::to_string(line) +
             ":\n  expected: " + (he ? el : "<end of file>") + "\n  actual:   " + (ha ? al : "<end of output>") +
             "\n--- full actual output ---\n" + actual +
             "--- (rerun with HVD_UPDATE_GOLDEN=1 to accept, then review git diff)";
    }
  }
  return "outputs differ only in a trailing newline";
}

}  // namespace

TEST_CASE("golden: every dry-run case matches its .expected file", "[golden]") {
  // The launcher reads HOROVOD_START_TIMEOUT; the goldens assume the default.
  unsetenv("HOROVOD_START_TIMEOUT");
  auto names = case_names();
  REQUIRE(names.size() >= 4);
  const bool update = std::getenv("HVD_UPDATE_GOLDEN") != nullptr;
  for (const auto& name : names) {
    std::string actual = run_case(name);
    std::string path = kGoldenDir + "/" + name + ".expected";
    if (update) {
      std::ofstream(path) << actual;
      continue;
    }
    std::string expected = read_file(path);
    INFO("case " << name);
    if (expected != actual) FAIL_CHECK(describe_mismatch(name, expected, actual));
    SUCCEED(name);
  }
}
