#include "hvd/common/net.h"

#include "hvd/common/error.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <memory>
#include <thread>

namespace hvd::net {

namespace {

/// How often a pending connect looks at ConnectOptions::cancel.
constexpr int kCancelPollMs = 100;

bool is_address_literal(const std::string& host) {
  const std::string h = host.substr(0, host.find('%'));  // fe80::1%eth0
  in_addr a4{};
  in6_addr a6{};
  return ::inet_pton(AF_INET, h.c_str(), &a4) == 1 || ::inet_pton(AF_INET6, h.c_str(), &a6) == 1;
}

Resolution resolve_now(const std::string& host, uint16_t port, const ResolveOptions& options) {
  addrinfo hints{};
  hints.ai_family = options.family;
  hints.ai_socktype = options.socktype;
  hints.ai_flags = (options.passive ? AI_PASSIVE : 0) | (options.numeric_only ? AI_NUMERICHOST : 0);
  const std::string service = std::to_string(port);
  addrinfo* list = nullptr;
  errno = 0;
  const int rc = ::getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &list);
  Resolution out;
  if (rc != 0) {
    out.error = rc == EAI_SYSTEM && errno != 0 ? std::strerror(errno) : ::gai_strerror(rc);
    return out;
  }
  for (addrinfo* a = list; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET || a->ai_family == AF_INET6) out.addresses.emplace_back(a->ai_addr, a->ai_addrlen);
  }
  ::freeaddrinfo(list);
  if (out.addresses.empty()) out.error = "no IPv4 or IPv6 address";
  return out;
}

/// Waits for a non-blocking connect on `fd` to finish. Returns Connected
/// with `err` = SO_ERROR (0: connected), or TimedOut / Cancelled.
ConnectResult::Status wait_connected(int fd, Deadline deadline, const std::atomic<bool>* cancel, int& err) {
  for (;;) {
    if (cancel != nullptr && cancel->load(std::memory_order_relaxed)) return ConnectResult::Status::Cancelled;
    int wait_ms = deadline.poll_timeout_ms();
    if (cancel != nullptr && (wait_ms < 0 || wait_ms > kCancelPollMs)) wait_ms = kCancelPollMs;
    pollfd p{fd, POLLOUT, 0};
    const int rc = ::poll(&p, 1, wait_ms);
    if (rc > 0) {
      socklen_t len = sizeof err;
      if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      return ConnectResult::Status::Connected;
    }
    if (rc < 0 && errno != EINTR) {
      err = errno;
      return ConnectResult::Status::Connected;
    }
    if (rc == 0 && deadline.expired()) return ConnectResult::Status::TimedOut;
  }
}

}  // namespace

// ---- Address ----------------------------------------------------------------

Address::Address(const sockaddr* sa, socklen_t len) {
  len_ = std::min<socklen_t>(len, sizeof storage_);
  std::memcpy(&storage_, sa, len_);
}

uint16_t Address::port() const {
  if (family() == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in*>(&storage_)->sin_port);
  if (family() == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_port);
  return 0;
}

std::string Address::host() const {
  char text[INET6_ADDRSTRLEN] = {0};
  if (family() == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage_)->sin_addr, text, sizeof text);
  } else if (family() == AF_INET6) {
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage_)->sin6_addr, text, sizeof text);
  }
  return text;
}

std::string Address::host_port() const {
  if (family() == AF_INET6) return fmt::format("[{}]:{}", host(), port());
  return fmt::format("{}:{}", host(), port());
}

// ---- resolving and connecting ------------------------------------------------

Resolution resolve(const std::string& host, uint16_t port, Deadline deadline, const ResolveOptions& options) {
  if (options.numeric_only || deadline.is_never() || host.empty() || is_address_literal(host)) {
    return resolve_now(host, port, options);
  }
  const auto started = Clock::now();
  auto promise = std::make_shared<std::promise<Resolution>>();
  auto future = promise->get_future();
  std::thread([promise, host, port, options] { promise->set_value(resolve_now(host, port, options)); }).detach();
  if (future.wait_until(deadline.at()) == std::future_status::ready) return future.get();
  Resolution out;
  out.timed_out = true;
  out.error = fmt::format("timed out after {} ms",
                          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started).count());
  return out;
}

ConnectResult connect_tcp(const std::string& host, uint16_t port, Deadline deadline, const ConnectOptions& options) {
  ConnectResult out;
  ResolveOptions ro;
  ro.family = options.family;
  Resolution resolved = resolve(host, port, deadline, ro);
  if (!resolved.ok()) {
    out.status = resolved.timed_out ? ConnectResult::Status::TimedOut : ConnectResult::Status::ResolveFailed;
    out.resolve_error = std::move(resolved.error);
    return out;
  }
  std::vector<Address> local;
  for (const std::string& b : options.bind_addresses) {
    ResolveOptions lo;
    lo.numeric_only = true;
    lo.passive = true;
    for (Address& l : resolve(b, 0, deadline, lo).addresses) local.push_back(std::move(l));
  }
  if (!options.bind_addresses.empty() && local.empty()) {
    out.status = ConnectResult::Status::Failed;
    out.error = EADDRNOTAVAIL;
    return out;
  }
  for (const Address& a : resolved.addresses) {
    out.address = a;
    const Address* bind_to = nullptr;
    for (const Address& l : local) {
      if (bind_to == nullptr && l.family() == a.family()) bind_to = &l;
    }
    if (!local.empty() && bind_to == nullptr) {
      out.error = EAFNOSUPPORT;  // the bind address is of the other family
      continue;
    }
    UniqueFd fd(::socket(a.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd) {
      out.error = errno;
      continue;
    }
    if (bind_to != nullptr && ::bind(fd.get(), bind_to->get(), bind_to->length()) != 0) {
      out.error = errno;
      continue;
    }
    if (::connect(fd.get(), a.get(), a.length()) != 0) {
      if (errno != EINPROGRESS && errno != EINTR) {  // after EINTR the connect goes on asynchronously
        out.error = errno;
        continue;
      }
      int err = 0;
      const auto status = wait_connected(fd.get(), deadline, options.cancel, err);
      if (status != ConnectResult::Status::Connected) {
        out.status = status;
        return out;
      }
      if (err != 0) {
        out.error = err;
        continue;
      }
    }
    if (options.no_delay) {
      int one = 1;
      ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    out.status = ConnectResult::Status::Connected;
    out.error = 0;
    out.fd = std::move(fd);
    return out;
  }
  out.status = ConnectResult::Status::Failed;
  return out;
}

// ---- routes and interfaces -----------------------------------------------------

std::string source_address_towards(const std::vector<Address>& destinations, std::string* error) {
  std::string last_error = "no address";
  for (const Address& to : destinations) {
    UniqueFd fd(::socket(to.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd) {
      last_error = std::strerror(errno);
      continue;
    }
    // Port 0 is refused by some stacks; the port does not affect the route.
    sockaddr_storage ss{};
    std::memcpy(&ss, to.get(), to.length());
    if (to.port() == 0) {
      if (to.family() == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = htons(9);
      if (to.family() == AF_INET6) reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = htons(9);
    }
    sockaddr_storage local{};
    socklen_t len = sizeof local;
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&ss), to.length()) != 0 ||
        ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &len) != 0) {
      last_error = std::strerror(errno);
      continue;
    }
    return Address(reinterpret_cast<const sockaddr*>(&local), len).host();
  }
  if (error != nullptr) *error = last_error;
  return {};
}

std::vector<InterfaceAddress> interface_addresses() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) {
    throw IoError(fmt::format("cannot list network interfaces (getifaddrs): {}", std::strerror(errno)));
  }
  std::vector<InterfaceAddress> out;
  for (ifaddrs* p = list; p != nullptr; p = p->ifa_next) {
    if (p->ifa_addr == nullptr) continue;
    const int family = p->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    const socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    InterfaceAddress a;
    a.interface = p->ifa_name;
    a.address = Address(p->ifa_addr, len).host();
    a.ipv6 = family == AF_INET6;
    a.up = (p->ifa_flags & IFF_UP) != 0;
    a.loopback = (p->ifa_flags & IFF_LOOPBACK) != 0;
    out.push_back(std::move(a));
  }
  ::freeifaddrs(list);
  return out;
}

std::string local_hostname(const std::string& fallback) {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return fallback;
  return buf;
}

}  // namespace hvd::net
