#pragma once
/// OCI Data Science job runs (docs/platforms.md#oci-data-science): the MAIN
/// runs an elastic job whose hosts are the workers registered in the shared
/// directory and itself; a WORKER registers, then follows the MAIN and exits
/// with the job's status.
#include <chrono>
#include <string>
#include <vector>

namespace hvd::launcher {

// run_oci_if_detected (launcher.h), hvdrun_main's OCI branch, runs before
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
