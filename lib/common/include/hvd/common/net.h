#pragma once
/// The one place that resolves host names, opens outgoing TCP connections,
/// asks the kernel for a route's source address and lists interface
/// addresses. The store client, the transport, the SSH spawner, the launcher's
/// host logic and the worker's interface selection all use it, so each of
/// those jobs is written (and fixed) once.
///
/// Errors are values here, not exceptions: each caller words its own message
/// ("rendezvous store 10.0.0.1:4321 unreachable: ...", "node2: no route to
/// host (198.18.0.9:22)") and decides whether to retry (the transport retries
/// refused connections until its deadline, the SSH spawner does not).
/// Every socket created here is SOCK_CLOEXEC, so no child process inherits it.
#include "hvd/common/io.h"

#include <sys/socket.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hvd::net {

/// One IPv4 or IPv6 socket address (from getaddrinfo or the kernel).
class Address {
 public:
  Address() = default;
  /// Copies `len` bytes of `sa` (at most sizeof(sockaddr_storage)).
  Address(const sockaddr* sa, socklen_t len);

  bool empty() const { return len_ == 0; }
  int family() const { return storage_.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage_); }
  socklen_t length() const { return len_; }
  uint16_t port() const;
  /// Numeric host without brackets or scope id: "10.0.0.1", "::1"; "" when empty.
  std::string host() const;
  /// "10.0.0.1:22" or "[::1]:22".
  std::string host_port() const;

 private:
  sockaddr_storage storage_{};
  socklen_t len_ = 0;
};

struct ResolveOptions {
  /// SOCK_STREAM or SOCK_DGRAM: getaddrinfo returns one entry per address
  /// for the type asked.
  int socktype = SOCK_STREAM;
  /// AI_PASSIVE: an empty host means the wildcard address (listeners).
  bool passive = false;
  /// AI_NUMERICHOST: only address literals; a name fails at once without
  /// asking any resolver.
  bool numeric_only = false;
  /// AF_UNSPEC, or AF_INET / AF_INET6 for one family only.
  int family = AF_UNSPEC;
};

/// What resolve() found: the addresses in getaddrinfo's order, or why there
/// are none.
struct Resolution {
  std::vector<Address> addresses;
  /// Empty on success; else gai_strerror's text ("Name or service not
  /// known"), or "timed out after N ms".
  std::string error;
  bool timed_out = false;
  bool ok() const { return !addresses.empty(); }
};

/// getaddrinfo for host:port, bounded by `deadline`. Address literals and
/// Deadline::never() are resolved on the calling thread; a name with a
/// finite deadline is looked up on a detached helper thread, because glibc's
/// getaddrinfo cannot be interrupted: a hung resolver then costs the caller
/// at most the time left to `deadline` (the helper ends when the resolver
/// gives up).
Resolution resolve(const std::string& host, uint16_t port, Deadline deadline, const ResolveOptions& options = {});

struct ConnectOptions {
  /// When set, checked at least every 100 ms while a connect is pending;
  /// true ends the attempt with Status::Cancelled (another host already
  /// failed, the job is shutting down).
  const std::atomic<bool>* cancel = nullptr;
  /// TCP_NODELAY on the connected socket (every user sends small requests).
  bool no_delay = true;
  /// AF_UNSPEC (every address), or AF_INET / AF_INET6: only that family's
  /// addresses are tried (ssh_config AddressFamily).
  int family = AF_UNSPEC;
  /// Local address literals to bind before connecting (ssh_config
  /// BindAddress, or BindInterface's addresses); each peer address uses the
  /// first of its family, and is skipped when there is none (error
  /// EAFNOSUPPORT); empty: the kernel chooses. A bind that fails is that
  /// address's error.
  std::vector<std::string> bind_addresses;
};

struct ConnectResult {
  enum class Status {
    Connected,
    ResolveFailed,  ///< the name does not resolve: see resolve_error
    Failed,  ///< every address refused or failed; `error` is the last one's errno
    TimedOut,  ///< the deadline passed while `address` was pending, or while resolving (`address` empty)
    Cancelled,  ///< ConnectOptions::cancel became true while `address` was pending
  };
  Status status = Status::Failed;
  /// Connected: the socket, non-blocking and SOCK_CLOEXEC.
  UniqueFd fd;
  /// Connected: the peer. Otherwise the last address tried (empty when
  /// resolution failed).
  Address address;
  /// Failed: errno of the last address (from socket(), connect() or SO_ERROR).
  int error = 0;
  /// ResolveFailed and TimedOut while resolving: Resolution::error.
  std::string resolve_error;
  bool ok() const { return status == Status::Connected; }
};

/// Resolves host:port and tries each address in turn with a non-blocking
/// connect() and poll(), all before `deadline`; returns at the first address
/// that accepts, at the deadline, or on cancel. One pass, no retry: callers
/// that wait for a peer to start listening loop over this themselves.
ConnectResult connect_tcp(const std::string& host, uint16_t port, Deadline deadline,
                          const ConnectOptions& options = {});

/// The local address the kernel would use to send to the first of
/// `destinations` it has a route for: a UDP socket is connect()ed, which
/// selects a route and sends nothing. "" when none has a route; then `error`
/// (if given) holds the last errno's text.
std::string source_address_towards(const std::vector<Address>& destinations, std::string* error = nullptr);

/// An address assigned to a local network interface.
struct InterfaceAddress {
  std::string interface;  ///< "lo", "eth0"
  std::string address;  ///< numeric, without brackets or scope id
  bool ipv6 = false;
  bool up = false;  ///< IFF_UP
  bool loopback = false;  ///< IFF_LOOPBACK
};

/// Every IPv4 and IPv6 address of every local interface, up or not, in
/// getifaddrs order. IoError when getifaddrs fails.
std::vector<InterfaceAddress> interface_addresses();

/// This machine's host name as gethostname(2) reports it; `fallback` when
/// it cannot be read.
std::string local_hostname(const std::string& fallback = "localhost");

}  // namespace hvd::net
