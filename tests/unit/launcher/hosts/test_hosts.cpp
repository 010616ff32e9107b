#include "../test_util.h"
#include "hvd/launcher/hosts/hosts.h"

using namespace hvd::launcher;
using hvd_test::invalid_message;

TEST_CASE("hosts: -H parses hosts in order with slots - a bare host has one slot", "[hosts]") {
  auto hosts = parse_hosts("h1:2,h2:4,h3");
  REQUIRE(hosts.size() == 3);
  CHECK(hosts[0].name == "h1");
  CHECK(hosts[0].slots == 2);
  CHECK(hosts[1].name == "h2");
  CHECK(hosts[1].slots == 4);
  CHECK(hosts[2].name == "h3");
  CHECK(hosts[2].slots == 1);
  CHECK(total_slots(hosts) == 7);
  CHECK(format_hosts(hosts) == "h1:2, h2:4, h3:1");
}

TEST_CASE("hosts: -H accepts addresses dots dashes underscores and IPv6 in brackets", "[hosts]") {
  auto hosts = parse_hosts("10.0.0.1:2, node-2.example.com:1,w_3,[::1]:2,[fe80::1]");
  REQUIRE(hosts.size() == 5);
  CHECK(hosts[0].name == "10.0.0.1");
  CHECK(hosts[1].name == "node-2.example.com");
  CHECK(hosts[2].name == "w_3");
  CHECK(hosts[3].name == "::1");
  CHECK(hosts[3].slots == 2);
  CHECK(hosts[4].name == "fe80::1");
  CHECK(hosts[4].slots == 1);
  CHECK(format_hosts({hosts[3]}) == "[::1]:2");
}

TEST_CASE("every malformed -H entry gets its own one-line message", "[hosts]") {
  auto msg = [](const std::string& text) { return invalid_message([&] { parse_hosts(text); }); };
  CHECK(msg("h:abc") == "'h:abc': slot count 'abc' is not a number");
  CHECK(msg("h:0") == "'h:0': slot count must be at least 1, not 0");
  CHECK(msg("h:-2") == "'h:-2': slot count must be at least 1, not -2");
  CHECK(msg("h:") == "'h:': missing slot count after ':' (write host:N, e.g. h:2)");
  CHECK(msg(":2") == "':2': missing host name before ':'");
  CHECK(msg("a:2,,b:2") == "-H 'a:2,,b:2': empty host entry at position 2");
  CHECK(msg("a:2,") == "-H 'a:2,': empty host entry at the end (trailing ',')");
  CHECK(msg("") == "-H: empty host list (expected e.g. -H host1:2,host2:2)");
  CHECK(msg("a:2,b:1,a:1") == "host 'a' is listed twice; list each host once with its total slots");
  CHECK(msg("a b:2") == "'a b:2': 'a b' is not a valid host name (letters, digits, '.', '-', '_')");
  CHECK(msg("::1:2") == "'::1:2': too many ':' (put IPv6 addresses in brackets: [::1:2]:N)");
  CHECK(msg("[::1:2") == "'[::1:2': missing ']' after IPv6 address");
  CHECK(msg("h:99999999") == "'h:99999999': slot count 99999999 is too large");
  CHECK(msg("h:1.5") == "'h:1.5': slot count '1.5' is not a number");
}

TEST_CASE("hostfile: slots= host:N bare host comments blank lines max_slots", "[hosts][hostfile]") {
  const std::string text =
      "# cluster\n"
      "\n"
      "node1 slots=2\n"
      "node2 slots=4 max_slots=8   # trailing comment\n"
      "  node3:3\n"
      "node4\n"
      "\t\n";
  auto hosts = parse_hostfile_text(text, "hosts.txt");
  REQUIRE(hosts.size() == 4);
  CHECK(hosts[0].name == "node1");
  CHECK(hosts[0].slots == 2);
  CHECK(hosts[1].slots == 4);
  CHECK(hosts[2].name == "node3");
  CHECK(hosts[2].slots == 3);
  CHECK(hosts[3].slots == 1);
}

TEST_CASE("hostfile errors are reported as path:LINE: message", "[hosts][hostfile]") {
  auto msg = [](const std::string& text) { return invalid_message([&] { parse_hostfile_text(text, "hf"); }); };
  CHECK(msg("a slots=2\nb slots=abc\n") == "hf:2: 'b slots=abc': slot count 'abc' is not a number");
  CHECK(msg("a slots=0\n") == "hf:1: 'a slots=0': slot count must be at least 1, not 0");
  CHECK(msg("\n\na cpus=2\n") == "hf:3: unexpected 'cpus=2' (expected 'host slots=N', 'host:N' or 'host')");
  CHECK(msg("a slots\n") == "hf:1: 'slots' needs a value: slots=N");
  CHECK(msg("a slots=1 slots=2\n") == "hf:1: 'slots=' given twice");
  CHECK(msg("a:2 slots=2\n") == "hf:1: 'a:2': give slots either as host:N or as slots=N, not both");
  CHECK(msg("a\nb\na slots=3\n") == "hf:3: host 'a' is listed twice; list each host once with its total slots");
  CHECK(msg("# nothing\n\n") == "hf: no hosts in hostfile");
  CHECK(msg("a max_slots=\n") == "hf:1: 'max_slots' needs a value: max_slots=N");
}

TEST_CASE("missing hostfile names the path", "[hosts][hostfile]") {
  std::string m = invalid_message([] { parse_hostfile("/nonexistent/hvd_hosts"); });
  CHECK(m == "cannot read hostfile '/nonexistent/hvd_hosts': No such file or directory");
  hvd_test::TempFile f("x slots=2\ny slots=1\n");
  auto hosts = parse_hostfile(f.path());
  REQUIRE(hosts.size() == 2);
  CHECK(hosts[1].name == "y");
}

TEST_CASE("a directory given as hostfile is named as one, not as an empty hostfile", "[hosts][hostfile]") {
  std::string m = invalid_message([] { parse_hostfile("/tmp"); });
  CHECK(m == "hostfile '/tmp' is a directory, not a file of host[:slots] lines");
}

TEST_CASE("looks_like_host_entry catches the -H a:2 b:2 typo shapes only", "[hosts]") {
  CHECK(looks_like_host_entry("b:2"));
  CHECK(looks_like_host_entry("node-2.example.com:16"));
  CHECK(looks_like_host_entry("[::1]:2"));
  CHECK_FALSE(looks_like_host_entry("python"));
  CHECK_FALSE(looks_like_host_entry("train.py"));
  CHECK_FALSE(looks_like_host_entry("http://x:80/a"));
  CHECK_FALSE(looks_like_host_entry("a:b"));
  CHECK_FALSE(looks_like_host_entry("a:"));
  CHECK_FALSE(looks_like_host_entry("/bin/true"));
  CHECK_FALSE(looks_like_host_entry("a:2,b:2"));
}

TEST_CASE("host entry grammar: values for discovery, exceptions for -H and hostfiles", "[hosts]") {
  struct Case {
    const char* entry;
    int default_slots;
    HostSpec host;
    bool slots_given;
  };
  for (const Case& c : {Case{"node1:3", 1, {"node1", 3}, true}, Case{"node1", 4, {"node1", 4}, false},
                        Case{"[fe80::1%eth0]", 2, {"fe80::1%eth0", 2}, false},
                        Case{"[fe80::1%eth0]:5", 2, {"fe80::1%eth0", 5}, true}}) {
    INFO(c.entry);
    HostEntry e = try_parse_host_entry(c.entry, c.default_slots);
    REQUIRE(e.ok());
    CHECK(e.host == c.host);
    CHECK(e.slots_given == c.slots_given);
  }
  // Reasons come without the entry; the throwing form adds it.
  HostEntry e = try_parse_host_entry("[::1");
  REQUIRE_FALSE(e.ok());
  CHECK(*e.error == "missing ']' after IPv6 address");
  CHECK(invalid_message([] { parse_host_entry("[::1"); }) == "'[::1': missing ']' after IPv6 address");
  CHECK(*try_parse_host_entry("[::1]:").error == "missing slot count after ':' (write host:N, e.g. [::1]:2)");
  CHECK(*try_parse_host_entry("[10.0.0.1]").error == "'10.0.0.1' is not an IPv6 address");
  CHECK(parse_host_entry("[::1]:2") == HostSpec{"::1", 2});
}

TEST_CASE("format_host brackets IPv6 names so the slot count stays unambiguous", "[hosts]") {
  CHECK(format_host({"node1", 2}) == "node1:2");
  CHECK(format_host({"fe80::1%eth0", 1}) == "[fe80::1%eth0]:1");
  // What format_host writes, the grammar reads back.
  for (const HostSpec& h : {HostSpec{"a.b-c_d", 7}, HostSpec{"::1", 3}, HostSpec{"10.1.2.3", 1}}) {
    CHECK(parse_host_entry(format_host(h)) == h);
  }
}

TEST_CASE("hostfile: IPv6 lines, and a slot count given twice is refused for them too", "[hosts][hostfile]") {
  auto hosts = parse_hostfile_text("[::1] slots=2\n[fe80::1%eth0]:3\n", "hf");
  REQUIRE(hosts.size() == 2);
  CHECK(hosts[0] == HostSpec{"::1", 2});
  CHECK(hosts[1] == HostSpec{"fe80::1%eth0", 3});
  CHECK(invalid_message([] { parse_hostfile_text("[::1]:2 slots=3\n", "hf"); }) ==
        "hf:1: '[::1]:2': give slots either as host:N or as slots=N, not both");
  CHECK(invalid_message([] { parse_hostfile_text("[::1 slots=3\n", "hf"); }) ==
        "hf:1: '[::1': missing ']' after IPv6 address");
}

// Issue 29 item 8: host names are bounded and never carry control bytes to
// the terminal; the refusal is one line quoting the name escaped and cut.
TEST_CASE("hosts: control characters and over-long names are refused in one escaped line", "[hosts]") {
  for (const std::string& bad : {std::string("a\x1b[31mb:1"), std::string("node\n[0]<stdout>:forged"),
                                 std::string("h\r:2"), std::string("[::1\x1b]:1")}) {
    const std::string why = invalid_message([&] { parse_hosts(bad); });
    INFO(why);
    CHECK_FALSE(why.empty());
    CHECK(why.find_first_of("\x1b\n\r") == std::string::npos);
  }
  CHECK(invalid_message([] { parse_hosts("a\x1b[31mb:1"); }).find("'a\\x1b[31mb' is not a valid host name") !=
        std::string::npos);
  const std::string huge(100000, 'a');
  const std::string why = invalid_message([&] { parse_hosts(huge + ":1"); });
  CHECK(why.find("is 100000 bytes long; at most 253") != std::string::npos);
  CHECK(why.size() < 400);
  CHECK(parse_hosts(std::string(253, 'a') + ":1").front().name.size() == 253);
  CHECK_FALSE(invalid_message([] { parse_hosts(std::string(254, 'a')); }).empty());
  const std::string file_why =
      invalid_message([] { parse_hostfile_text("good slots=1\nbad\x1b]0;title\x07 slots=1\n", "hf"); });
  CHECK(file_why.rfind("hf:2: ", 0) == 0);
  CHECK(file_why.find_first_of("\x1b\x07") == std::string::npos);
  CHECK(host_name_error("ok-name").has_value() == false);
  CHECK(host_name_error("bad\tname").value().find("bad\\tname") != std::string::npos);
}
