#pragma once
// Helpers shared by the options tests.
#include <sys/stat.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../test_util.h"

namespace hvd_test {

/// An executable discovery script in a temporary file: elastic flags need
/// one to be accepted (the parser checks that it exists and is executable).
struct DiscoveryScript {
  TempFile file{"#!/bin/sh\necho localhost:4\n", ".sh"};
  DiscoveryScript() { REQUIRE(::chmod(file.path().c_str(), 0755) == 0); }
  const std::string& path() const { return file.path(); }
};

/// The usage error `args` give (exit 2, one line on stderr), without the
/// "hvdrun: error: " prefix and the newline.
inline std::string usage_error(std::vector<std::string> args) {
  const auto out = parse(std::move(args));
  INFO(out.message);
  CHECK_FALSE(out.options);
  CHECK(out.exit_code == hvd::launcher::exit_code::kUsage);
  CHECK_FALSE(out.message_to_stdout);
  CHECK(std::count(out.message.begin(), out.message.end(), '\n') == 1);
  const std::string prefix = "hvdrun: error: ";
  REQUIRE(out.message.rfind(prefix, 0) == 0);
  return out.message.substr(prefix.size(), out.message.size() - prefix.size() - 1);
}

}  // namespace hvd_test
