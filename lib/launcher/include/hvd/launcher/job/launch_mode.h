#pragma once
/// Who starts the workers of a job: hvdrun itself (local agents, SSH,
/// elastic) or mpirun. hvdrun_main asks decide_launch once, after parsing.
///
/// The rule (docs/mpi.md, "When mpirun starts the workers"):
///  * `--mpi` (or `controller: mpi`): mpirun.
///  * `--mpi-args` without a controller choice, in a static job: mpirun when
///    an mpirun that hvdrun supports is installed -- horovodrun on an MPI
///    install runs through mpirun by default, so guides pass --mpi-args
///    without --mpi. One info line says so.
///  * Otherwise -- `--gloo`, no usable mpirun, or elastic mode (where
///    horovodrun itself uses Gloo) -- hvdrun starts the workers and the
///    words of --mpi-args reach no mpirun. hvdrun honours the output flags
///    guides copy from mpirun lines (--display-map prints the placement,
///    --timestamp-output timestamps lines, --tag-output is hvdrun's normal
///    rank tag, --allow-run-as-root needs nothing) and names everything else
///    in ONE warning line, with the reason mpirun is not used.
///  * `--binding-args` outside mpirun mode: one warning (nothing binds).
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/spawn/mpi/mpi_launch.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

enum class LaunchMode { Own, Mpirun };

/// What looking for an installed mpirun found: its implementation, or why
/// there is none hvdrun can use ("no mpirun on PATH", "unsupported MPI
/// implementation ...").
struct MpirunProbe {
  std::optional<MpiInfo> info;
  std::string problem;
};

struct LaunchDecision {
  LaunchMode mode = LaunchMode::Own;
  /// The options the job runs with: `options` with what --mpi-args asked
  /// of hvdrun's own mode folded in (--timestamp-output sets
  /// prefix_output_with_timestamp).
  Options options;
  /// mpirun found by the probe when --mpi-args chose mpirun mode (a job
  /// with --mpi probes when it starts, as before).
  std::optional<MpiInfo> mpirun;
  /// --mpi-args --display-map in a static job hvdrun starts: print the
  /// placement table before starting.
  bool display_map = false;
  /// Lines to log, at info and warning level.
  std::vector<std::string> info;
  std::vector<std::string> warnings;
};

/// The decision above. `probe` is called only when it matters (--mpi-args
/// given, no controller chosen, static job). Pure apart from `probe`.
/// Throws InvalidArgument on an unterminated quote in --mpi-args or
/// --binding-args (whatever the mode).
LaunchDecision decide_launch(const Options& options, const std::function<MpirunProbe()>& probe);

/// The real probe: `mpirun` on PATH, then `mpirun --version` (probe_mpirun).
MpirunProbe probe_installed_mpirun();

}  // namespace hvd::launcher
