#pragma once
/// A fake machine for the Environment seam (process/environment.h): a
/// fixture directory as the file-system root (removed at scope exit), files
/// written under it at their absolute paths, and the variables and host
/// name a test gives. Optionally with NVIDIA GPUs as the driver lists them
/// (/proc/driver/nvidia/gpus, one directory each). Shared by the platform,
/// host-source and job-mode tests.
#include "hvd/launcher/process/environment.h"

#include "../test_util.h"

#include <map>
#include <string>

namespace hvd::launcher::fakes {

class FakeMachine {
 public:
  explicit FakeMachine(int gpus = 0) {
    for (int i = 0; i < gpus; ++i) {
      dir_.write("proc/driver/nvidia/gpus/0000:0" + std::to_string(i) + ":00.0/information", "Model: Tesla\n");
    }
  }
  /// Writes `absolute` (a path on the fake machine) with its parent directories.
  void write(const std::string& absolute, const std::string& content) const { dir_.write(absolute, content); }
  /// The Environment of this machine with the variables `env`.
  Environment context(std::map<std::string, std::string> env = {}, std::string hostname = "testhost") const {
    return {dir_.path(), std::move(env), std::move(hostname)};
  }
  const std::string& root() const { return dir_.path(); }

 private:
  hvd_test::TempDir dir_;
};

}  // namespace hvd::launcher::fakes
