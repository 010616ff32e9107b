#include "hvd/launcher/discovery/discovery.h"

#include <cctype>
#include <set>
#include <sstream>

namespace hvd::launcher {
namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

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
    const std::string line = trim(raw);
    if (line.empty() || line[0] == '#') continue;
    for (char c : line) {
      if (std::isspace(static_cast<unsigned char>(c))) return fail(line_no, line, "contains whitespace");
    }
    DiscoveredHost h;
    const auto colon = line.rfind(':');
    if (colon == std::string::npos) {
      h.host = line;
      h.slots = default_slots;
    } else {
      h.host = line.substr(0, colon);
      const std::string digits = line.substr(colon + 1);
      if (digits.empty() || digits.size() > 6) return fail(line_no, line, "slots must be a positive integer");
      for (char c : digits) {
        if (!std::isdigit(static_cast<unsigned char>(c))) return fail(line_no, line, "slots must be a positive integer");
      }
      h.slots = std::stoi(digits);
      if (h.slots < 1) return fail(line_no, line, "slots must be a positive integer");
    }
    if (h.host.empty()) return fail(line_no, line, "empty host name");
    if (!seen.insert(h.host).second) return fail(line_no, line, "host listed twice");
    result.hosts.push_back(std::move(h));
  }
  return result;
}

}  // namespace hvd::launcher
