// hvd::net on loopback only: nothing here sends a packet off the machine or
// asks a DNS server ("localhost" comes from /etc/hosts).
#include "hvd/common/net.h"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <optional>
#include <thread>
#include <vector>

using namespace hvd;
using namespace std::chrono_literals;
using Status = net::ConnectResult::Status;

namespace {

/// A TCP socket bound to 127.0.0.1 on an ephemeral port; listening with
/// `backlog` when asked, else only bound (connects to it are refused, and
/// the port stays ours for the test).
struct LoopbackSocket {
  UniqueFd fd;
  uint16_t port = 0;

  explicit LoopbackSocket(std::optional<int> backlog) {
    fd.reset(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    REQUIRE(fd);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    if (backlog) REQUIRE(::listen(fd.get(), *backlog) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) == 0);
    port = ntohs(a.sin_port);
  }
};

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

/// Fills the accept queue of a listener that never accepts, so that further
/// SYNs are dropped and a connect stays pending. Returns the fillers (they
/// must stay open); fails the test if the queue does not fill.
std::vector<UniqueFd> fill_backlog(uint16_t port) {
  std::vector<UniqueFd> fillers;
  for (int i = 0; i < 16; ++i) {
    auto r = net::connect_tcp("127.0.0.1", port, Deadline::after(200ms));
    if (r.status == Status::TimedOut) return fillers;
    REQUIRE(r.ok());
    fillers.push_back(std::move(r.fd));
  }
  FAIL("the accept queue of a listener with backlog 0 did not fill after 16 connections");
  return fillers;
}

}  // namespace

TEST_CASE("net: connect_tcp to a listening port", "[common][net]") {
  LoopbackSocket listener(8);
  auto t0 = Clock::now();
  auto r = net::connect_tcp("127.0.0.1", listener.port, Deadline::after(2000ms));
  REQUIRE(r.status == Status::Connected);
  CHECK(seconds_since(t0) < 1.0);
  REQUIRE(r.fd);
  CHECK(r.address.host() == "127.0.0.1");
  CHECK(r.address.port() == listener.port);
  CHECK(r.address.host_port() == "127.0.0.1:" + std::to_string(listener.port));
  CHECK((::fcntl(r.fd.get(), F_GETFD) & FD_CLOEXEC) != 0);
  CHECK((::fcntl(r.fd.get(), F_GETFL) & O_NONBLOCK) != 0);
  // The connection is real: the listener accepts it and bytes flow.
  UniqueFd served(::accept(listener.fd.get(), nullptr, nullptr));
  REQUIRE(served);
  write_all(r.fd.get(), "hi", 2, Deadline::after(1000ms));
  char buf[2] = {0};
  read_exact(served.get(), buf, 2, Deadline::after(1000ms));
  CHECK(std::string(buf, 2) == "hi");

  // A name (from /etc/hosts) resolves and connects as well.
  auto named = net::connect_tcp("localhost", listener.port, Deadline::after(2000ms));
  CHECK(named.status == Status::Connected);
}

TEST_CASE("net: connect_tcp to a closed port is refused at once", "[common][net]") {
  LoopbackSocket bound_only(std::nullopt);
  auto t0 = Clock::now();
  auto r = net::connect_tcp("127.0.0.1", bound_only.port, Deadline::after(5000ms));
  CHECK(r.status == Status::Failed);
  CHECK(r.error == ECONNREFUSED);
  CHECK_FALSE(r.fd);
  CHECK(r.address.host_port() == "127.0.0.1:" + std::to_string(bound_only.port));
  CHECK(seconds_since(t0) < 2.0);
}

TEST_CASE("net: connect_tcp stops at the deadline against a listener that never accepts", "[common][net]") {
  LoopbackSocket listener(0);
  auto fillers = fill_backlog(listener.port);
  auto t0 = Clock::now();
  auto r = net::connect_tcp("127.0.0.1", listener.port, Deadline::after(300ms));
  const double took = seconds_since(t0);
  CHECK(r.status == Status::TimedOut);
  CHECK_FALSE(r.fd);
  CHECK(r.address.host() == "127.0.0.1");
  CHECK(took >= 0.25);
  CHECK(took < 2.0);
}

TEST_CASE("net: connect_tcp gives up promptly when cancelled", "[common][net]") {
  LoopbackSocket listener(0);
  auto fillers = fill_backlog(listener.port);
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(200ms);
    cancel = true;
  });
  net::ConnectOptions options;
  options.cancel = &cancel;
  auto t0 = Clock::now();
  auto r = net::connect_tcp("127.0.0.1", listener.port, Deadline::after(10000ms), options);
  const double took = seconds_since(t0);
  canceller.join();
  CHECK(r.status == Status::Cancelled);
  CHECK(took >= 0.15);
  CHECK(took < 2.0);
  // Already cancelled: no wait at all.
  auto again = net::connect_tcp("127.0.0.1", listener.port, Deadline::after(10000ms), options);
  CHECK(again.status == Status::Cancelled);
}

TEST_CASE("net: resolve literals, names and refusals", "[common][net]") {
  auto v4 = net::resolve("127.0.0.1", 80, Deadline::never());
  REQUIRE(v4.ok());
  CHECK(v4.error.empty());
  REQUIRE(v4.addresses.size() == 1);
  CHECK(v4.addresses[0].family() == AF_INET);
  CHECK(v4.addresses[0].host_port() == "127.0.0.1:80");

  auto v6 = net::resolve("::1", 8080, Deadline::after(1000ms), {SOCK_DGRAM, false, true});
  REQUIRE(v6.ok());
  CHECK(v6.addresses[0].family() == AF_INET6);
  CHECK(v6.addresses[0].host_port() == "[::1]:8080");

  // A bounded lookup of a name answers like an unbounded one.
  auto bounded = net::resolve("localhost", 7, Deadline::after(5000ms));
  auto unbounded = net::resolve("localhost", 7, Deadline::never());
  REQUIRE(bounded.ok());
  REQUIRE(bounded.addresses.size() == unbounded.addresses.size());
  for (std::size_t i = 0; i < bounded.addresses.size(); ++i) {
    CHECK(bounded.addresses[i].host_port() == unbounded.addresses[i].host_port());
  }

  // numeric_only never asks a resolver about a name.
  auto name = net::resolve("localhost", 7, Deadline::never(), {SOCK_STREAM, false, true});
  CHECK_FALSE(name.ok());
  CHECK_FALSE(name.error.empty());
  CHECK_FALSE(name.timed_out);

  // A wildcard for listeners.
  auto any = net::resolve("", 0, Deadline::never(), {SOCK_STREAM, true, false});
  REQUIRE(any.ok());
  CHECK((any.addresses[0].host() == "0.0.0.0" || any.addresses[0].host() == "::"));
}

TEST_CASE("net: source address towards loopback", "[common][net]") {
  auto to = net::resolve("127.0.0.1", 0, Deadline::never(), {SOCK_DGRAM, false, true});
  REQUIRE(to.ok());
  CHECK(net::source_address_towards(to.addresses) == "127.0.0.1");
  auto other = net::resolve("127.0.0.2", 9, Deadline::never(), {SOCK_DGRAM, false, true});
  CHECK(net::source_address_towards(other.addresses) == "127.0.0.1");
  std::string why;
  CHECK(net::source_address_towards({}, &why).empty());
  CHECK_FALSE(why.empty());
}

TEST_CASE("net: interface addresses include the loopback interface", "[common][net]") {
  auto all = net::interface_addresses();
  bool saw_lo = false;
  for (const auto& a : all) {
    INFO(a.interface << " " << a.address);
    CHECK_FALSE(a.interface.empty());
    CHECK_FALSE(a.address.empty());
    CHECK(a.address.find('%') == std::string::npos);
    if (a.address == "127.0.0.1") {
      saw_lo = true;
      CHECK(a.interface == "lo");
      CHECK(a.loopback);
      CHECK(a.up);
      CHECK_FALSE(a.ipv6);
    }
  }
  CHECK(saw_lo);
}

TEST_CASE("net: local_hostname is gethostname's answer", "[common][net]") {
  char buf[256] = {0};
  REQUIRE(gethostname(buf, sizeof buf - 1) == 0);
  CHECK(net::local_hostname() == buf);
  CHECK(net::local_hostname("fallback") == buf);
  CHECK_FALSE(net::local_hostname().empty());
}
