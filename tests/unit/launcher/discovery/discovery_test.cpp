#include <catch2/catch.hpp>

#include "hvd/launcher/discovery/discovery.h"

using hvd::launcher::DiscoveredHost;
using hvd::launcher::parse_discovery_output;

TEST_CASE("discovery: hosts with and without slots, comments, blanks") {
  auto r = parse_discovery_output("# fleet\n\nnode1\n  node2:4  \n#node3\n", 2);
  REQUIRE(r.ok());
  REQUIRE(r.hosts == std::vector<DiscoveredHost>{{"node1", 2}, {"node2", 4}});
}

TEST_CASE("discovery: empty output is an empty, valid host set") {
  auto r = parse_discovery_output("", 1);
  REQUIRE(r.ok());
  REQUIRE(r.hosts.empty());
}

TEST_CASE("discovery: malformed lines give a one-line error naming the line") {
  for (const char* bad : {"node1:x\n", "node1:0\n", ":3\n", "node1:\n", "a b\n", "n1\nn1:2\n", "n:99999999\n"}) {
    auto r = parse_discovery_output(bad, 1);
    INFO(bad);
    REQUIRE_FALSE(r.ok());
    REQUIRE(r.error->find("malformed discovery output line") == 0);
    REQUIRE(r.error->find('\n') == std::string::npos);
  }
  auto r = parse_discovery_output("ok\nbad:z\n", 1);
  REQUIRE(r.error->find("line 2 'bad:z'") != std::string::npos);
}

TEST_CASE("discovery: invalid default slots rejected") {
  REQUIRE_FALSE(parse_discovery_output("n1\n", 0).ok());
}
