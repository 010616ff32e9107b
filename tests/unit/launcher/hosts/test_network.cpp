#include <arpa/inet.h>

#include "../test_util.h"
#include "hvd/launcher/hosts/network.h"

using namespace hvd::launcher;

namespace {

std::string this_hostname() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

bool is_numeric_address(const std::string& s) {
  in_addr a4{};
  in6_addr a6{};
  return inet_pton(AF_INET, s.c_str(), &a4) == 1 || inet_pton(AF_INET6, s.c_str(), &a6) == 1;
}

}  // namespace

// These tests only use numeric addresses, "localhost" and this machine's own
// name, so no DNS query leaves the machine.

TEST_CASE("network: loopback names and addresses are local", "[network]") {
  CHECK(is_local_host("localhost"));
  CHECK(is_local_host("LOCALHOST"));
  CHECK(is_local_host("127.0.0.1"));
  CHECK(is_local_host("127.3.4.5"));
  CHECK(is_local_host("::1"));
  CHECK(is_local_host("[::1]"));
  CHECK(is_local_host(this_hostname()));
}

TEST_CASE("network: every local interface address is local", "[network]") {
  auto addrs = local_interface_addresses();
  bool saw_loopback = false;
  for (const auto& a : addrs) {
    INFO(a.interface << " " << a.address);
    CHECK(is_local_host(a.address));
    saw_loopback = saw_loopback || a.address == "127.0.0.1";
  }
  CHECK(saw_loopback);
}

TEST_CASE("network: addresses not on this machine are remote (no traffic sent)", "[network]") {
  // 198.18.0.0/15 is reserved for benchmarking; nothing here owns it unless
  // a test namespace does.
  bool assigned = false;
  for (const auto& a : local_interface_addresses()) assigned = assigned || a.address == "198.18.255.254";
  if (!assigned) CHECK_FALSE(is_local_host("198.18.255.254"));
  CHECK_FALSE(is_local_host(""));
}

TEST_CASE("network: route source address towards loopback", "[network]") {
  std::string src = route_source_address("127.0.0.2");
  CHECK(is_numeric_address(src));
  CHECK(is_local_host(src));
  // Containers may run without IPv6; check ::1 only where it exists.
  bool has_v6_loopback = false;
  for (const auto& a : local_interface_addresses()) has_v6_loopback = has_v6_loopback || a.address == "::1";
  if (has_v6_loopback) CHECK(route_source_address("::1") == "::1");
}

TEST_CASE("network: driver address from --network-interface skipping missing names", "[network]") {
  CHECK(choose_driver_address({"hvd-no-such-nic0", "lo"}, {}) == "127.0.0.1");
  std::string m = hvd_test::invalid_message([] { choose_driver_address({"hvd-no-such-nic0", "hvd-nope1"}, {}); });
  CHECK(m.rfind("--network-interface hvd-no-such-nic0,hvd-nope1: no such interface with an address on this host "
                "(available: ",
                0) == 0);
  CHECK(m.find("lo") != std::string::npos);
}

TEST_CASE("network: all-local jobs use 127.0.0.1", "[network]") {
  CHECK(choose_driver_address({}, {{"localhost", 2}, {"127.0.0.1", 1}}) == "127.0.0.1");
}
