#pragma once
/// Runs a short command to its end and keeps what it printed: `mpirun
/// --version`, the worker interpreter's import check of --check-build.
#include "hvd/common/io.h"

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

struct Captured {
  std::string output;  ///< stdout and stderr together, at most max_output bytes
  int wait_status = 0;  ///< as waitpid reports it (exit_status_of / signal_of)
};

/// `argv` (a program name is searched in PATH) with stdout and stderr on one
/// pipe, stdin from /dev/null, in its own process group; `env` replaces the
/// environment when given. Returns when the command exits. Throws
/// SpawnError when it cannot be started, TimeoutError (after killing its
/// process group) when it has not finished by `deadline`; `what` names the
/// command in that message ("'mpirun --version'").
Captured run_captured(const std::vector<std::string>& argv, Deadline deadline, const std::string& what,
                      std::size_t max_output = 1 << 20,
                      const std::optional<std::vector<std::string>>& env = std::nullopt);

}  // namespace hvd::launcher
