#include "hvd/launcher/hosts/network.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <future>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "hvd/common/error.h"

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

std::string sockaddr_to_string(const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (sa->sa_family == AF_INET) {
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(sa)->sin_addr, buf, sizeof(buf));
  } else if (sa->sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(sa)->sin6_addr, buf, sizeof(buf));
  }
  return buf;
}

/// Numeric address forms: canonical text for comparison, or nullopt.
std::optional<std::string> canonical_numeric(const std::string& host, bool* ipv6 = nullptr) {
  std::string h = strip_brackets(host);
  size_t pct = h.find('%');
  if (pct != std::string::npos) h.resize(pct);
  in_addr a4{};
  in6_addr a6{};
  char buf[INET6_ADDRSTRLEN] = {0};
  if (inet_pton(AF_INET, h.c_str(), &a4) == 1) {
    if (ipv6) *ipv6 = false;
    inet_ntop(AF_INET, &a4, buf, sizeof(buf));
    return std::string(buf);
  }
  if (inet_pton(AF_INET6, h.c_str(), &a6) == 1) {
    if (ipv6) *ipv6 = true;
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

/// getaddrinfo bounded by `timeout`: the lookup runs on a detached thread so
/// a hung resolver costs at most `timeout`, never the whole launch.
std::vector<std::string> resolve_bounded(const std::string& host, std::chrono::milliseconds timeout) {
  auto promise = std::make_shared<std::promise<std::vector<std::string>>>();
  auto future = promise->get_future();
  std::thread([promise, host] {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_DGRAM;
    addrinfo* res = nullptr;
    std::vector<std::string> out;
    if (getaddrinfo(host.c_str(), nullptr, &hints, &res) == 0) {
      for (addrinfo* p = res; p != nullptr; p = p->ai_next) out.push_back(sockaddr_to_string(p->ai_addr));
      freeaddrinfo(res);
    }
    promise->set_value(std::move(out));
  }).detach();
  if (future.wait_for(timeout) != std::future_status::ready) return {};
  return future.get();
}

std::string this_hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

std::string short_name(const std::string& name) { return name.substr(0, name.find('.')); }

}  // namespace

std::vector<InterfaceAddress> local_interface_addresses() {
  std::vector<InterfaceAddress> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* p = list; p != nullptr; p = p->ifa_next) {
    if (p->ifa_addr == nullptr || (p->ifa_flags & IFF_UP) == 0) continue;
    int family = p->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    out.push_back({p->ifa_name, sockaddr_to_string(p->ifa_addr), family == AF_INET6});
  }
  freeifaddrs(list);
  return out;
}

bool is_local_host(const std::string& host, std::chrono::milliseconds resolve_timeout) {
  std::string h = lower(strip_brackets(host));
  if (h.empty()) return false;
  if (h == "localhost" || h == "localhost.localdomain" || h == "ip6-localhost") return true;
  if (auto numeric = canonical_numeric(h)) return is_local_numeric(*numeric);
  std::string self = lower(this_hostname());
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
  std::vector<std::string> addrs;
  if (auto numeric = canonical_numeric(h)) {
    addrs.push_back(*numeric);
  } else {
    addrs = resolve_bounded(h, resolve_timeout);
    if (addrs.empty()) {
      throw IoError(fmt::format("{}: cannot resolve host name (within {} ms)", host, resolve_timeout.count()));
    }
  }
  std::string last_error;
  for (const auto& addr : addrs) {
    bool v6 = false;
    canonical_numeric(addr, &v6);
    int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      last_error = std::strerror(errno);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = 0;
    if (v6) {
      auto* s6 = reinterpret_cast<sockaddr_in6*>(&ss);
      s6->sin6_family = AF_INET6;
      s6->sin6_port = htons(9);
      inet_pton(AF_INET6, addr.c_str(), &s6->sin6_addr);
      len = sizeof(sockaddr_in6);
    } else {
      auto* s4 = reinterpret_cast<sockaddr_in*>(&ss);
      s4->sin_family = AF_INET;
      s4->sin_port = htons(9);
      inet_pton(AF_INET, addr.c_str(), &s4->sin_addr);
      len = sizeof(sockaddr_in);
    }
    // connect() on a UDP socket only selects a route; nothing is sent.
    if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
      last_error = std::strerror(errno);
      close(fd);
      continue;
    }
    sockaddr_storage local{};
    socklen_t local_len = sizeof(local);
    int rc = getsockname(fd, reinterpret_cast<sockaddr*>(&local), &local_len);
    close(fd);
    if (rc == 0) return sockaddr_to_string(reinterpret_cast<sockaddr*>(&local));
    last_error = std::strerror(errno);
  }
  throw IoError(fmt::format("{}: no route to host ({})", host, last_error));
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
  for (const auto& h : hosts) {
    if (!is_local_host(h.name)) return route_source_address(h.name);
  }
  return "127.0.0.1";
}

}  // namespace hvd::launcher
