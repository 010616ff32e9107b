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

#include "../../test_util.h"
#include "hvd/common/error.h"
#include "hvd/launcher/discovery/kubernetes/kube_config.h"

namespace kube_test {

using hvd_test::invalid_message;
using hvd_test::TempDir;

/// An EnvLookup over a map.
inline hvd::launcher::kube::EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

}  // namespace kube_test
