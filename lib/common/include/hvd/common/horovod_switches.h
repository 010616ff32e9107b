#pragma once
/// Horovod's own switches that a user (not hvdrun) may set for a job and
/// that the hvdcomm collective library does not act on, named once for the
/// two sides that report them: the library (rank 0, at init) and hvdrun
/// (once for the job, from its environment and -x/--env). Nothing is
/// silently ignored: each one set so that it asks for something gives one
/// line naming the variable, its value and why (docs/collective.md,
/// "Environment").
///
/// Not here: Horovod switches whose effect holds trivially in this library
/// (HOROVOD_DISABLE_NVTX_RANGES: it emits no NVTX ranges;
/// HOROVOD_MPI_THREADS_DISABLE: it starts no MPI threads), and the ones
/// hvdrun sets from its flags (hvd/common/job_env.h), which hvdrun reports
/// by flag.
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace hvd::horovod_switches {

/// One switch that asks for something the library does not do.
struct Unhonoured {
  std::string variable;
  std::string value;
  std::string why;  ///< what the library does instead, one clause
};

/// Looks an environment variable up (the process's, or the one a launcher
/// builds for its workers).
using Lookup = std::function<std::optional<std::string>(const char*)>;

/// The switches `get` has set so that Horovod would act on them, in a fixed
/// order. HOROVOD_CONTROLLER and HOROVOD_CPU_OPERATIONS are hvdrun's to set
/// ("gloo"; dropped under --mpi): hvdrun's lookup gives only a value from -x
/// for them, the one way a user's value reaches the workers.
std::vector<Unhonoured> unhonoured(const Lookup& get);

/// Whether hvdrun sets `variable` for its workers itself (the controller and
/// the CPU operations), so only -x can give it another value.
bool set_by_hvdrun(const std::string& variable);

/// Horovod's reading of a switch: strtol(value, 10) > 0.
bool switched_on(const std::optional<std::string>& value);

}  // namespace hvd::horovod_switches
