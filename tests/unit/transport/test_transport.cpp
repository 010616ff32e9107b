// TCP links: handshake (mutual proof of the job secret, refusal of strangers
// and garbage), full-duplex transfers without deadlock, and fast failure.
#include "hvd/common/error.h"
#include "hvd/transport/link.h"
#include "hvd/transport/tcp.h"

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <numeric>
#include <thread>
#include <vector>

using namespace hvd;
using namespace hvd::transport;
using namespace std::chrono_literals;

namespace {

Handshake hs(int rank, std::string secret = "s3cret", std::string scope = "gen0/") {
  Handshake h;
  h.secret = std::move(secret);
  h.scope = std::move(scope);
  h.self_rank = rank;
  h.handshake_timeout = 300ms;
  return h;
}

/// Rank 0 listens, rank 1 connects; returns {link at 0 (to 1), link at 1 (to 0)}.
std::pair<std::unique_ptr<Link>, std::unique_ptr<Link>> linked_pair(const TcpOptions& options = {}) {
  TcpListener listener("127.0.0.1");
  auto fut = std::async(std::launch::async,
                        [&] { return connect(listener.endpoint(), 0, hs(1), Deadline::after(5s), options); });
  auto a = listener.accept(
      hs(0), [](int p) { return p == 1; }, Deadline::after(5s), options);
  auto b = fut.get();
  return {std::move(a), std::move(b)};
}

/// As linked_pair, with the connector as rank `peer`: {link at 0 (to peer), link at peer (to 0)}.
std::pair<std::unique_ptr<Link>, std::unique_ptr<Link>> linked_pair_with(int peer) {
  TcpListener listener("127.0.0.1");
  auto fut =
      std::async(std::launch::async, [&] { return connect(listener.endpoint(), 0, hs(peer), Deadline::after(5s)); });
  auto a = listener.accept(
      hs(0), [peer](int p) { return p == peer; }, Deadline::after(5s));
  auto b = fut.get();
  return {std::move(a), std::move(b)};
}

/// A raw TCP connection to the listener that speaks whatever the test says.
int raw_connect(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0);
  return fd;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE("endpoints parse strictly", "[transport]") {
  std::string host;
  uint16_t port = 0;
  split_endpoint("127.0.0.1:4711", host, port);
  CHECK(host == "127.0.0.1");
  CHECK(port == 4711);
  split_endpoint("[::1]:80", host, port);
  CHECK(host == "::1");
  CHECK(port == 80);
  CHECK_THROWS_AS(split_endpoint("127.0.0.1", host, port), InvalidArgument);
  CHECK_THROWS_AS(split_endpoint("h:0", host, port), InvalidArgument);
  CHECK_THROWS_AS(split_endpoint("h:99999", host, port), InvalidArgument);
  CHECK_THROWS_AS(split_endpoint("h:12x", host, port), InvalidArgument);
  CHECK_THROWS_AS(split_endpoint("[::1:80", host, port), InvalidArgument);
}

TEST_CASE("source address for loopback is loopback", "[transport]") {
  CHECK(source_address_for("127.0.0.1") == "127.0.0.1");
  CHECK(source_address_for("no-such-host.invalid") == "");
}

TEST_CASE("authenticated link carries bytes both ways", "[transport]") {
  auto [a, b] = linked_pair();
  CHECK(a->peer() == 1);
  CHECK(b->peer() == 0);
  const char msg[] = "hello";
  char got[sizeof(msg)] = {};
  a->send(msg, sizeof(msg), Deadline::after(2s));
  b->recv(got, sizeof(got), Deadline::after(2s));
  CHECK(std::string(got) == "hello");
}

TEST_CASE("large simultaneous sends in both directions do not deadlock", "[transport]") {
  // Each side sends 32 MiB to the other at once: far more than the socket
  // buffers hold, so blocking sends would deadlock.
  auto [a, b] = linked_pair();
  const std::size_t n = 32u << 20;
  std::vector<char> sa(n), sb(n), ra(n, 0), rb(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    sa[i] = static_cast<char>(i * 7 + 1);
    sb[i] = static_cast<char>(i * 13 + 5);
  }
  auto fut =
      std::async(std::launch::async, [&] { sendrecv(*b, sb.data(), n, *b, rb.data(), n, Deadline::after(20s)); });
  sendrecv(*a, sa.data(), n, *a, ra.data(), n, Deadline::after(20s));
  fut.get();
  CHECK(ra == sb);
  CHECK(rb == sa);
}

TEST_CASE("a peer with the wrong secret is refused and the listener keeps waiting", "[transport][security]") {
  TcpListener listener("127.0.0.1");
  auto intruder = std::async(std::launch::async,
                             [&] { return connect(listener.endpoint(), 0, hs(1, "wrong"), Deadline::after(3s)); });
  auto stale = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(50ms);
    return connect(listener.endpoint(), 0, hs(1, "s3cret", "gen1/"), Deadline::after(3s));
  });
  auto good = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(300ms);
    return connect(listener.endpoint(), 0, hs(1), Deadline::after(3s));
  });
  auto link = listener.accept(
      hs(0), [](int p) { return p == 1; }, Deadline::after(5s));
  REQUIRE(link);
  CHECK(link->peer() == 1);
  CHECK_THROWS_AS(intruder.get(), IoError);
  CHECK_THROWS_AS(stale.get(), IoError);
  auto g = good.get();
  // The accepted link is the good one: it carries data.
  int v = 42, w = 0;
  g->send(&v, sizeof(v), Deadline::after(2s));
  link->recv(&w, sizeof(w), Deadline::after(2s));
  CHECK(w == 42);
}

TEST_CASE("garbage, silent and unexpected-rank connections are dropped", "[transport][security]") {
  TcpListener listener("127.0.0.1");
  int garbage = raw_connect(listener.port());
  const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789012345678901234567890123456789012345678901234567890";
  REQUIRE(::write(garbage, junk, sizeof(junk)) > 0);
  int silent = raw_connect(listener.port());  // says nothing: handshake timeout drops it
  auto wrong_rank =
      std::async(std::launch::async, [&] { return connect(listener.endpoint(), 0, hs(5), Deadline::after(3s)); });
  auto good = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(200ms);
    return connect(listener.endpoint(), 0, hs(1), Deadline::after(5s));
  });
  auto t0 = std::chrono::steady_clock::now();
  auto link = listener.accept(
      hs(0), [](int p) { return p == 1; }, Deadline::after(5s));
  CHECK(link->peer() == 1);
  CHECK(seconds_since(t0) < 3.0);
  CHECK_THROWS_AS(wrong_rank.get(), IoError);
  good.get();
  ::close(garbage);
  ::close(silent);
}

TEST_CASE("accept times out when nobody comes", "[transport]") {
  TcpListener listener("127.0.0.1");
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(listener.accept(
                      hs(0), [](int) { return true; }, Deadline::after(200ms)),
                  TimeoutError);
  CHECK(seconds_since(t0) < 2.0);
}

TEST_CASE("connect to a closed port times out with the peer named", "[transport]") {
  uint16_t port;
  {
    TcpListener gone("127.0.0.1");
    port = gone.port();
  }
  try {
    connect("127.0.0.1:" + std::to_string(port), 3, hs(1), Deadline::after(200ms));
    FAIL("connect should have failed");
  } catch (const TimeoutError& e) {
    CHECK(std::string(e.what()).find("rank 3") != std::string::npos);
  }
}

TEST_CASE("peer close fails a blocked receive with IoError", "[transport][failure]") {
  auto [a, b] = linked_pair();
  auto t0 = std::chrono::steady_clock::now();
  std::thread closer([&, bp = b.get()] {
    std::this_thread::sleep_for(100ms);
    bp->shutdown();
  });
  char buf[16];
  CHECK_THROWS_AS(a->recv(buf, sizeof(buf), Deadline::after(5s)), IoError);
  closer.join();
  CHECK(seconds_since(t0) < 2.0);
  // The local side: a shut-down link refuses further use at once.
  CHECK(b->is_shutdown());
  CHECK_THROWS_AS(b->send(buf, 1), IoError);
}

TEST_CASE("local shutdown wakes a thread blocked on the link", "[transport][failure]") {
  auto [a, b] = linked_pair();
  std::vector<char> big(64u << 20);
  auto t0 = std::chrono::steady_clock::now();
  // The sender blocks once the socket buffers are full (b never reads).
  auto fut =
      std::async(std::launch::async, [&, ap = a.get()] { ap->send(big.data(), big.size(), Deadline::after(10s)); });
  std::this_thread::sleep_for(200ms);
  a->shutdown();
  CHECK_THROWS_AS(fut.get(), IoError);
  CHECK(seconds_since(t0) < 2.0);
}

TEST_CASE("progress times out and names the link", "[transport]") {
  auto [a, b] = linked_pair();
  char buf[4];
  try {
    a->recv(buf, sizeof(buf), Deadline::after(100ms));
    FAIL("recv should time out");
  } catch (const TimeoutError& e) {
    CHECK(std::string(e.what()).find("rank 1") != std::string::npos);
  }
}

TEST_CASE("pipelined forwarding through `ready`", "[transport]") {
  // b receives from a and forwards to c as bytes arrive (a chain broadcast).
  auto [a, b1] = linked_pair();
  auto [b2, c] = linked_pair();
  const std::size_t n = 8u << 20;
  std::vector<char> src(n), mid(n), dst(n);
  std::iota(src.begin(), src.end(), 0);
  auto fa = std::async(std::launch::async, [&, ap = a.get()] { ap->send(src.data(), n, Deadline::after(10s)); });
  auto fc = std::async(std::launch::async, [&, cp = c.get()] { cp->recv(dst.data(), n, Deadline::after(10s)); });
  Transfer ts[2] = {Transfer::recv(*b1, mid.data(), n), Transfer::send(*b2, mid.data(), n)};
  ts[1].ready = 0;
  progress(ts, 2, Deadline::after(10s), [&] { ts[1].ready = ts[0].done; });
  fa.get();
  fc.get();
  CHECK(dst == src);
}

TEST_CASE("a large send failing on the helper thread ends a receive from another peer", "[transport][failure]") {
  // A sends 64 MiB to B (driven by the send helper thread) while receiving
  // from C, which stays silent. B dies: A's receive from the live C must not
  // keep A waiting.
  auto [a_to_b, b] = linked_pair();
  auto [a_from_c, c] = linked_pair();
  std::vector<char> big(64u << 20, 'x');
  char small[16];
  std::thread killer([&, bp = b.get()] {
    std::this_thread::sleep_for(200ms);
    bp->shutdown();
  });
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(sendrecv(*a_to_b, big.data(), big.size(), *a_from_c, small, sizeof(small), Deadline::after(10s)),
                  IoError);
  killer.join();
  CHECK(seconds_since(t0) < 2.0);
  // The link to the dead peer is unusable; the link to C still works.
  int v = 7, w = 0;
  c->send(&v, sizeof(v), Deadline::after(2s));
  a_from_c->recv(&w, sizeof(w), Deadline::after(2s));
  CHECK(w == 7);
}

TEST_CASE("a failed receive names its peer and leaves the helper's send link up", "[transport][failure]") {
  // A sends 64 MiB to B (the send helper thread) while receiving from C; C
  // goes away. The error names C (LinkError::peer), and A's link to the
  // live B is left up: the caller records the failure before it aborts
  // (issue 29). Before, the helper's cancel shut the link to B down, so B
  // learned of a failure from A before A could say it was C's.
  auto [a_to_b, b] = linked_pair_with(2);
  auto [a_from_c, c] = linked_pair_with(3);
  std::vector<char> big(64u << 20, 'x');
  char small[16];
  std::thread killer([&, cp = c.get()] {
    std::this_thread::sleep_for(200ms);
    cp->shutdown();
  });
  auto t0 = std::chrono::steady_clock::now();
  int failed_peer = -1;
  try {
    sendrecv(*a_to_b, big.data(), big.size(), *a_from_c, small, sizeof(small), Deadline::after(10s));
  } catch (const LinkError& e) {
    failed_peer = e.peer();
  }
  killer.join();
  CHECK(failed_peer == 3);
  CHECK(seconds_since(t0) < 2.0);
  CHECK_FALSE(a_to_b->is_shutdown());
  char got[4096];
  CHECK(b->try_recv(got, sizeof(got)) > 0);  // B still reads what A sent, no EOF
}

TEST_CASE("large sends to one peer while receiving from another complete", "[transport]") {
  auto [a_to_b, b] = linked_pair();
  auto [a_from_c, c] = linked_pair();
  const std::size_t n = 16u << 20;
  std::vector<char> out(n), in(n, 0), at_b(n, 0), from_c(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = static_cast<char>(i * 3);
    from_c[i] = static_cast<char>(i * 5 + 1);
  }
  auto fb = std::async(std::launch::async, [&, bp = b.get()] { bp->recv(at_b.data(), n, Deadline::after(20s)); });
  auto fc = std::async(std::launch::async, [&, cp = c.get()] { cp->send(from_c.data(), n, Deadline::after(20s)); });
  sendrecv(*a_to_b, out.data(), n, *a_from_c, in.data(), n, Deadline::after(20s));
  fb.get();
  fc.get();
  CHECK(at_b == out);
  CHECK(in == from_c);
}

// ---- silent peers (host down, network cut) -----------------------------------

namespace {

int sockopt(const Link& l, int level, int name) {
  int v = -1;
  socklen_t len = sizeof(v);
  REQUIRE(::getsockopt(l.poll_fd(), level, name, &v, &len) == 0);
  return v;
}

/// Sets or unsets an environment variable for one scope.
struct ScopedEnv {
  std::string name;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) {
    if (value)
      ::setenv(name.c_str(), value, 1);
    else
      ::unsetenv(name.c_str());
  }
  ~ScopedEnv() { ::unsetenv(name.c_str()); }
};

}  // namespace

TEST_CASE("keepalive settings follow the peer timeout", "[transport][liveness]") {
  auto k = keepalive_for(1500ms);
  CHECK((k.idle_s == 1 && k.interval_s == 1 && k.count == 1));
  k = keepalive_for(2000ms);
  CHECK((k.idle_s == 1 && k.interval_s == 1 && k.count == 1));
  k = keepalive_for(3000ms);
  CHECK((k.idle_s == 1 && k.interval_s == 1 && k.count == 2));
  k = keepalive_for(10000ms);
  CHECK((k.idle_s == 5 && k.interval_s == 2 && k.count == 2));
  k = keepalive_for(100ms);  // the kernel counts whole seconds
  CHECK((k.idle_s == 1 && k.interval_s == 1 && k.count == 1));
  k = keepalive_for(0ms);
  CHECK(k.count == 0);
}

TEST_CASE("established links carry the keepalive options, both ends", "[transport][liveness]") {
  TcpOptions o;
  o.peer_timeout = 10000ms;
  auto [a, b] = linked_pair(o);
  for (const Link* l : {a.get(), b.get()}) {
    CHECK(sockopt(*l, SOL_SOCKET, SO_KEEPALIVE) == 1);
    CHECK(sockopt(*l, IPPROTO_TCP, TCP_KEEPIDLE) == 5);
    CHECK(sockopt(*l, IPPROTO_TCP, TCP_KEEPINTVL) == 2);
    CHECK(sockopt(*l, IPPROTO_TCP, TCP_KEEPCNT) == 2);
    CHECK(sockopt(*l, IPPROTO_TCP, TCP_NODELAY) == 1);
    // Deliberately not TCP_USER_TIMEOUT (it would fail a slow, live reader).
    CHECK(sockopt(*l, IPPROTO_TCP, TCP_USER_TIMEOUT) == 0);
    CHECK(l->peer_check_interval() == 1250ms);
  }
  // Default options: the library default of 1.5 s.
  ScopedEnv unset(kPeerTimeoutEnv, nullptr);
  auto [c, d] = linked_pair();
  for (const Link* l : {c.get(), d.get()}) {
    CHECK(sockopt(*l, SOL_SOCKET, SO_KEEPALIVE) == 1);
    CHECK(sockopt(*l, IPPROTO_TCP, TCP_KEEPIDLE) == 1);
    CHECK(sockopt(*l, IPPROTO_TCP, TCP_KEEPINTVL) == 1);
    CHECK(sockopt(*l, IPPROTO_TCP, TCP_KEEPCNT) == 1);
    CHECK(dynamic_cast<const TcpLink&>(*l).peer_timeout() == kDefaultPeerTimeout);
  }
}

TEST_CASE("a peer timeout of 0 turns keepalive and checks off", "[transport][liveness]") {
  TcpOptions o;
  o.peer_timeout = 0ms;
  auto [a, b] = linked_pair(o);
  CHECK(sockopt(*a, SOL_SOCKET, SO_KEEPALIVE) == 0);
  CHECK(a->peer_check_interval() == 0ms);
}

TEST_CASE("HVD_TRANSPORT_PEER_TIMEOUT_MS sets the default", "[transport][liveness]") {
  {
    ScopedEnv e(kPeerTimeoutEnv, nullptr);
    CHECK(peer_timeout_from_env() == kDefaultPeerTimeout);
    CHECK(TcpOptions{}.peer_timeout == kDefaultPeerTimeout);
  }
  {
    ScopedEnv e(kPeerTimeoutEnv, "4000");
    CHECK(TcpOptions{}.peer_timeout == 4000ms);
    auto [a, b] = linked_pair();
    CHECK(sockopt(*a, IPPROTO_TCP, TCP_KEEPIDLE) == 2);
    CHECK(sockopt(*b, IPPROTO_TCP, TCP_KEEPCNT) == 2);
  }
  {
    ScopedEnv e(kPeerTimeoutEnv, "0");
    CHECK(peer_timeout_from_env() == 0ms);
  }
  for (const char* bad : {"soon", "-5", "1.5"}) {
    ScopedEnv e(kPeerTimeoutEnv, bad);
    CHECK_THROWS_AS(peer_timeout_from_env(), InvalidArgument);
    try {
      peer_timeout_from_env();
    } catch (const InvalidArgument& err) {
      CHECK(std::string(err.what()).find(kPeerTimeoutEnv) != std::string::npos);
    }
  }
}

TEST_CASE("a slow reader is not a dead peer", "[transport][liveness]") {
  // a sends 8 MiB; b reads nothing for 5x the limit, so a's send waits on a
  // closed receive window the whole time. b's kernel answers the window
  // probes: the send must complete (TCP_USER_TIMEOUT would have failed it).
  TcpOptions o;
  o.peer_timeout = 300ms;
  o.socket_buffer_bytes = 64 << 10;
  auto [a, b] = linked_pair(o);
  const std::size_t n = 8u << 20;
  std::vector<char> out(n), in(n, 0);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<char>(i * 7);
  auto fa = std::async(std::launch::async, [&, ap = a.get()] { ap->send(out.data(), n); });
  std::this_thread::sleep_for(1500ms);
  b->recv(in.data(), n, Deadline::after(10s));
  CHECK_NOTHROW(fa.get());
  CHECK(in == out);
}

TEST_CASE("a live peer that stays silent past the limit is not dead", "[transport][liveness]") {
  // b sends nothing for 2.5 s, 8x the limit (and past keepalive's 1 + 1 s):
  // b's kernel answers the keepalive probes, so a's receive just waits.
  TcpOptions o;
  o.peer_timeout = 300ms;
  auto [a, b] = linked_pair(o);
  std::thread late([bp = b.get()] {
    std::this_thread::sleep_for(2500ms);
    int v = 42;
    bp->send(&v, sizeof(v), Deadline::after(2s));
  });
  int w = 0;
  CHECK_NOTHROW(a->recv(&w, sizeof(w)));
  late.join();
  CHECK(w == 42);
}

// ---- hostile connections during start-up (issue 21, item 2) -----------------

TEST_CASE("idle connections to a listener do not delay or fail a real peer", "[transport][security][fault]") {
  // A dozen connections that say nothing, made before the real peer: each
  // must cost the peer nothing (handshakes run concurrently).
  TcpListener listener("127.0.0.1");
  std::vector<int> idle;
  for (int i = 0; i < 12; ++i) idle.push_back(raw_connect(listener.port()));
  Handshake h0 = hs(0);
  h0.handshake_timeout = 5000ms;  // the library's default at the time of the audit
  auto t0 = std::chrono::steady_clock::now();
  auto peer =
      std::async(std::launch::async, [&] { return connect(listener.endpoint(), 0, hs(1), Deadline::after(8s)); });
  auto link = listener.accept(
      h0, [](int p) { return p == 1; }, Deadline::after(8s));
  REQUIRE(link);
  CHECK(link->peer() == 1);
  CHECK(seconds_since(t0) < 1.0);
  auto b = peer.get();
  int v = 7, w = 0;
  b->send(&v, sizeof v, Deadline::after(2s));
  link->recv(&w, sizeof w, Deadline::after(2s));
  CHECK(w == 7);
  for (int fd : idle) ::close(fd);
}

TEST_CASE("handshake errors say what happened", "[transport][fault]") {
  SECTION("a wrong secret is reported as a rejection of our proof") {
    TcpListener listener("127.0.0.1");
    auto intruder = std::async(std::launch::async,
                               [&] { return connect(listener.endpoint(), 0, hs(1, "wrong"), Deadline::after(3s)); });
    CHECK_THROWS_AS(listener.accept(
                        hs(0), [](int p) { return p == 1; }, Deadline::after(1s)),
                    TimeoutError);
    CHECK_THROWS_WITH(intruder.get(), Catch::Contains("rank 0") && Catch::Contains("rejected our handshake") &&
                                          Catch::Contains("job secret"));
  }
  SECTION("a listener that closes without a verdict is not blamed on the secret") {
    // A listener that gives up (its own deadline passed) while our proof is
    // in flight: hello sent, proof read, connection closed without an answer.
    int srv = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(srv, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(srv, 4) == 0);
    socklen_t len = sizeof a;
    REQUIRE(::getsockname(srv, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    const std::string endpoint = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    auto peer = std::async(std::launch::async, [&] { return connect(endpoint, 0, hs(1), Deadline::after(3s)); });
    int c = ::accept(srv, nullptr, nullptr);
    REQUIRE(c >= 0);
    const char hello[24] = {'H', 'V', 'D', 'L', '1', 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    REQUIRE(::write(c, hello, sizeof hello) == sizeof hello);
    char proof[64];
    std::size_t got = 0;
    while (got < sizeof proof) {
      ssize_t n = ::read(c, proof + got, sizeof proof - got);
      REQUIRE(n > 0);
      got += static_cast<std::size_t>(n);
    }
    ::close(c);
    ::close(srv);
    try {
      peer.get();
      FAIL("connect succeeded");
    } catch (const Error& e) {
      const std::string what = e.what();
      CHECK_THAT(what, !Catch::Contains("job secret"));
      CHECK_THAT(what, Catch::Contains("rank 0") && Catch::Contains("closed the connection"));
    }
  }
  SECTION("a wrong rank is reported as such") {
    TcpListener listener("127.0.0.1");
    auto stranger =
        std::async(std::launch::async, [&] { return connect(listener.endpoint(), 0, hs(5), Deadline::after(3s)); });
    CHECK_THROWS_AS(listener.accept(
                        hs(0), [](int p) { return p == 1; }, Deadline::after(1s)),
                    TimeoutError);
    CHECK_THROWS_WITH(stranger.get(), Catch::Contains("rank 5") && !Catch::Contains("job secret"));
  }
}

TEST_CASE("a listener keeps at most kMaxPendingHandshakes strangers and drops the oldest", "[transport][fault]") {
  TcpListener listener("127.0.0.1");
  std::vector<int> idle;
  for (std::size_t i = 0; i < kMaxPendingHandshakes + 20; ++i) idle.push_back(raw_connect(listener.port()));
  auto peer = std::async(std::launch::async, [&] {
    std::this_thread::sleep_for(100ms);
    return connect(listener.endpoint(), 0, hs(1), Deadline::after(5s));
  });
  Handshake h0 = hs(0);
  h0.handshake_timeout = 10s;  // only the pool's bound can drop them here
  auto t0 = std::chrono::steady_clock::now();
  auto link = listener.accept(
      h0, [](int p) { return p == 1; }, Deadline::after(5s));
  CHECK(link->peer() == 1);
  CHECK(seconds_since(t0) < 2.0);
  CHECK(listener.pending_handshakes() <= kMaxPendingHandshakes);
  peer.get();
  // The first strangers were closed to make room: they read the hello, then EOF.
  timeval tv{2, 0};  // a stranger still open would block the read: fail instead
  ::setsockopt(idle.front(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[64];
  ssize_t total = 0, n = 0;
  while ((n = ::read(idle.front(), buf, sizeof buf)) > 0) total += n;
  CHECK(n == 0);
  CHECK(total == 24);
  for (int fd : idle) ::close(fd);
}
