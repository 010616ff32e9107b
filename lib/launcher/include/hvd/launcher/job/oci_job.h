#pragma once
/// OCI Data Science job runs (docs/platforms.md#oci-data-science): the MAIN
/// runs an elastic job whose hosts are the workers registered in the shared
/// directory and itself; a WORKER registers, then follows the MAIN and exits
/// with the job's status.
#include "hvd/launcher/discovery/platform/oci.h"
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/process/environment.h"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

/// What an OCI run is, decided from the command line and the machine's
/// variables before anything starts.
struct OciDecision {
  /// Set when hvdrun ends here: the command line with OCI's flags beneath
  /// it was refused, or asked for --help (`message`, on stdout or stderr).
  std::optional<int> exit_code;
  std::string message;
  bool message_to_stdout = false;
  /// The run's options (OCI's variables as flags beneath the command line)
  /// and its variables; set unless exit_code is.
  std::optional<Options> options;
  std::optional<platform::OciConfig> config;
};

/// nullopt when OCI does not apply here: OCI__MODE unset, --hosts-from
/// none or another platform, -H & co. with auto, an earlier platform
/// detected, --check-build. Throws JobError(exit_code::kUsage) for
/// --hosts-from oci with -H & co. or malformed OCI variables. Reads the
/// machine only through `env`; starts nothing.
std::optional<OciDecision> decide_oci(int argc, char** argv, const Environment& env);

// run_oci_if_detected (job/modes.h), the early mode "oci" of hvdrun_main, runs before
// anything else is parsed: nullopt when the OCI platform does not apply
// (OCI__MODE unset, --hosts-from none or another platform, -H & co. with
// auto, an earlier platform detected); else the exit code of this run, MAIN
// or WORKER.

/// The address this machine registers and is placed by: the first of
/// `interfaces` (--network-interface) that exists here; else the address
/// this host name resolves to when it belongs to a local non-loopback
/// interface; else the first non-loopback address (IPv4 first). Throws
/// InvalidArgument (no such interface) or IoError (no address at all).
std::string oci_this_address(const std::vector<std::string>& interfaces);

/// How often the MAIN and the WORKERs refresh their heartbeats, and when a
/// heartbeat counts as gone.
inline constexpr std::chrono::seconds kOciHeartbeatInterval{2};
inline constexpr std::chrono::seconds kOciHeartbeatStale{10};

}  // namespace hvd::launcher
