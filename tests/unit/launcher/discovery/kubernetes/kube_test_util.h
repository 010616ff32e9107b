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

/// An Environment with these variables only.
inline hvd::launcher::Environment env_of(std::map<std::string, std::string> vars) {
  return hvd::launcher::Environment{"", std::move(vars), std::nullopt};
}

}  // namespace kube_test
