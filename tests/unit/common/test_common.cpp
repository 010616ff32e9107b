#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/horovod_switches.h"
#include "hvd/common/io.h"
#include "hvd/common/secret.h"
#include "hvd/common/text.h"

#include <catch2/catch.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <thread>

using namespace hvd;

TEST_CASE("env parses integers strictly", "[common][env]") {
  ::setenv("HVD_TEST_INT", "42", 1);
  CHECK(env::get_int_or("HVD_TEST_INT", 0) == 42);
  ::setenv("HVD_TEST_INT", "4x", 1);
  CHECK_THROWS_AS(env::get_int("HVD_TEST_INT"), InvalidArgument);
  ::unsetenv("HVD_TEST_INT");
  CHECK(env::get_int_or("HVD_TEST_INT", 7) == 7);
  CHECK_FALSE(env::parse_int("").has_value());
  CHECK(env::parse_int("-3").value() == -3);
}

TEST_CASE("env parses booleans and doubles", "[common][env]") {
  ::setenv("HVD_TEST_B", "TRUE", 1);
  CHECK(env::get_bool_or("HVD_TEST_B", false));
  ::setenv("HVD_TEST_B", "0", 1);
  CHECK_FALSE(env::get_bool_or("HVD_TEST_B", true));
  ::setenv("HVD_TEST_B", "maybe", 1);
  CHECK_THROWS_AS(env::get_bool_or("HVD_TEST_B", true), InvalidArgument);
  ::setenv("HVD_TEST_D", "2.5", 1);
  CHECK(env::get_double_or("HVD_TEST_D", 0) == 2.5);
  ::unsetenv("HVD_TEST_B");
  ::unsetenv("HVD_TEST_D");
}

TEST_CASE("secrets are random hex and compare in constant time", "[common][secret]") {
  auto a = random_secret(16);
  auto b = random_secret(16);
  CHECK(a.size() == 32);
  CHECK(a != b);
  CHECK(a.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(constant_time_equal(a, a));
  CHECK_FALSE(constant_time_equal(a, b));
  CHECK_FALSE(constant_time_equal(a, a.substr(1)));
}

TEST_CASE("frames round-trip and bound what a peer can make us allocate", "[common][io]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  UniqueFd a(sv[0]), b(sv[1]);
  write_frame(a.get(), "hello");
  write_frame(a.get(), "");
  CHECK(read_frame(b.get(), 100) == "hello");
  CHECK(read_frame(b.get(), 100).empty());
  write_frame(a.get(), std::string(200, 'x'));
  CHECK_THROWS_AS(read_frame(b.get(), 100), IoError);
}

TEST_CASE("reads time out and report a closed peer", "[common][io]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  UniqueFd a(sv[0]), b(sv[1]);
  char c;
  auto start = Clock::now();
  CHECK_THROWS_AS(read_exact(b.get(), &c, 1, Deadline::after(std::chrono::milliseconds(50))), TimeoutError);
  CHECK(Clock::now() - start < std::chrono::seconds(2));
  a.reset();
  CHECK_THROWS_AS(read_exact(b.get(), &c, 1), IoError);
}

TEST_CASE("HVD_ENFORCE_EQ prints both values", "[common][error]") {
  try {
    HVD_ENFORCE_EQ(1 + 1, 3);
    FAIL("should have thrown");
  } catch (const Error& e) {
    std::string what = e.what();
    CHECK(what.find("2 vs 3") != std::string::npos);
    CHECK(what.find("test_common.cpp") != std::string::npos);
  }
}

// Issue 29 item 8: the one way outside text is shown (hvd/common/text.h).
TEST_CASE("text: shown escapes control bytes and cuts - nothing can forge a line or an escape sequence", "[text]") {
  CHECK(hvd::shown("node-01.example") == "node-01.example");
  CHECK(hvd::shown("a\x1b[31mb") == "a\\x1b[31mb");
  CHECK(hvd::shown("10.0.0.1\n[0]<stdout>: forged") == "10.0.0.1\\n[0]<stdout>: forged");
  CHECK(hvd::shown("t\tr\rdel\x7f") == "t\\tr\\rdel\\x7f");
  CHECK(hvd::shown("back\\slash") == "back\\\\slash");  // "\n" in the output always was a newline
  CHECK(hvd::shown("\xc2\x9b"
                   "2J") == "\\xc2\\x9b2J");  // a C1 CSI, and any byte >= 0x80
  CHECK(hvd::shown(std::string("nul\0byte", 8)) == "nul\\x00byte");
  const std::string huge(100000, 'a');
  const std::string cut = hvd::shown(huge, 10);
  CHECK(cut == "aaaaaaaaaa... (100000 bytes)");
  CHECK(hvd::shown(huge).size() < 200);
  // A whole message: controls escaped, backslashes of shown() parts kept.
  CHECK(hvd::one_line("host '" + hvd::shown("x\ny") + "'\nsecond") == "host 'x\\ny'\\nsecond");
  CHECK(hvd::one_line(std::string(10000, 'm')).size() < 4200);
}

TEST_CASE("text: closest_word suggests a near candidate and nothing for a far one", "[text]") {
  const std::vector<std::string> flags = {"--timeline-filename", "--timeline-mark-cycles", "--verbose", "--log-level",
                                          "-np", "-H"};
  CHECK(hvd::closest_word("--timline-filename", flags) == "--timeline-filename");  // one letter missing
  CHECK(hvd::closest_word("--log-levle", flags) == "--log-level");                  // two letters swapped
  CHECK(hvd::closest_word("--vrebose", flags) == "--verbose");
  CHECK(hvd::closest_word("-nq", flags) == "-np");
  CHECK(hvd::closest_word("--gpus-per-node", flags).empty());
  CHECK(hvd::closest_word("-x", flags).empty());  // short words need a close match: -x is not -H
  CHECK(hvd::closest_word("anything", {}).empty());
}

TEST_CASE("base64_decode: RFC 4648 with padding, blanks skipped, anything else refused", "[common][text]") {
  CHECK(hvd::base64_decode("") == std::string());
  CHECK(hvd::base64_decode("Zg==") == std::string("f"));
  CHECK(hvd::base64_decode("Zm8=") == std::string("fo"));
  CHECK(hvd::base64_decode("Zm9v") == std::string("foo"));
  CHECK(hvd::base64_decode("Zm9v\nYmFy\r\n") == std::string("foobar"));
  CHECK(hvd::base64_decode("AAEC/w==") == std::string("\x00\x01\x02\xff", 4));
  CHECK_FALSE(hvd::base64_decode("Zm9"));  // length
  CHECK_FALSE(hvd::base64_decode("Zm9*"));  // alphabet
  CHECK_FALSE(hvd::base64_decode("Zg==Zm9v"));  // padding in the middle
  CHECK_FALSE(hvd::base64_decode("Z==="));  // too much padding
}

TEST_CASE("horovod_switches: Horovod's switch reading and the launcher's subset", "[horovod_switches]") {
  using hvd::horovod_switches::switched_on;
  CHECK(switched_on(std::string("1")));
  CHECK(switched_on(std::string("7abc")));  // strtol reads the leading digits, as Horovod
  CHECK_FALSE(switched_on(std::string("0")));
  CHECK_FALSE(switched_on(std::string("true")));
  CHECK_FALSE(switched_on(std::string("-1")));
  CHECK_FALSE(switched_on(std::nullopt));
  std::map<std::string, std::string> env = {{"HOROVOD_CONTROLLER", "mpi"},
                                            {"HOROVOD_ENABLE_XLA_OPS", "1"},
                                            {"HOROVOD_BATCH_D2D_MEMCOPIES", ""}};
  auto get = [&](const char* name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  auto all = hvd::horovod_switches::unhonoured(get);
  REQUIRE(all.size() == 3);  // an empty BATCH_D2D_MEMCOPIES reads as 0: off, as in Horovod
  CHECK(all[0].variable == "HOROVOD_CONTROLLER");
  CHECK(all[0].value == "mpi");
  CHECK(all[1].variable == "HOROVOD_BATCH_D2D_MEMCOPIES");
  CHECK(all[2].variable == "HOROVOD_ENABLE_XLA_OPS");
  CHECK(hvd::horovod_switches::set_by_hvdrun("HOROVOD_CONTROLLER"));
  CHECK(hvd::horovod_switches::set_by_hvdrun("HOROVOD_CPU_OPERATIONS"));
  CHECK_FALSE(hvd::horovod_switches::set_by_hvdrun("HOROVOD_ENABLE_XLA_OPS"));
}
