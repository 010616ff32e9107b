#pragma once
// Temporary directories and files for the Kubernetes discovery tests.
#include <stdlib.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "hvd/common/error.h"
#include "hvd/launcher/discovery/kubernetes/kube_config.h"

namespace kube_test {

/// A directory removed (with its files) at scope exit.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/hvd_kube_testXXXXXX";
    REQUIRE(mkdtemp(tmpl) != nullptr);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  /// Writes `name` under the directory; returns its path.
  std::string write(const std::string& name, const std::string& content) const {
    const std::string p = path_ + "/" + name;
    std::filesystem::create_directories(std::filesystem::path(p).parent_path());
    std::ofstream(p, std::ios::binary | std::ios::trunc) << content;
    return p;
  }

 private:
  std::string path_;
};

/// An EnvLookup over a map.
inline hvd::launcher::kube::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

template <typename Fn>
std::string invalid_message(Fn&& fn) {
  try {
    fn();
  } catch (const hvd::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

}  // namespace kube_test
