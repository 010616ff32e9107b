#include <catch2/catch.hpp>

#include "hvd/launcher/discovery/discovery.h"

using hvd::launcher::HostSpec;
using hvd::launcher::parse_discovery_output;

TEST_CASE("discovery: hosts with and without slots, comments, blanks") {
  auto r = parse_discovery_output("# fleet\n\nnode1\n  node2:4  \n#node3\n", 2);
  REQUIRE(r.ok());
  REQUIRE(r.hosts == std::vector<HostSpec>{{"node1", 2}, {"node2", 4}});
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

TEST_CASE("discovery: invalid default slots rejected") { REQUIRE_FALSE(parse_discovery_output("n1\n", 0).ok()); }

TEST_CASE("discovery: IPv6 entries in brackets, as in -H") {
  auto r = parse_discovery_output("[::1]:2\n[fe80::1%eth0]\nnode1:3\n", 4);
  REQUIRE(r.ok());
  // Names without brackets; a bare [addr] gets the default slots.
  REQUIRE(r.hosts == std::vector<HostSpec>{{"::1", 2}, {"fe80::1%eth0", 4}, {"node1", 3}});
  r = parse_discovery_output("  [::1]  \n", 1);
  REQUIRE(r.ok());
  REQUIRE(r.hosts == std::vector<HostSpec>{{"::1", 1}});
}

TEST_CASE("discovery: malformed IPv6 entries and IPv6 duplicates name the line and the reason") {
  auto error_of = [](const std::string& output) {
    auto r = parse_discovery_output(output, 1);
    REQUIRE_FALSE(r.ok());
    return *r.error;
  };
  CHECK(error_of("a\n[::1\n") == "malformed discovery output line 2 '[::1': missing ']' after IPv6 address");
  CHECK(error_of("[::1]x\n") == "malformed discovery output line 1 '[::1]x': expected ':N' after ']'");
  CHECK(error_of("[::1]:0\n") == "malformed discovery output line 1 '[::1]:0': slot count must be at least 1, not 0");
  CHECK(error_of("[]:2\n") == "malformed discovery output line 1 '[]:2': '' is not an IPv6 address");
  // An unbracketed address used to be split at its last ':' ("::1" with 2 slots).
  CHECK(error_of("::1:2\n") ==
        "malformed discovery output line 1 '::1:2': too many ':' (put IPv6 addresses in brackets: [::1:2]:N)");
  CHECK(error_of("[::1]:2\n[::1]\n") == "malformed discovery output line 2 '[::1]': host listed twice");
}

TEST_CASE("discovery: host names follow the -H grammar") {
  auto r = parse_discovery_output("node_1.example.com:2\n10.0.0.7\n", 1);
  REQUIRE(r.ok());
  REQUIRE(r.hosts == std::vector<HostSpec>{{"node_1.example.com", 2}, {"10.0.0.7", 1}});
  r = parse_discovery_output("user@node1:2\n", 1);
  REQUIRE_FALSE(r.ok());
  REQUIRE(*r.error ==
          "malformed discovery output line 1 'user@node1:2': 'user@node1' is not a valid host name (letters, digits, "
          "'.', '-', '_')");
  r = parse_discovery_output(":3\n", 1);
  REQUIRE(*r.error == "malformed discovery output line 1 ':3': missing host name before ':'");
}

TEST_CASE("discovery: garbage output is quoted safely and cut short in the error") {
  // Escape sequences and control bytes must not reach the terminal raw.
  auto r = parse_discovery_output(
      "node1\n\x1b[2J\x07"
      "evil\x01:2\n",
      1);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error->rfind("malformed discovery output line 2 '\\x1b[2J\\x07evil\\x01:2': ", 0) == 0);
  for (char c : *r.error) {
    const unsigned char u = static_cast<unsigned char>(c);
    CHECK((u >= 0x20 && u < 0x7f));
  }
  // A huge binary line is shown in a bounded excerpt with its size.
  std::string blob(100000, '\xff');
  r = parse_discovery_output(blob + "\n", 1);
  REQUIRE_FALSE(r.ok());
  CHECK(r.error->size() < 600);
  CHECK(r.error->find("\\xff\\xff") != std::string::npos);
  CHECK(r.error->find("... (100000 bytes)") != std::string::npos);
  for (char c : *r.error) CHECK(static_cast<unsigned char>(c) < 0x7f);
}

TEST_CASE("discovery: printable_excerpt escapes every non-printable byte and bounds the length") {
  using hvd::launcher::printable_excerpt;
  CHECK(printable_excerpt("plain host-1", 80) == "plain host-1");
  CHECK(printable_excerpt(std::string("a\tb\rc\\d\0e\x7f\xc3\xa9", 12), 80) == "a\\tb\\rc\\\\d\\x00e\\x7f\\xc3\\xa9");
  CHECK(printable_excerpt("abcdefghij", 4) == "abcd... (10 bytes)");
  // The bound counts input bytes: an escape is never cut in half.
  CHECK(printable_excerpt("ab\x01", 2) == "ab... (3 bytes)");
  CHECK(printable_excerpt("ab\x01\n", 4) == "ab\\x01\\n");
}
