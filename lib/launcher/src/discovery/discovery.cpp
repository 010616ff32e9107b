#include "hvd/launcher/discovery/discovery.h"

#include <cctype>
#include <set>
#include <sstream>

namespace hvd::launcher {
namespace {

DiscoveryResult fail(int line_no, const std::string& line, const std::string& why) {
  DiscoveryResult r;
  r.error = "malformed discovery output line " + std::to_string(line_no) + " '" + line + "': " + why;
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
