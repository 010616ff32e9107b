#include "hvd/launcher/hosts/hosts.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "hvd/common/error.h"
#include "hvd/common/text.h"

namespace hvd::launcher {

namespace {

bool valid_hostname(const std::string& name) {
  if (name.empty()) return false;
  for (char c : name) {
    unsigned char u = static_cast<unsigned char>(c);
    if (!(std::isalnum(u) || c == '.' || c == '-' || c == '_')) return false;
  }
  return true;
}

bool valid_ipv6_literal(const std::string& name) {
  if (name.empty() || name.size() > kMaxHostName) return false;
  for (char c : name) {
    unsigned char u = static_cast<unsigned char>(c);
    if (!(std::isxdigit(u) || c == ':' || c == '.' || c == '%' || std::isalnum(u))) return false;
  }
  return name.find(':') != std::string::npos;
}

/// Why `text` is not a slot count, or none (the count is then in *slots).
/// `entry` only completes the hint for a missing count.
std::optional<std::string> slot_count_error(const std::string& text, const std::string& entry, int* slots) {
  if (text.empty()) return fmt::format("missing slot count after ':' (write host:N, e.g. {}2)", shown(entry));
  bool digits = true;
  for (size_t i = 0; i < text.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i])) && !(i == 0 && text[i] == '-')) digits = false;
  }
  if (!digits || text == "-") return fmt::format("slot count '{}' is not a number", shown(text));
  if (text[0] == '-') return fmt::format("slot count must be at least 1, not {}", shown(text));
  if (text.size() > 6) return fmt::format("slot count {} is too large", shown(text));
  *slots = std::stoi(text);
  if (*slots < 1) return fmt::format("slot count must be at least 1, not {}", text);
  return std::nullopt;
}

/// The name part of the grammar: splits `entry` into the host name (IPv6
/// without brackets) and the text after its ':' (`slots_text`, set only when
/// the entry has one). Returns why the entry is malformed, or none.
std::optional<std::string> split_entry(const std::string& entry, std::string* name,
                                       std::optional<std::string>* slots_text) {
  if (!entry.empty() && entry[0] == '[') {
    size_t close = entry.find(']');
    if (close == std::string::npos) return std::string("missing ']' after IPv6 address");
    *name = entry.substr(1, close - 1);
    if (!valid_ipv6_literal(*name)) return fmt::format("'{}' is not an IPv6 address", shown(*name));
    std::string rest = entry.substr(close + 1);
    if (!rest.empty()) {
      if (rest[0] != ':') return std::string("expected ':N' after ']'");
      *slots_text = rest.substr(1);
    }
    return std::nullopt;
  }
  size_t colon = entry.find(':');
  if (colon != std::string::npos && entry.find(':', colon + 1) != std::string::npos) {
    return fmt::format("too many ':' (put IPv6 addresses in brackets: [{}]:N)", shown(entry));
  }
  *name = entry.substr(0, colon);
  if (colon != std::string::npos) *slots_text = entry.substr(colon + 1);
  if (name->empty()) {
    return std::string(colon == std::string::npos ? "empty host entry" : "missing host name before ':'");
  }
  if (auto why = host_name_error(*name)) return why;
  return std::nullopt;
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

std::optional<std::string> host_name_error(const std::string& name) {
  if (name.empty()) return std::string("empty host name");
  if (name.size() > kMaxHostName) {
    return fmt::format("host name '{}' is {} bytes long; at most {} (DNS's limit)", shown(name, 32), name.size(),
                       kMaxHostName);
  }
  if (!valid_hostname(name)) {
    return fmt::format("'{}' is not a valid host name (letters, digits, '.', '-', '_')", shown(name));
  }
  return std::nullopt;
}

std::string trim_spaces(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

HostEntry try_parse_host_entry(const std::string& entry, int default_slots) {
  HostEntry out;
  std::optional<std::string> slots_text;
  out.error = split_entry(entry, &out.host.name, &slots_text);
  if (!out.ok()) return out;
  out.slots_given = slots_text.has_value();
  out.host.slots = default_slots;
  if (slots_text) out.error = slot_count_error(*slots_text, entry, &out.host.slots);
  return out;
}

HostSpec parse_host_entry(const std::string& entry, int default_slots) {
  HostEntry parsed = try_parse_host_entry(entry, default_slots);
  if (!parsed.ok()) throw InvalidArgument(fmt::format("'{}': {}", shown(entry), *parsed.error));
  return parsed.host;
}

std::vector<HostSpec> parse_hosts(const std::string& text) {
  std::vector<HostSpec> hosts;
  if (trim_spaces(text).empty()) throw InvalidArgument("-H: empty host list (expected e.g. -H host1:2,host2:2)");
  std::string item;
  std::stringstream ss(text);
  size_t index = 0;
  // std::getline drops a trailing empty field; check for it explicitly.
  if (text.back() == ',') {
    throw InvalidArgument(fmt::format("-H '{}': empty host entry at the end (trailing ',')", shown(text)));
  }
  while (std::getline(ss, item, ',')) {
    ++index;
    std::string entry = trim_spaces(item);
    if (entry.empty()) {
      throw InvalidArgument(fmt::format("-H '{}': empty host entry at position {}", shown(text), index));
    }
    HostSpec spec = parse_host_entry(entry);
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
    line = trim_spaces(line);
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
          const std::string entry = host_field + " slots=" + value;
          int count = 0;
          if (auto why = slot_count_error(value, entry, &count)) {
            throw InvalidArgument(fmt::format("'{}': {}", shown(entry), *why));
          }
          slots = count;
        } else if (key == "max_slots" || key == "max-slots") {
          if (eq == std::string::npos || value.empty()) {
            throw InvalidArgument(fmt::format("'{}' needs a value: {}=N", shown(key), shown(key)));
          }
          // OpenMPI's oversubscription limit: accepted and ignored.
        } else {
          throw InvalidArgument(
              fmt::format("unexpected '{}' (expected 'host slots=N', 'host:N' or 'host')", shown(field)));
        }
      }
      HostEntry parsed = try_parse_host_entry(host_field);
      if (!parsed.ok()) throw InvalidArgument(fmt::format("'{}': {}", shown(host_field), *parsed.error));
      HostSpec spec = parsed.host;
      if (slots) {
        if (parsed.slots_given) {
          throw InvalidArgument(
              fmt::format("'{}': give slots either as host:N or as slots=N, not both", shown(host_field)));
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
  // An ifstream opens a directory and then reads nothing, which would read
  // as "no hosts in hostfile".
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    throw InvalidArgument(fmt::format("hostfile '{}' is a directory, not a file of host[:slots] lines", path));
  }
  std::ifstream in(path);
  if (!in) throw InvalidArgument(fmt::format("cannot read hostfile '{}': {}", path, std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw InvalidArgument(fmt::format("cannot read hostfile '{}'", path));
  return parse_hostfile_text(ss.str(), path);
}

std::string format_host(const HostSpec& host) {
  if (host.name.find(':') != std::string::npos) return fmt::format("[{}]:{}", host.name, host.slots);
  return fmt::format("{}:{}", host.name, host.slots);
}

std::string format_hosts(const std::vector<HostSpec>& hosts) {
  std::string out;
  for (const auto& h : hosts) {
    if (!out.empty()) out += ", ";
    out += format_host(h);
  }
  return out;
}

long total_slots(const std::vector<HostSpec>& hosts) {
  long total = 0;
  for (const auto& h : hosts) total += h.slots;
  return total;
}

bool looks_like_host_entry(const std::string& text) {
  if (text.find(',') != std::string::npos) return false;
  std::string name;
  std::optional<std::string> slots_text;
  if (split_entry(text, &name, &slots_text) || !slots_text || slots_text->empty()) return false;
  for (char c : *slots_text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

}  // namespace hvd::launcher
