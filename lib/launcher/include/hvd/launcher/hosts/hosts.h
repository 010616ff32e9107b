#pragma once
/// Hosts and their slots: the one `host[:N]` grammar, used by `-H` lists,
/// `--hostfile` files and the output of --host-discovery-script, and the
/// HostSpec every part of the launcher (placement, spawners, the elastic
/// driver) takes hosts as.
///
/// -H and hostfile mistakes throw hvd::InvalidArgument with one line that
/// names the offending entry (and `path:LINE:` for hostfiles), because these
/// are the mistakes users make most and horovodrun reports them poorly.
/// Discovery reports the same reasons as values (discovery.h).
///
/// Rules (docs/cli.md "Hosts"):
///  * `host:N` with N a positive integer; a bare `host` means 1 slot (in
///    discovery output: --slots-per-host).
///  * Host names are letters, digits, '.', '-' and '_'.
///  * IPv6 addresses go in brackets: `[::1]:2`, `[fe80::1%eth0]` (the name is
///    stored without brackets).
///  * A host listed twice is an error: silently merging or overwriting would
///    change the placement the user thinks they asked for.
///  * Hostfile lines: `host slots=N`, `host:N` or `host`; OpenMPI's
///    `max_slots=M` is accepted and ignored; `#` starts a comment; blank
///    lines are skipped.
#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

/// One host and the worker slots it offers. Static jobs get these from -H or
/// a hostfile, elastic jobs from each discovery run; both place ranks on
/// them in the order listed.
struct HostSpec {
  std::string name;  ///< as written (hostname or address); IPv6 without brackets
  int slots = 1;
  bool operator==(const HostSpec& o) const { return name == o.name && slots == o.slots; }
  bool operator!=(const HostSpec& o) const { return !(*this == o); }
};

/// One host entry parsed, or the reason it is malformed.
struct HostEntry {
  HostSpec host;
  /// The entry gave `:N` itself (false: `slots` is the default). A hostfile
  /// line must not give a count twice (`a:2 slots=3`).
  bool slots_given = false;
  /// Set => `host` is meaningless. One line, without the entry itself
  /// ("slot count 'x' is not a number"): each caller says where the entry
  /// came from (the -H text, `path:LINE`, the discovery output line).
  std::optional<std::string> error;
  bool ok() const { return !error.has_value(); }
};

/// The host-entry grammar: `name`, `name:N`, `[ipv6]`, `[ipv6]:N` (`entry`
/// already trimmed). A bare entry gets `default_slots` (>= 1). Never throws:
/// discovery runs while a job is running, and a bad line there must be
/// logged, not tear the job down.
HostEntry try_parse_host_entry(const std::string& entry, int default_slots = 1);

/// try_parse_host_entry for -H and hostfiles: throws InvalidArgument
/// "'ENTRY': reason" when the entry is malformed.
HostSpec parse_host_entry(const std::string& entry, int default_slots = 1);

/// `text` without leading and trailing whitespace: -H items, hostfile and
/// discovery lines are trimmed the same way before parsing.
std::string trim_spaces(const std::string& text);

/// The longest host name accepted (DNS's limit for a whole name).
inline constexpr std::size_t kMaxHostName = 253;

/// Why `name` cannot be a host name, or none: empty, longer than
/// kMaxHostName, or a character other than letters, digits, '.', '-', '_'
/// (control characters included). The reason quotes the name through
/// hvd::shown (escaped and cut). Every host source (-H, hostfiles,
/// discovery scripts, platforms, Kubernetes pods) goes through it.
std::optional<std::string> host_name_error(const std::string& name);

/// Parses the -H text. Throws InvalidArgument on any malformed entry.
std::vector<HostSpec> parse_hosts(const std::string& text);

/// Parses hostfile contents; `origin` (the path) prefixes error messages as
/// "origin:LINE: ...". Throws InvalidArgument.
std::vector<HostSpec> parse_hostfile_text(const std::string& text, const std::string& origin);

/// Reads and parses a hostfile. Missing/unreadable files and empty host lists
/// throw InvalidArgument naming the path.
std::vector<HostSpec> parse_hostfile(const std::string& path);

/// "a:2", "[::1]:2": one host in the grammar above, for messages and logs
/// (an IPv6 name in brackets, so the slot count stays unambiguous).
std::string format_host(const HostSpec& host);

/// "a:2, b:1" -- for messages and the dry-run header.
std::string format_hosts(const std::vector<HostSpec>& hosts);

/// Sum of all slots.
long total_slots(const std::vector<HostSpec>& hosts);

/// True if `text` has the shape of a -H entry ("node2:4", "[::1]:2"): used to
/// catch the `-H a:2 b:2 cmd` typo, where `b:2` would otherwise become the
/// worker command.
bool looks_like_host_entry(const std::string& text);

}  // namespace hvd::launcher
