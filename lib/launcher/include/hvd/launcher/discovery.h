#pragma once
/// Host discovery for elastic jobs (issue 5, first increment).
///
/// Only the pure parsing half exists so far: the output of
/// --host-discovery-script is turned into a host list or a one-line error.
/// Running the script (bounded, process-group kill on timeout) and the
/// ElasticDriver state machine are not implemented yet; see docs/elastic.md.
#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

/// One host reported by discovery, with the number of slots it offers.
struct DiscoveredHost {
  std::string host;
  int slots = 1;
  bool operator==(const DiscoveredHost& o) const { return host == o.host && slots == o.slots; }
};

/// Either a host list or a one-line reason. Discovery failures are values,
/// not exceptions, because after the first run a failing script must only be
/// logged (the previous host set is kept), never tear the job down.
struct DiscoveryResult {
  std::vector<DiscoveredHost> hosts;
  std::optional<std::string> error;  ///< set => hosts is meaningless
  bool ok() const { return !error.has_value(); }
};

/// Parses script output: one `host` or `host:slots` per line; blank lines and
/// lines starting with `#` (after leading spaces) are ignored; surrounding
/// whitespace is trimmed. `default_slots` (--slots-per-host, else 1) applies
/// to lines without `:slots`. A malformed line (empty host, non-numeric or
/// non-positive slots, embedded whitespace) or a host listed twice yields an
/// error naming the line number and text. Empty output is a valid, empty set.
DiscoveryResult parse_discovery_output(const std::string& output, int default_slots);

}  // namespace hvd::launcher
