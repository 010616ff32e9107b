#pragma once
// Shared helpers for the launcher plan tests.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hvd/common/error.h"
#include "hvd/launcher/discovery/choose.h"
#include "hvd/launcher/options/cli.h"
#include "hvd/launcher/plan/plan.h"

namespace hvd_test {

/// parse_command_line on {"hvdrun", args...}.
inline hvd::launcher::ParseOutcome parse(std::vector<std::string> args) {
  args.insert(args.begin(), "hvdrun");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return hvd::launcher::parse_command_line(static_cast<int>(args.size()), argv.data());
}

/// Parses and requires success.
inline hvd::launcher::Options parse_ok(std::vector<std::string> args) {
  auto out = parse(std::move(args));
  INFO("message: " << out.message);
  REQUIRE(out.options.has_value());
  return *out.options;
}

/// The hosts a job's host source gives on a machine with no platform (an
/// empty Environment): -H, --hostfile or localhost:np.
inline std::vector<hvd::launcher::HostSpec> hosts_of(const hvd::launcher::Options& o) {
  auto choice = hvd::launcher::choose_host_source(o, hvd::launcher::Environment{});
  auto found = choice.source->discover();
  if (!found.ok()) throw hvd::InvalidArgument(*found.error);
  return found.hosts;
}

/// The hosts a chosen source gives, as -H text ("a:2,b:2").
inline std::string hosts_text(const hvd::launcher::HostSourceChoice& choice) {
  std::string out;
  for (const auto& h : choice.source->discover().hosts) out += (out.empty() ? "" : ",") + hvd::launcher::format_host(h);
  return out;
}

/// make_plan over hosts_of(o), as hvdrun_main makes a static job's plan.
inline hvd::launcher::JobPlan plan_of(const hvd::launcher::Options& o, const std::map<std::string, std::string>& env,
                                      const std::string& cwd) {
  return hvd::launcher::make_plan(o, hosts_of(o), env, cwd);
}

/// The what() of the InvalidArgument `fn` throws ("" if none).
template <typename Fn>
std::string invalid_message(Fn&& fn) {
  try {
    fn();
  } catch (const hvd::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

/// A temporary file removed at scope exit.
class TempFile {
 public:
  explicit TempFile(const std::string& content, const std::string& suffix = ".txt") {
    char tmpl[] = "/tmp/hvd_plan_testXXXXXX";
    int fd = mkstemp(tmpl);
    REQUIRE(fd >= 0);
    close(fd);
    path_ = std::string(tmpl) + suffix;
    std::rename(tmpl, path_.c_str());
    std::ofstream(path_) << content;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

/// A directory removed (with its files) at scope exit.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/hvd_launcher_testXXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  /// Writes `name` (a path relative to the directory) with its parent
  /// directories; returns its path.
  std::string write(const std::string& name, const std::string& content) const {
    const std::string p = path_ + "/" + name;
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
    return p;
  }

 private:
  std::string path_;
};

}  // namespace hvd_test
