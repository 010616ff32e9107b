#include "hvd/launcher/hosts/hosts.h"

#include <fmt/format.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "hvd/common/error.h"

namespace hvd::launcher {

namespace {

std::string trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

bool valid_hostname(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    unsigned char u = static_cast<unsigned char>(c);
    if (!(std::isalnum(u) || c == '.' || c == '-' || c == '_')) return false;
  }
  return true;
}

bool valid_ipv6_literal(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    unsigned char u = static_cast<unsigned char>(c);
    if (!(std::isxdigit(u) || c == ':' || c == '.' || c == '%' || std::isalnum(u))) return false;
  }
  return name.find(':') != std::string::npos;
}

/// Parses a slot count; `what` names the entry for messages.
int parse_slots(const std::string& text, const std::string& entry) {
  if (text.empty()) {
    throw InvalidArgument(fmt::format("'{}': missing slot count after ':' (write host:N, e.g. {}2)", entry, entry));
  }
  bool digits = true;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i])) && !(i == 0 && text[i] == '-')) digits = false;
  }
  if (!digits || text == "-") {
    throw InvalidArgument(fmt::format("'{}': slot count '{}' is not a number", entry, text));
  }
  if (text[0] == '-') {
    throw InvalidArgument(fmt::format("'{}': slot count must be at least 1, not {}", entry, text));
  }
  if (text.size() > 6) {
    throw InvalidArgument(fmt::format("'{}': slot count {} is too large", entry, text));
  }
  int slots = std::stoi(text);
  if (slots < 1) {
    throw InvalidArgument(fmt::format("'{}': slot count must be at least 1, not {}", entry, text));
  }
  return slots;
}

/// One "host[:N]" entry (already trimmed, non-empty).
HostSpec parse_entry(const std::string& entry) {
  HostSpec spec;
  std::string slots_text;
  bool has_slots = false;
  if (entry[0] == '[') {
    size_t close = entry.find(']');
    if (close == std::string::npos) {
      throw InvalidArgument(fmt::format("'{}': missing ']' after IPv6 address", entry));
    }
    spec.name = entry.substr(1, close - 1);
    if (!valid_ipv6_literal(spec.name)) {
      throw InvalidArgument(fmt::format("'{}': '{}' is not an IPv6 address", entry, spec.name));
    }
    std::string rest = entry.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') {
        throw InvalidArgument(fmt::format("'{}': expected ':N' after ']'", entry));
      }
      has_slots = true;
      slots_text = rest.substr(1);
    }
  } else {
    size_t colon = entry.find(':');
    if (colon != std::string::npos && entry.find(':', colon + 1) != std::string::npos) {
      throw InvalidArgument(fmt::format("'{}': too many ':' (put IPv6 addresses in brackets: [{}]:N)", entry, entry));
    }
    spec.name = entry.substr(0, colon);
    if (colon != std::string::npos) {
      has_slots = true;
      slots_text = entry.substr(colon + 1);
    }
    if (spec.name.empty()) {
      throw InvalidArgument(fmt::format("'{}': missing host name before ':'", entry));
    }
    if (!valid_hostname(spec.name)) {
      throw InvalidArgument(
          fmt::format("'{}': '{}' is not a valid host name (letters, digits, '.', '-', '_')", entry, spec.name));
    }
  }
  spec.slots = has_slots ? parse_slots(slots_text, entry) : 1;
  return spec;
}

void check_duplicates(const std::vector<HostSpec>& hosts, const HostSpec& next) {
  for (const auto& h : hosts) {
    if (h.name == next.name) {
      throw InvalidArgument(
          fmt::format("host '{}' is listed twice; list each host once with its total slots", next.name));
    }
  }
}

}  // namespace

std::vector<HostSpec> parse_hosts(const std::string& text) {
  std::vector<HostSpec> hosts;
  if (trim(text).empty()) throw InvalidArgument("-H: empty host list (expected e.g. -H host1:2,host2:2)");
  std::string item;
  std::stringstream ss(text);
  size_t index = 0;
  // std::getline drops a trailing empty field; check for it explicitly.
  if (text.back() == ',') {
    throw InvalidArgument(fmt::format("-H '{}': empty host entry at the end (trailing ',')", text));
  }
  while (std::getline(ss, item, ',')) {
    ++index;
    std::string entry = trim(item);
    if (entry.empty()) {
      throw InvalidArgument(fmt::format("-H '{}': empty host entry at position {}", text, index));
    }
    HostSpec spec = parse_entry(entry);
    check_duplicates(hosts, spec);
    hosts.push_back(spec);
  }
  return hosts;
}

std::vector<HostSpec> parse_hostfile_text(const std::string& text, const std::string& origin) {
  std::vector<HostSpec> hosts;
  std::stringstream ss(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(ss, raw)) {
    ++line_no;
    std::string line = raw;
    size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    line = trim(line);
    if (line.empty()) continue;
    try {
      std::stringstream fields(line);
      std::string host_field, field;
      fields >> host_field;
      std::optional<int> slots;
      while (fields >> field) {
        size_t eq = field.find('=');
        std::string key = field.substr(0, eq);
        std::string value = eq == std::string::npos ? "" : field.substr(eq + 1);
        if (key == "slots") {
          if (eq == std::string::npos) throw InvalidArgument("'slots' needs a value: slots=N");
          if (slots) throw InvalidArgument("'slots=' given twice");
          slots = parse_slots(value, host_field + " slots=" + value);
        } else if (key == "max_slots" || key == "max-slots") {
          if (eq == std::string::npos || value.empty()) {
            throw InvalidArgument(fmt::format("'{}' needs a value: {}=N", key, key));
          }
          // OpenMPI's oversubscription limit: accepted and ignored.
        } else {
          throw InvalidArgument(fmt::format("unexpected '{}' (expected 'host slots=N', 'host:N' or 'host')", field));
        }
      }
      HostSpec spec = parse_entry(host_field);
      if (slots) {
        if (host_field.find(':') != std::string::npos && host_field[0] != '[') {
          throw InvalidArgument(fmt::format("'{}': give slots either as host:N or as slots=N, not both", host_field));
        }
        spec.slots = *slots;
      }
      check_duplicates(hosts, spec);
      hosts.push_back(spec);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(fmt::format("{}:{}: {}", origin, line_no, e.what()));
    }
  }
  if (hosts.empty()) throw InvalidArgument(fmt::format("{}: no hosts in hostfile", origin));
  return hosts;
}

std::vector<HostSpec> parse_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument(fmt::format("cannot read hostfile '{}': {}", path, std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InvalidArgument(fmt::format("cannot read hostfile '{}'", path));
  return parse_hostfile_text(ss.str(), path);
}

std::string format_hosts(const std::vector<HostSpec>& hosts) {
  std::string out;
  for (const auto& h : hosts) {
    if (!out.empty()) out += ", ";
    if (h.name.find(':') != std::string::npos) {
      out += fmt::format("[{}]:{}", h.name, h.slots);
    } else {
      out += fmt::format("{}:{}", h.name, h.slots);
    }
  }
  return out;
}

long total_slots(const std::vector<HostSpec>& hosts) {
  long total = 0;
  for (const auto& h : hosts) total += h.slots;
  return total;
}

bool looks_like_host_entry(const std::string& text) {
  if (text.empty() || text.find(',') != std::string::npos) return false;
  size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 >= text.size()) return false;
  for (size_t i = colon + 1; i < text.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return false;
  }
  std::string name = text.substr(0, colon);
  if (name.size() >= 2 && name.front() == '[' && name.back() == ']') {
    return valid_ipv6_literal(name.substr(1, name.size() - 2));
  }
  return valid_hostname(name);
}

}  // namespace hvd::launcher
