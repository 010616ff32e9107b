#pragma once
/// Host lists: `-H h1:2,h2:4` and `--hostfile` files, parsed into HostSpecs
/// in the order given (placement fills hosts in that order).
///
/// Every malformed input throws hvd::InvalidArgument with one line that
/// names the offending entry (and `path:LINE:` for hostfiles), because these
/// are the mistakes users make most and horovodrun reports them poorly.
///
/// Rules (docs/cli.md "Hosts"):
///  * `host:N` with N a positive integer; a bare `host` means 1 slot.
///  * IPv6 addresses go in brackets: `[::1]:2`, `[fe80::1]` (the name is
///    stored without brackets).
///  * A host listed twice is an error: silently merging or overwriting would
///    change the placement the user thinks they asked for.
///  * Hostfile lines: `host slots=N`, `host:N` or `host`; OpenMPI's
///    `max_slots=M` is accepted and ignored; `#` starts a comment; blank
///    lines are skipped.
#include <string>
#include <vector>

#include "hvd/launcher/plan/job_plan.h"

namespace hvd::launcher {

/// Parses the -H text. Throws InvalidArgument on any malformed entry.
std::vector<HostSpec> parse_hosts(const std::string& text);

/// Parses hostfile contents; `origin` (the path) prefixes error messages as
/// "origin:LINE: ...". Throws InvalidArgument.
std::vector<HostSpec> parse_hostfile_text(const std::string& text, const std::string& origin);

/// Reads and parses a hostfile. Missing/unreadable files and empty host lists
/// throw InvalidArgument naming the path.
std::vector<HostSpec> parse_hostfile(const std::string& path);

/// "a:2, b:1" -- for messages and the dry-run header.
std::string format_hosts(const std::vector<HostSpec>& hosts);

/// Sum of all slots.
long total_slots(const std::vector<HostSpec>& hosts);

/// True if `text` has the shape of a -H entry ("node2:4", "[::1]:2"): used to
/// catch the `-H a:2 b:2 cmd` typo, where `b:2` would otherwise become the
/// worker command.
bool looks_like_host_entry(const std::string& text);

}  // namespace hvd::launcher
