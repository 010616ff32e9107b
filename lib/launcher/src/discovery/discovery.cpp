#include "hvd/launcher/discovery/discovery.h"

#include "hvd/common/text.h"

#include <cctype>
#include <cstdio>
#include <set>
#include <sstream>

namespace hvd::launcher {

// One escaping rule for outside text (hvd::shown, docs/security.md).
std::string printable_excerpt(std::string_view text, std::size_t max_chars) { return hvd::shown(text, max_chars); }

namespace {

/// Lines are shown quoted: a script's garbage (escape sequences, binary)
/// must never reach the terminal raw, nor flood it.
constexpr std::size_t kShownLineChars = 80;

DiscoveryResult fail(int line_no, const std::string& line, const std::string& why) {
  DiscoveryResult r;
  r.error = "malformed discovery output line " + std::to_string(line_no) + " '" +
            printable_excerpt(line, kShownLineChars) + "': " + printable_excerpt(why, 2 * kShownLineChars);
  return r;
}

}  // namespace

DiscoveryResult parse_discovery_output(const std::string& output, int default_slots) {
  DiscoveryResult result;
  if (default_slots < 1) {
    result.error = "slots per host must be >= 1, got " + std::to_string(default_slots);
    return result;
  }
  std::istringstream in(output);
  std::string raw;
  std::set<std::string> seen;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string line = trim_spaces(raw);
    if (line.empty() || line[0] == '#') continue;
    for (char c : line) {
      if (std::isspace(static_cast<unsigned char>(c))) return fail(line_no, line, "contains whitespace");
    }
    HostEntry entry = try_parse_host_entry(line, default_slots);
    if (!entry.ok()) return fail(line_no, line, *entry.error);
    if (!seen.insert(entry.host.name).second) return fail(line_no, line, "host listed twice");
    result.hosts.push_back(std::move(entry.host));
  }
  return result;
}

}  // namespace hvd::launcher
