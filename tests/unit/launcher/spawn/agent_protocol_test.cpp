// The launcher <-> agent frames (agent_protocol.h) and the launcher's side
// of a connection (agent_client.h): round trips, byte-exact layout, and
// every kind of bad input giving one clear AgentProtocolError, never a crash.
#include "hvd/launcher/spawn/agent_client.h"
#include "hvd/launcher/spawn/agent_protocol.h"

#include <catch2/catch.hpp>

#include <csignal>
#include <map>
#include <random>

using namespace hvd::launcher;

namespace {

template <class T>
T round_trip(const T& m) {
  const std::string frame = encode_agent_message(m);
  AgentFrameReader r;
  r.feed(frame.data(), frame.size());
  auto out = r.next();
  REQUIRE(out.has_value());
  REQUIRE(std::holds_alternative<T>(*out));
  CHECK_FALSE(r.next().has_value());
  CHECK(r.pending() == 0);
  return std::get<T>(*out);
}

std::string le32(std::uint32_t v) {
  std::string s;
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

/// A frame with the given type and body, length computed.
std::string frame(char type, const std::string& body) { return le32(static_cast<std::uint32_t>(body.size() + 1)) + type + body; }

std::string decode_error(const std::string& bytes) {
  AgentFrameReader r;
  r.feed(bytes.data(), bytes.size());
  try {
    while (r.next()) {
    }
  } catch (const AgentProtocolError& e) {
    return e.what();
  }
  return "";
}

class Sink : public EventSink {
 public:
  void on_output(int rank, Stream s, const char* data, std::size_t len) override {
    (s == Stream::Stdout ? out : err)[rank].append(data, len);
  }
  void on_exit(const WorkerExit& e) override { exits[e.rank] = e; }
  std::map<int, std::string> out, err;
  std::map<int, WorkerExit> exits;
};

WorkerSpec worker(int rank) {
  WorkerSpec w;
  w.slot.rank = rank;
  w.argv = {"true"};
  return w;
}

}  // namespace

TEST_CASE("agent protocol: every message survives a round trip", "[agent_protocol]") {
  auto h = round_trip(agent_msg::Hello{kAgentProtocolVersion, 3000});
  CHECK(h.version == kAgentProtocolVersion);
  CHECK(h.value == 3000);

  agent_msg::Spawn s;
  s.id = 7;
  s.argv = {"python3", "-c", std::string("print('hi')\0x", 13)};
  s.env = {"A.B=multi\nline", "EMPTY=", "HVDRUN_SECRET=s3cret"};
  s.cwd = "/tmp/a dir";
  auto s2 = round_trip(s);
  CHECK(s2.id == 7);
  CHECK(s2.argv == s.argv);
  CHECK(s2.env == s.env);
  CHECK(s2.cwd == s.cwd);

  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGKILL}) CHECK(round_trip(agent_msg::Signal{3, sig}).sig == sig);
  round_trip(agent_msg::Done{});
  auto o = round_trip(agent_msg::Output{2, 2, std::string("a\0b", 3)});
  CHECK(o.id == 2);
  CHECK(o.stream == 2);
  CHECK(o.data == std::string("a\0b", 3));
  CHECK(round_trip(agent_msg::Output{2, 1, ""}).data.empty());
  auto x = round_trip(agent_msg::Exit{5, 137, 9});
  CHECK((x.id == 5 && x.status == 137 && x.signal == 9));
  CHECK(round_trip(agent_msg::Error{"boom"}).message == "boom");
}

TEST_CASE("agent protocol: the layout is little-endian length, type byte, fields", "[agent_protocol]") {
  CHECK(encode_agent_message(agent_msg::Hello{1, 258}) == frame('H', le32(1) + le32(258)));
  CHECK(encode_agent_message(agent_msg::Signal{4, SIGTERM}) == frame('K', le32(4) + "T"));
  CHECK(encode_agent_message(agent_msg::Done{}) == std::string("\x01\x00\x00\x00" "D", 5));
  agent_msg::Spawn s;
  s.id = 1;
  s.argv = {"ab"};
  s.env = {"X=1"};
  s.cwd = "";
  CHECK(encode_agent_message(s) == frame('S', le32(1) + le32(1) + le32(2) + "ab" + le32(1) + le32(3) + "X=1" + le32(0)));
  CHECK(encode_agent_message(agent_msg::Exit{2, 1, 0}) == frame('X', le32(2) + le32(1) + le32(0)));
}

TEST_CASE("agent protocol: frames split anywhere reassemble", "[agent_protocol]") {
  std::string stream;
  for (std::uint32_t i = 0; i < 20; ++i) stream += encode_agent_message(agent_msg::Output{i, 1, std::string(i * 37, 'x')});
  std::mt19937 rng(42);
  AgentFrameReader r;
  std::uint32_t seen = 0;
  for (std::size_t at = 0; at < stream.size();) {
    std::size_t n = std::min<std::size_t>(stream.size() - at, 1 + rng() % 50);
    r.feed(stream.data() + at, n);
    at += n;
    while (auto m = r.next()) {
      auto& o = std::get<agent_msg::Output>(*m);
      CHECK(o.id == seen);
      CHECK(o.data.size() == seen * 37);
      ++seen;
    }
  }
  CHECK(seen == 20);
  CHECK(r.pending() == 0);
}

TEST_CASE("agent protocol: malformed frames are one clear error", "[agent_protocol]") {
  CHECK(decode_error(le32(0)) == "bad frame length 0 (1 to 16777216 allowed): the stream is not the hvdrun agent protocol");
  CHECK(decode_error("{\"argv\": [\"true\"]}").find("bad frame length") == 0);  // the old JSON spec
  CHECK(decode_error(le32(0xffffffff)).find("bad frame length 4294967295") == 0);
  CHECK(decode_error(frame('Z', "")) == "bad frame: unknown type 'Z' (0x5a)");
  CHECK(decode_error(frame('\x01', "")) == "bad frame: unknown type 0x01");
  CHECK(decode_error(frame('H', le32(1))) == "bad Hello frame: it ends inside the value (4 byte(s) needed, 0 left)");
  CHECK(decode_error(frame('D', "x")) == "bad Done frame: 1 unexpected byte(s) after the last field");
  CHECK(decode_error(frame('K', le32(1) + "Q")) == "bad Signal frame: unknown signal code 'Q' (0x51)");
  CHECK(decode_error(frame('O', le32(1) + "\x03")) == "bad Output frame: stream 3 is neither 1 nor 2");
  CHECK(decode_error(frame('X', le32(1) + le32(300) + le32(0))) == "bad Exit frame: status 300 is out of range");
  // A count that cannot fit is refused before anything is allocated.
  CHECK(decode_error(frame('S', le32(1) + le32(0x40000000))) ==
        "bad Spawn frame: argv claims 1073741824 strings but only 0 bytes follow");
  CHECK(decode_error(frame('S', le32(1) + le32(1) + le32(100) + "ab")) ==
        "bad Spawn frame: it ends inside argv (100 byte(s) needed, 2 left)");
  CHECK(decode_error(frame('S', le32(1) + le32(0) + le32(0) + le32(0))) == "bad Spawn frame: argv is empty");
  CHECK(decode_error(frame('S', le32(1) + le32(1) + le32(1) + "x" + le32(1) + le32(4) + "=bad" + le32(0))) ==
        "bad Spawn frame: environment entry '=bad' is not NAME=value");
  // After an error the reader stays failed.
  AgentFrameReader r;
  const std::string bad = frame('Z', "") + encode_agent_message(agent_msg::Done{});
  r.feed(bad.data(), bad.size());
  CHECK_THROWS_AS(r.next(), AgentProtocolError);
  CHECK_THROWS_AS(r.next(), AgentProtocolError);
}

TEST_CASE("agent protocol: random bytes never crash the decoder", "[agent_protocol]") {
  std::mt19937 rng(7);
  for (int round = 0; round < 2000; ++round) {
    std::string bytes;
    const char types[] = "HSKDOXE";
    std::size_t body = rng() % 40;
    bytes = le32(static_cast<std::uint32_t>(body + 1)) + types[rng() % 7];
    for (std::size_t i = 0; i < body; ++i) bytes.push_back(static_cast<char>(rng() % 256));
    AgentFrameReader r;
    r.feed(bytes.data(), bytes.size());
    try {
      while (r.next()) {
      }
    } catch (const AgentProtocolError&) {
    }
  }
}

TEST_CASE("agent protocol: what cannot be carried is refused when encoding", "[agent_protocol]") {
  CHECK_THROWS_AS(encode_agent_message(agent_msg::Signal{1, SIGUSR1}), AgentProtocolError);
  CHECK_THROWS_AS(encode_agent_message(agent_msg::Spawn{}), AgentProtocolError);
  agent_msg::Spawn big;
  big.argv = {"true"};
  big.env = {"BIG=" + std::string(17u << 20, 'x')};
  CHECK_THROWS_AS(encode_agent_message(big), AgentProtocolError);
  CHECK(agent_signal_frame(1, SIGUSR1).empty());
  WorkerSpec w = worker(3);
  w.env["BIG"] = std::string(17u << 20, 'x');
  try {
    agent_launch_frames("node2", {w}, std::chrono::milliseconds(3000));
    FAIL("framed a 17 MiB worker");
  } catch (const LaunchError& e) {
    CHECK(std::string(e.what()).rfind("node2: rank 3: a Spawn frame would take more than 16777216 bytes", 0) == 0);
  }
}

TEST_CASE("AgentClient: output and exits reach the sink per rank", "[agent_protocol]") {
  Sink sink;
  AgentClient c("localhost", sink, {worker(0), worker(1)});
  std::string s = encode_agent_message(agent_msg::Hello{kAgentProtocolVersion, 42}) +
                  encode_agent_message(agent_msg::Output{1, 1, "one\n"}) +
                  encode_agent_message(agent_msg::Output{0, 2, "zero\n"}) +
                  encode_agent_message(agent_msg::Exit{1, 3, 0});
  CHECK(c.on_bytes(s.data(), s.size()));
  CHECK(sink.out[1] == "one\n");
  CHECK(sink.err[0] == "zero\n");
  REQUIRE(sink.exits.count(1));
  CHECK(sink.exits[1].status == 3);
  CHECK_FALSE(c.all_reported());
  c.finish(137, 9, "the hvdrun agent on localhost was killed by SIGKILL");
  CHECK(c.all_reported());
  CHECK(sink.exits[0].status == 137);
  CHECK(sink.exits[0].signal == 9);
  CHECK(sink.exits[0].lost_reason == "the hvdrun agent on localhost was killed by SIGKILL");
  CHECK(sink.exits[1].lost_reason.empty());
}

TEST_CASE("AgentClient: a bad stream loses the unreported workers with its reason", "[agent_protocol]") {
  SECTION("garbage") {
    Sink sink;
    AgentClient c("node2", sink, {worker(0)});
    const std::string s = encode_agent_message(agent_msg::Hello{}) + frame('Q', "");
    CHECK_FALSE(c.on_bytes(s.data(), s.size()));
    c.finish(255, 0, "ignored");
    CHECK(sink.exits[0].lost_reason == "node2: bad frame: unknown type 'Q' (0x51)");
  }
  SECTION("another version") {
    Sink sink;
    AgentClient c("node2", sink, {worker(0)});
    const std::string s = encode_agent_message(agent_msg::Hello{2, 1});
    CHECK_FALSE(c.on_bytes(s.data(), s.size()));
    CHECK(c.error().find("the agent speaks protocol version 2, this hvdrun version 1") == 0);
  }
  SECTION("an exit for a rank it was not given, or twice") {
    Sink sink;
    AgentClient c("node2", sink, {worker(0)});
    std::string s = encode_agent_message(agent_msg::Hello{}) + encode_agent_message(agent_msg::Exit{0, 0, 0});
    CHECK(c.on_bytes(s.data(), s.size()));
    s = encode_agent_message(agent_msg::Exit{0, 0, 0});
    CHECK_FALSE(c.on_bytes(s.data(), s.size()));
    CHECK(c.error() == "the agent reported an exit for rank 0, which was reported already");
    CHECK(sink.exits.size() == 1);
  }
  SECTION("an Error frame") {
    Sink sink;
    AgentClient c("node2", sink, {worker(0)});
    const std::string s = encode_agent_message(agent_msg::Hello{}) + encode_agent_message(agent_msg::Error{"pipe failed"});
    CHECK_FALSE(c.on_bytes(s.data(), s.size()));
    c.finish(255, 0, "");
    CHECK(sink.exits[0].lost_reason == "node2: the agent stopped: pipe failed");
  }
  SECTION("a stream cut inside a frame says so") {
    Sink sink;
    AgentClient c("node2", sink, {worker(0)});
    const std::string s = encode_agent_message(agent_msg::Hello{}) + encode_agent_message(agent_msg::Output{0, 1, "abc"}).substr(0, 6);
    CHECK(c.on_bytes(s.data(), s.size()));
    c.finish(255, 0, "SSH connection to node2 lost");
    CHECK(sink.exits[0].lost_reason == "SSH connection to node2 lost (its last frame was cut off)");
  }
}
