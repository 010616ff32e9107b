#pragma once
/// Host discovery for elastic jobs (issue 5; docs/elastic.md, "How discovery
/// works").
///
/// parse_discovery_output turns the output of --host-discovery-script into a
/// host list or a one-line error (pure, discovery.cpp). run_discovery_script
/// runs the script once with /bin/sh -c in its own process group, bounded by
/// --discovery-timeout and 1 MiB of output, and always SIGKILLs the whole
/// group afterwards so no child outlives a run (discovery_runner.cpp).
///
/// run_elastic_job (elastic_run.cpp) runs the script once before anything
/// starts (a failure there ends the job with exit_code::kLaunch), then on its
/// own thread every --discovery-interval after the previous run ended, and
/// hands each result to ElasticDriver (elastic_driver.h). A failing later run
/// keeps the previous host set; each distinct reason is logged once.
#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hvd/launcher/hosts/hosts.h"

namespace hvd::launcher {

/// Either a host list or a one-line reason. Discovery failures are values,
/// not exceptions, because after the first run a failing script must only be
/// logged (the previous host set is kept), never tear the job down.
struct DiscoveryResult {
  std::vector<HostSpec> hosts;
  /// Host name -> an opaque token that changes when the host is replaced or
  /// restarted (Kubernetes: the pod's UID, IP and container restart counts).
  /// Hosts missing here (every host of a discovery script): unknown.
  std::map<std::string, std::string> incarnations;
  std::optional<std::string> error;  ///< set => hosts is meaningless
  bool ok() const { return !error.has_value(); }
};

/// Parses script output: one host entry per line in the -H grammar
/// (hosts.h: `host`, `host:slots`, `[ipv6]`, `[ipv6]:slots`); blank lines
/// and lines starting with `#` (after leading spaces) are ignored;
/// surrounding whitespace is trimmed. `default_slots` (--slots-per-host,
/// else 1) applies to lines without `:slots`. A malformed entry (the
/// grammar's reason), embedded whitespace or a host listed twice yields an
/// error naming the line number and text. Empty output is a valid, empty set.
DiscoveryResult parse_discovery_output(const std::string& output, int default_slots);

/// `text` safe for a one-line message: hvd::shown (printable ASCII as is,
/// `\` doubled, newline, tab and CR as `\n`, `\t`, `\r`, every other byte
/// as `\xNN`), cut after `max_chars` bytes of input with `... (N bytes)`.
/// Script output is shown through it, never raw.
std::string printable_excerpt(std::string_view text, std::size_t max_chars);

struct DiscoveryScriptOptions {
  /// --host-discovery-script: a path or shell command, run with /bin/sh -c.
  std::string script;
  /// --slots-per-host, else 1.
  int default_slots = 1;
  /// A run taking longer is killed (its whole process group: children too).
  std::chrono::milliseconds timeout{10000};
  /// Output beyond this many bytes makes the run fail ("printed more than").
  std::size_t max_output_bytes = 1 << 20;
  /// When this descriptor becomes readable (hvdrun is stopping), a run in
  /// progress is killed with its group at once and reported as stopped; a
  /// run asked for while it is readable does not start. -1: none.
  int cancel_fd = -1;
};

/// Runs the discovery script once, in its own process group, stdin from
/// /dev/null, and parses its stdout. Never throws for the script's faults:
/// a non-zero exit ("host discovery script 'S' exited with code 2: <last
/// stderr line>"), a signal, a timeout ("... timed out after 10 s and was
/// killed") or malformed output come back as DiscoveryResult::error, one
/// line. Returns within timeout + a small bound even if the script's
/// children keep its pipes open. A guard process kills the script's whole
/// group should hvdrun die during the run, even by SIGKILL
/// (process/group_guard.h).
DiscoveryResult run_discovery_script(const DiscoveryScriptOptions& options);

}  // namespace hvd::launcher
