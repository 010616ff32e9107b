#include "hvd/launcher/hosts/network.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <optional>
#include <set>

#include "hvd/common/error.h"
#include "hvd/common/net.h"
#include "hvd/launcher/hosts/ssh_config.h"

namespace hvd::launcher {

namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

std::string strip_brackets(const std::string& host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') return host.substr(1, host.size() - 2);
  return host;
}

/// Numeric address forms: canonical text for comparison, or nullopt.
std::optional<std::string> canonical_numeric(const std::string& host) {
  std::string h = strip_brackets(host);
  size_t pct = h.find('%');
  if (pct != std::string::npos) h.resize(pct);
  in_addr a4{};
  in6_addr a6{};
  char buf[INET6_ADDRSTRLEN] = {0};
  if (inet_pton(AF_INET, h.c_str(), &a4) == 1) {
    inet_ntop(AF_INET, &a4, buf, sizeof(buf));
    return std::string(buf);
  }
  if (inet_pton(AF_INET6, h.c_str(), &a6) == 1) {
    inet_ntop(AF_INET6, &a6, buf, sizeof(buf));
    return std::string(buf);
  }
  return std::nullopt;
}

bool is_loopback_numeric(const std::string& canonical) {
  return canonical.rfind("127.", 0) == 0 || canonical == "::1" || canonical.rfind("::ffff:127.", 0) == 0;
}

bool is_local_numeric(const std::string& canonical) {
  if (is_loopback_numeric(canonical)) return true;
  for (const auto& a : local_interface_addresses()) {
    if (a.address == canonical) return true;
  }
  return false;
}

/// The numeric addresses of `host`, looked up within `timeout` (hvd::net::resolve).
std::vector<std::string> resolve_bounded(const std::string& host, std::chrono::milliseconds timeout) {
  std::vector<std::string> out;
  for (const auto& a : net::resolve(host, 0, Deadline::after(timeout), {SOCK_DGRAM, false, false}).addresses) {
    out.push_back(a.host());
  }
  return out;
}

std::string short_name(const std::string& name) { return name.substr(0, name.find('.')); }

}  // namespace

std::vector<InterfaceAddress> local_interface_addresses() {
  std::vector<InterfaceAddress> out;
  try {
    for (auto& a : net::interface_addresses()) {
      if (a.up) out.push_back(std::move(a));
    }
  } catch (const IoError&) {
    // Without the list only loopback names and addresses count as local.
  }
  return out;
}

bool is_local_host(const std::string& host, std::chrono::milliseconds resolve_timeout) {
  std::string h = lower(strip_brackets(host));
  if (h.empty()) return false;
  if (h == "localhost" || h == "localhost.localdomain" || h == "ip6-localhost") return true;
  if (auto numeric = canonical_numeric(h)) return is_local_numeric(*numeric);
  std::string self = lower(net::local_hostname(""));
  if (!self.empty()) {
    if (h == self) return true;
    // "node1" vs "node1.example.com": the same machine when one of them is
    // unqualified and the first labels agree.
    bool one_unqualified = h.find('.') == std::string::npos || self.find('.') == std::string::npos;
    if (one_unqualified && short_name(h) == short_name(self)) return true;
  }
  std::vector<std::string> addrs = resolve_bounded(h, resolve_timeout);
  if (addrs.empty()) return false;
  for (const auto& a : addrs) {
    auto canon = canonical_numeric(a);
    if (!canon || !is_local_numeric(*canon)) return false;
  }
  return true;
}

std::string route_source_address(const std::string& host, std::chrono::milliseconds resolve_timeout) {
  std::string h = strip_brackets(host);
  if (auto numeric = canonical_numeric(h)) h = *numeric;  // without a scope id
  const net::Resolution to = net::resolve(h, 9, Deadline::after(resolve_timeout), {SOCK_DGRAM, false, false});
  if (!to.ok()) {
    throw IoError(fmt::format("{}: cannot resolve host name (within {} ms)", host, resolve_timeout.count()));
  }
  std::string last_error;
  std::string source = net::source_address_towards(to.addresses, &last_error);
  if (source.empty()) throw IoError(fmt::format("{}: no route to host ({})", host, last_error));
  return source;
}

std::string choose_driver_address(const std::vector<std::string>& interfaces, const std::vector<HostSpec>& hosts) {
  if (!interfaces.empty()) {
    auto addrs = local_interface_addresses();
    for (const auto& nic : interfaces) {
      const InterfaceAddress* v4 = nullptr;
      const InterfaceAddress* v6 = nullptr;
      for (const auto& a : addrs) {
        if (a.interface != nic) continue;
        if (!a.ipv6 && !v4) v4 = &a;
        // Link-local IPv6 needs a scope id; prefer a routable one.
        if (a.ipv6 && !v6 && a.address.rfind("fe80", 0) != 0) v6 = &a;
      }
      if (v4) return v4->address;
      if (v6) return v6->address;
    }
    std::set<std::string> names;
    for (const auto& a : addrs) names.insert(a.interface);
    std::string available;
    for (const auto& n : names) available += (available.empty() ? "" : ", ") + n;
    std::string asked;
    for (const auto& n : interfaces) asked += (asked.empty() ? "" : ",") + n;
    throw InvalidArgument(
        fmt::format("--network-interface {}: no such interface with an address on this host (available: {})", asked,
                    available.empty() ? "none" : available));
  }
  // An ~/.ssh/config alias is routed to by its HostName. A host reached
  // through a ProxyJump or ProxyCommand may have no route from here: the
  // next host decides, and when none can, the user must name the interface.
  std::vector<std::string> proxied;
  for (const auto& h : hosts) {
    if (is_local_host(h.name)) continue;
    const ssh::ConfiguredRoute route = ssh::configured_route(h.name);
    if (route.proxy.empty()) return route_source_address(route.hostname);
    try {
      return route_source_address(route.hostname);
    } catch (const IoError& e) {
      proxied.push_back(fmt::format("{} (through {}): {}", h.name, route.proxy, e.what()));
    }
  }
  if (!proxied.empty()) {
    throw InvalidArgument(
        fmt::format("no route from here to the hosts, which are reached through a proxy ({}); name the interface the "
                    "workers reach this machine on with --network-interface",
                    fmt::join(proxied, "; ")));
  }
  return "127.0.0.1";
}

}  // namespace hvd::launcher
