// HTTP store server robustness, authentication, Horovod compatibility,
// shutdown and stress. Raw sockets (RawConn) play the misbehaving clients.
#include "hvd/common/error.h"
#include "hvd/store/http_store.h"
#include "test_store_util.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdlib>
#include <future>
#include <random>
#include <thread>

using namespace hvd::store;
using namespace hvd::store::test;

namespace {

constexpr const char* kSecret = "s3cret-for-tests";

ServerOptions test_options() {
  ServerOptions o;
  o.bind_address = "127.0.0.1";
  o.secret = kSecret;
  return o;
}

ClientOptions client_options(uint16_t port, std::string secret = kSecret) {
  ClientOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.secret = std::move(secret);
  o.connect_timeout = Ms(3000);
  return o;
}

std::string auth_header() { return std::string("X-Hvdrun-Secret: ") + kSecret + "\r\n"; }

/// The server still serves a well-behaved client.
void check_still_serving(HttpStoreServer& server, const std::string& key) {
  HttpStoreClient c(client_options(server.port()));
  c.set_string(key, "ok");
  CHECK(c.get_string(key, 2000ms) == "ok");
}

template <typename Pred>
bool eventually(Pred pred, Ms timeout = 5000ms) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(10ms);
  }
  return pred();
}

}  // namespace

TEST_CASE("http: requests without the right secret get 401 and are closed", "[store][http]") {
  HttpStoreServer server(test_options());
  server.start();

  HttpStoreClient wrong(client_options(server.port(), "not-the-secret"));
  try {
    wrong.set_string("global/x", "1");
    FAIL("no error");
  } catch (const hvd::IoError&) {
    FAIL("401 must not look like a connection failure");
  } catch (const hvd::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("rejected the job secret"));
  }
  HttpStoreClient none(client_options(server.port(), ""));
  CHECK_THROWS_WITH(none.try_get("global/x"), Catch::Contains("rejected the job secret"));

  RawConn raw(server.port());
  raw.send("GET /global/x HTTP/1.1\r\nHost: h\r\n\r\n");
  bool closed = false;
  std::string reply = raw.read_until_close(3000ms, closed);
  CHECK_THAT(reply, Catch::StartsWith("HTTP/1.1 401"));
  CHECK(closed);
  CHECK_FALSE(server.store().try_get("global/x").has_value());
  check_still_serving(server, "after/401");
  CHECK_THROWS_AS(HttpStoreServer(ServerOptions{}), hvd::InvalidArgument);  // no secret, not insecure
}

TEST_CASE("http: allow_unauthenticated serves raw Horovod-style requests", "[store][http]") {
  ServerOptions o = test_options();
  o.allow_unauthenticated = true;
  HttpStoreServer server(o);
  server.start();
  RawConn raw(server.port());
  // What Horovod's HTTPStore sends: no secret, Content-Length, one connection reused.
  raw.send("PUT /global/rank_0 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 5\r\n\r\nhello");
  CHECK_THAT(raw.read_response(), Catch::StartsWith("HTTP/1.1 200"));
  raw.send("GET /global/rank_0 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 0\r\n\r\n");
  std::string r = raw.read_response();
  CHECK_THAT(r, Catch::StartsWith("HTTP/1.1 200") && Catch::EndsWith("\r\n\r\nhello"));
  raw.send("GET /global/rank_1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  CHECK_THAT(raw.read_response(), Catch::StartsWith("HTTP/1.1 404"));
  raw.send("DELETE /global/rank_0 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  CHECK_THAT(raw.read_response(), Catch::StartsWith("HTTP/1.1 200"));
  raw.send("DELETE /global/rank_0 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  CHECK_THAT(raw.read_response(), Catch::StartsWith("HTTP/1.1 404"));
  // The store key is the path without the leading '/'.
  CHECK(server.store().try_get("global/rank_0") == std::nullopt);
  server.store().set_string("local_host1/rank_3", "x");
  raw.send("GET /local_host1/rank_3 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
  CHECK_THAT(raw.read_response(), Catch::EndsWith("\r\n\r\nx"));
  // A wrong secret is still refused in this mode.
  RawConn bad(server.port());
  bad.send("GET /global/rank_0 HTTP/1.1\r\nX-Hvdrun-Secret: guess\r\n\r\n");
  CHECK_THAT(bad.read_response(), Catch::StartsWith("HTTP/1.1 401"));
  // And a client with the secret works too.
  check_still_serving(server, "secure/client");
}

TEST_CASE("http: garbage bytes get 400 and a close while other clients are unaffected", "[store][http]") {
  HttpStoreServer server(test_options());
  server.start();
  HttpStoreClient good(client_options(server.port()));
  good.set_string("before", "1");

  std::mt19937 rng(7);
  std::string binary(4096, '\0');
  for (auto& c : binary) c = static_cast<char>(rng());
  for (const std::string& junk :
       {binary, std::string("HELLO THERE FRIEND\r\n\r\n"), std::string("GET /a/b HTTP/9.9\r\n\r\n"),
        std::string("GET nopath HTTP/1.1\r\n\r\n"), std::string("GET /a/b HTTP/1.1\r\nbad header line\r\n\r\n"),
        std::string("GET /a/%zz HTTP/1.1\r\n") + auth_header() + "\r\n"}) {
    RawConn raw(server.port());
    raw.send(junk);
    bool closed = false;
    std::string reply = raw.read_until_close(3000ms, closed);
    CHECK_THAT(reply, Catch::StartsWith("HTTP/1.1 400") || Catch::StartsWith("HTTP/1.1 505"));
    CHECK(closed);
  }
  // The good client's kept-alive connection is untouched.
  CHECK(good.get_string("before", 1000ms) == "1");
  check_still_serving(server, "after/garbage");
}

TEST_CASE("http: an oversized header gets 431 and a close", "[store][http]") {
  HttpStoreServer server(test_options());
  server.start();
  RawConn raw(server.port());
  std::thread sender([&] { raw.send("GET /a/b HTTP/1.1\r\nX-Big: " + std::string(1u << 20, 'a') + "\r\n\r\n"); });
  bool closed = false;
  auto t0 = std::chrono::steady_clock::now();
  std::string reply = raw.read_until_close(5000ms, closed);
  sender.join();
  CHECK(closed);
  CHECK(seconds_since(t0) < 4.0);
  // The server answers 431; a reset racing the answer may swallow it.
  if (!reply.empty()) CHECK_THAT(reply, Catch::StartsWith("HTTP/1.1 431"));
  check_still_serving(server, "after/431");
}

TEST_CASE("http: a body over the limit gets 413 before it is read", "[store][http]") {
  ServerOptions o = test_options();
  o.max_body_bytes = 1u << 20;
  HttpStoreServer server(o);
  server.start();
  {
    RawConn raw(server.port());
    raw.send("PUT /a/b HTTP/1.1\r\n" + auth_header() + "Content-Length: 999999999999\r\n\r\n");
    bool closed = false;
    std::string reply = raw.read_until_close(3000ms, closed);
    CHECK_THAT(reply, Catch::StartsWith("HTTP/1.1 413"));
    CHECK(closed);
  }
  HttpStoreClient c(client_options(server.port()));
  CHECK_THROWS_AS(c.set("big", Bytes(2u << 20, 'x')), hvd::InvalidArgument);
  // A client asks before sending a big body, so even a huge value is refused
  // promptly and with the server's reason rather than a reset connection.
  // (Bigger than what the server drains after an error, so sending it blindly would end in a reset.)
  const Bytes huge(16u << 20, 'x');
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(c.set("huge", huge), Catch::Contains("413") && Catch::Contains("exceeds the limit"));
  CHECK(seconds_since(t0) < 5.0);
  CHECK_FALSE(server.store().try_get("big").has_value());
  c.set("fits", Bytes(1u << 20, 'y'));  // exactly the limit is fine, same client reconnects
  CHECK(c.get("fits", 1000ms).size() == (1u << 20));
}

TEST_CASE("http: a slow-loris client is dropped after read_timeout while others keep working", "[store][http]") {
  ServerOptions o = test_options();
  o.read_timeout = 1500ms;
  HttpStoreServer server(o);
  server.start();
  RawConn slow(server.port());
  std::atomic<bool> dropped{false};
  std::atomic<double> dropped_after{0};
  auto t0 = std::chrono::steady_clock::now();
  std::thread loris([&] {
    const std::string request = "GET /a/b HTTP/1.1\r\nX-Padding: " + std::string(200, 'p');
    for (char ch : request) {  // one byte every 50 ms: cannot complete within the deadline
      if (!slow.send(std::string(1, ch))) break;
      pollfd p{slow.fd(), POLLIN, 0};
      if (::poll(&p, 1, 50) > 0) {
        char tmp;
        if (::recv(slow.fd(), &tmp, 1, MSG_PEEK) <= 0) break;
      }
    }
    dropped_after = seconds_since(t0);
    dropped = true;
  });
  HttpStoreClient good(client_options(server.port()));
  for (int i = 0; i < 50; ++i) {
    good.set_string("k" + std::to_string(i), std::to_string(i));
    CHECK(good.get_string("k" + std::to_string(i), 1000ms) == std::to_string(i));
  }
  CHECK_FALSE(dropped);  // served while the slow client was still connected
  loris.join();
  CHECK(dropped);
  CHECK(dropped_after >= 1.4);
  CHECK(dropped_after < 5.0);
  check_still_serving(server, "after/loris");
}

TEST_CASE("http: half-open connections are dropped after read_timeout", "[store][http]") {
  ServerOptions o = test_options();
  o.read_timeout = 700ms;
  HttpStoreServer server(o);
  server.start();
  RawConn silent(server.port());
  RawConn half_body(server.port());
  half_body.send("PUT /a/b HTTP/1.1\r\n" + auth_header() + "Content-Length: 100\r\n\r\n0123456789");
  REQUIRE(eventually([&] { return server.connection_count() == 2; }));
  auto t0 = std::chrono::steady_clock::now();
  bool closed1 = false, closed2 = false;
  silent.read_until_close(4000ms, closed1);
  half_body.read_until_close(4000ms, closed2);
  CHECK(closed1);
  CHECK(closed2);
  CHECK(seconds_since(t0) < 3.0);
  CHECK(eventually([&] { return server.connection_count() == 0; }));
  CHECK_FALSE(server.store().try_get("a/b").has_value());
  check_still_serving(server, "after/half-open");
}

TEST_CASE("http: 2000 simultaneous connections, then normal operation", "[store][http]") {
  rlimit rl{};
  ::getrlimit(RLIMIT_NOFILE, &rl);
  if (rl.rlim_cur < 4200) {
    rl.rlim_cur = std::min<rlim_t>(rl.rlim_max, 8192);
    ::setrlimit(RLIMIT_NOFILE, &rl);
  }
  // Both ends live in this process; a host with a low hard limit gets a smaller crowd.
  const int crowd = static_cast<int>(std::min<rlim_t>(2000, (rl.rlim_cur - 100) / 2));
  if (crowd < 2000) WARN("RLIMIT_NOFILE " << rl.rlim_cur << " allows only " << crowd << " connections");
  REQUIRE(crowd >= 400);
  HttpStoreServer server(test_options());
  server.start();
  // Each connection authenticates with a request and then stays open, idle
  // (kept alive): the job's own clients are only bounded by max_connections.
  std::vector<RawConn> conns;
  conns.reserve(crowd);
  for (int i = 0; i < crowd; ++i) {
    conns.emplace_back(server.port());
    conns.back().send("PUT /crowd/" + std::to_string(i) + " HTTP/1.1\r\n" + auth_header() +
                      "Content-Length: 1\r\n\r\nx");
    REQUIRE_THAT(conns.back().read_response(), Catch::StartsWith("HTTP/1.1 200"));
  }
  REQUIRE(eventually([&] { return server.connection_count() == static_cast<std::size_t>(crowd); }, 15000ms));
  CHECK(server.pending_count() == 0);
  check_still_serving(server, "busy/ok");
  // Some of the crowd make requests again on their kept-alive connections.
  for (int i = 0; i < crowd; i += 250) {
    conns[i].send("GET /crowd/" + std::to_string(i) + " HTTP/1.1\r\n" + auth_header() + "\r\n");
    CHECK_THAT(conns[i].read_response(), Catch::StartsWith("HTTP/1.1 200"));
  }
  conns.clear();
  CHECK(eventually([&] { return server.connection_count() == 0; }, 15000ms));
  check_still_serving(server, "after/crowd");
}

TEST_CASE("http: authenticated connections beyond max_connections get 503 and a close", "[store][http]") {
  ServerOptions o = test_options();
  o.max_connections = 4;
  HttpStoreServer server(o);
  server.start();
  std::vector<RawConn> held;
  for (int i = 0; i < 4; ++i) {
    held.emplace_back(server.port());
    held.back().send("GET /cap/x HTTP/1.1\r\n" + auth_header() + "\r\n");
    REQUIRE_THAT(held.back().read_response(), Catch::StartsWith("HTTP/1.1 404"));
  }
  REQUIRE(eventually([&] { return server.connection_count() == 4; }));
  RawConn extra(server.port());
  extra.send("GET /cap/x HTTP/1.1\r\n" + auth_header() + "\r\n");
  CHECK_THAT(extra.read_response(), Catch::StartsWith("HTTP/1.1 503"));
  bool closed = false;
  extra.read_until_close(3000ms, closed);
  CHECK(closed);
  CHECK(eventually([&] { return server.connection_count() == 4; }));
  held.clear();
  REQUIRE(eventually([&] { return server.connection_count() == 0; }));
  check_still_serving(server, "after/cap");
}

TEST_CASE("http: connections without the secret are dropped after pending_timeout, workers' idle ones are not",
          "[store][http]") {
  ServerOptions o = test_options();
  o.pending_timeout = 400ms;
  o.read_timeout = 5000ms;
  HttpStoreServer server(o);
  server.start();
  RawConn silent(server.port());
  RawConn partial(server.port());
  partial.send("GET /a/b HTTP/1.1\r\nHost: h\r\n");  // never finishes its head
  RawConn worker(server.port());
  worker.send("GET /a/b HTTP/1.1\r\n" + auth_header() + "\r\n");
  REQUIRE_THAT(worker.read_response(), Catch::StartsWith("HTTP/1.1 404"));
  auto t0 = std::chrono::steady_clock::now();
  bool closed1 = false, closed2 = false;
  silent.read_until_close(3000ms, closed1);
  partial.read_until_close(3000ms, closed2);
  CHECK(closed1);
  CHECK(closed2);
  CHECK(seconds_since(t0) < 1.5);
  // The authenticated connection, idle just as long, is still served.
  CHECK(worker.send("GET /a/b HTTP/1.1\r\n" + auth_header() + "\r\n"));
  CHECK_THAT(worker.read_response(), Catch::StartsWith("HTTP/1.1 404"));
  CHECK(server.pending_count() == 0);
}

TEST_CASE("http: a full pending pool closes its oldest connection, per source first", "[store][http]") {
  ServerOptions o = test_options();
  o.max_pending = 8;
  o.max_pending_per_source = 5;
  HttpStoreServer server(o);
  server.start();
  CHECK(server.pending_limit() == 8);
  std::vector<RawConn> idle;
  for (int i = 0; i < 5; ++i) idle.emplace_back(server.port());
  REQUIRE(eventually([&] { return server.pending_count() == 5; }));
  // A sixth from the same address pushes out the first.
  idle.emplace_back(server.port());
  bool closed = false;
  idle[0].read_until_close(2000ms, closed);
  CHECK(closed);
  CHECK(eventually([&] { return server.pending_count() == 5; }));
  for (std::size_t i = 1; i < idle.size(); ++i) {
    bool c = false;
    idle[i].read_until_close(50ms, c);
    CHECK_FALSE(c);
  }
  // Many more: the pool never exceeds its limits and a worker still gets in.
  for (int i = 0; i < 100; ++i) idle.emplace_back(server.port());
  CHECK(eventually([&] { return server.pending_count() <= 5; }));
  check_still_serving(server, "after/pool");
  CHECK(server.pending_count() <= 5);
}

TEST_CASE("http: keep-alive, pipelining and protocol errors that keep the connection", "[store][http]") {
  HttpStoreServer server(test_options());
  server.start();
  RawConn raw(server.port());
  const std::string h = auth_header();
  raw.send("PUT /p/1 HTTP/1.1\r\n" + h + "Content-Length: 3\r\n\r\none" + "GET /p/1 HTTP/1.1\r\n" + h + "\r\n" +
           "POST /p/n?add=41 HTTP/1.1\r\n" + h + "\r\n" + "POST /p/n?add=1 HTTP/1.1\r\n" + h + "\r\n");
  CHECK_THAT(raw.read_response(), Catch::StartsWith("HTTP/1.1 200"));
  CHECK_THAT(raw.read_response(), Catch::EndsWith("\r\n\r\none"));
  CHECK_THAT(raw.read_response(), Catch::EndsWith("\r\n\r\n41"));
  CHECK_THAT(raw.read_response(), Catch::EndsWith("\r\n\r\n42"));
  raw.send("PATCH /p/1 HTTP/1.1\r\n" + h + "\r\n");
  CHECK_THAT(raw.read_response(), Catch::StartsWith("HTTP/1.1 405"));
  raw.send("POST /p/1 HTTP/1.1\r\n" + h + "\r\n");
  CHECK_THAT(raw.read_response(), Catch::StartsWith("HTTP/1.1 400"));
  raw.send("GET /p/1?wait_ms=soon HTTP/1.1\r\n" + h + "\r\n");
  CHECK_THAT(raw.read_response(), Catch::StartsWith("HTTP/1.1 400"));
  raw.send("POST /p/1?add=1 HTTP/1.1\r\n" + h + "\r\n");  // "one" is not a counter
  CHECK_THAT(raw.read_response(), Catch::StartsWith("HTTP/1.1 400"));
  raw.send("GET /p/1 HTTP/1.1\r\n" + h + "\r\n");  // still the same connection
  CHECK_THAT(raw.read_response(), Catch::EndsWith("\r\n\r\none"));
  raw.send("GET /p/1 HTTP/1.1\r\n" + h + "Connection: close\r\n\r\n");
  bool closed = false;
  CHECK_THAT(raw.read_until_close(3000ms, closed), Catch::EndsWith("\r\n\r\none"));
  CHECK(closed);
}

TEST_CASE("http: chunked bodies, HTTP versions, line endings and 100-continue", "[store][http]") {
  HttpStoreServer server(test_options());
  server.start();
  const std::string h = auth_header();
  auto answer_and_close = [&](const std::string& request) {
    RawConn raw(server.port());
    raw.send(request);
    bool closed = false;
    std::string reply = raw.read_until_close(3000ms, closed);
    CHECK(closed);
    return reply;
  };
  CHECK_THAT(answer_and_close("PUT /v/te HTTP/1.1\r\n" + h + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"),
             Catch::StartsWith("HTTP/1.1 501") && Catch::Contains("send Content-Length"));
  CHECK_FALSE(server.store().try_get("v/te").has_value());
  CHECK_THAT(answer_and_close("GET /v/x HTTP/9.9\r\n" + h + "\r\n"), Catch::StartsWith("HTTP/1.1 505"));
  CHECK_THAT(answer_and_close("GET /v/x HTTP/1.x\r\n" + h + "\r\n"), Catch::StartsWith("HTTP/1.1 400"));
  CHECK_THAT(answer_and_close("GET /v/x HTTP/1.1\n" + h + "\r\n"), Catch::StartsWith("HTTP/1.1 400"));
  // HTTP/1.0 is served, then the connection closes.
  CHECK_THAT(answer_and_close("PUT /v/old HTTP/1.0\r\n" + h + "Content-Length: 3\r\n\r\nabc"),
             Catch::StartsWith("HTTP/1.1 200"));
  CHECK(server.store().get_string("v/old", 0ms) == "abc");

  // Expect: 100-continue: the interim answer comes from the head alone.
  RawConn raw(server.port());
  raw.send("PUT /v/cont HTTP/1.1\r\n" + h + "Expect: 100-continue\r\nContent-Length: 5\r\n\r\n");
  CHECK_THAT(raw.read_response(), Catch::StartsWith("HTTP/1.1 100"));
  raw.send("hello");
  CHECK_THAT(raw.read_response(), Catch::StartsWith("HTTP/1.1 200"));
  CHECK(server.store().get_string("v/cont", 0ms) == "hello");
  // A request that arrives a byte at a time is parsed like one that arrives at once.
  const std::string request = "PUT /v/slow HTTP/1.1\r\n" + h + "Content-Length: 4\r\n\r\nslow";
  for (char ch : request) REQUIRE(raw.send(std::string(1, ch)));
  CHECK_THAT(raw.read_response(), Catch::StartsWith("HTTP/1.1 200"));
  CHECK(server.store().get_string("v/slow", 0ms) == "slow");
}

TEST_CASE("http: long-polls are answered by in-process writes and leak no watchers", "[store][http]") {
  HttpStoreServer server(test_options());
  server.start();
  // Many concurrent long-polls on a single-threaded server: none parks a thread.
  constexpr int kWaiters = 64;
  std::vector<std::future<std::string>> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.push_back(std::async(std::launch::async, [&, i] {
      HttpStoreClient c(client_options(server.port()));
      return c.get_string("poll/" + std::to_string(i), 10000ms);
    }));
  }
  REQUIRE(eventually([&] { return server.store().watcher_count() == kWaiters; }));
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < kWaiters; ++i) server.store().set_string("poll/" + std::to_string(i), "v" + std::to_string(i));
  for (int i = 0; i < kWaiters; ++i) CHECK(waiters[i].get() == "v" + std::to_string(i));
  CHECK(seconds_since(t0) < 3.0);
  // Expired long-polls unregister their watchers.
  HttpStoreClient c(client_options(server.port()));
  CHECK_THROWS_AS(c.get("poll/never", 150ms), hvd::TimeoutError);
  CHECK(eventually([&] { return server.store().watcher_count() == 0; }));
  // An erase between the wake-up and the answer keeps the poll waiting.
  RawConn raw(server.port());
  raw.send("GET /poll/flicker?wait_ms=3000 HTTP/1.1\r\n" + auth_header() + "\r\n");
  REQUIRE(eventually([&] { return server.store().watcher_count() == 1; }));
  server.store().set_string("poll/flicker", "final");
  CHECK_THAT(raw.read_response(), Catch::EndsWith("\r\n\r\nfinal"));
}

TEST_CASE("http: stop() with a pending long-poll is prompt and the client gets IoError", "[store][http]") {
  auto server = std::make_unique<HttpStoreServer>(test_options());
  server->start();
  const uint16_t port = server->port();
  RawConn idle(port);  // an open idle connection must not delay stop() either
  auto pending = std::async(std::launch::async, [port] {
    HttpStoreClient c(client_options(port));
    c.set_string("x", "1");  // connection established, so the poll below reuses it
    auto t0 = std::chrono::steady_clock::now();
    try {
      c.get("never/set", 30000ms);
      return std::string("returned");
    } catch (const hvd::IoError& e) {
      return std::string("IoError after ") + std::to_string(seconds_since(t0));
    } catch (const std::exception& e) {
      return std::string("other: ") + e.what();
    }
  });
  REQUIRE(eventually([&] { return server->store().watcher_count() == 1; }));
  auto t0 = std::chrono::steady_clock::now();
  server->stop();
  CHECK(seconds_since(t0) < 1.0);
  REQUIRE(pending.wait_for(5s) == std::future_status::ready);
  CHECK_THAT(pending.get(), Catch::StartsWith("IoError"));
  server->stop();  // idempotent
  server.reset();
  ClientOptions lo = client_options(port);
  lo.connect_timeout = 200ms;
  HttpStoreClient late(lo);
  CHECK_THROWS_AS(late.try_get("x"), hvd::IoError);
}

TEST_CASE("http: client errors are clear and idle connections are re-established", "[store][http]") {
  const uint16_t nobody = unused_port();
  ClientOptions o = client_options(nobody);
  o.connect_timeout = 300ms;
  HttpStoreClient c(o);
  auto t0 = std::chrono::steady_clock::now();
  try {
    c.connect();
    FAIL("connected to nothing");
  } catch (const hvd::IoError& e) {
    CHECK_THAT(e.what(),
               Catch::Contains("127.0.0.1:" + std::to_string(nobody) + " unreachable") && Catch::Contains("refused"));
  }
  CHECK(seconds_since(t0) >= 0.25);
  CHECK(seconds_since(t0) < 3.0);
  CHECK_THROWS_AS(HttpStoreClient(ClientOptions{}), hvd::InvalidArgument);

  // A client started before its server connects once the server is up.
  ServerOptions so = test_options();
  so.port = unused_port();
  so.read_timeout = 300ms;
  HttpStoreServer server(so);
  auto early = std::async(std::launch::async, [&] {
    HttpStoreClient e(client_options(so.port));
    e.connect();
    return e.add("early", 1);
  });
  std::this_thread::sleep_for(200ms);
  server.start();
  CHECK(early.get() == 1);

  HttpStoreClient k(client_options(server.port()));
  k.set_string("idle/k", "v");
  std::this_thread::sleep_for(700ms);  // the server closes the idle connection
  CHECK(k.get_string("idle/k", 1000ms) == "v");
  CHECK(k.add("idle/n", 2) == 2);
}

TEST_CASE("http: make_store_from_env", "[store][http]") {
  ::unsetenv("HOROVOD_GLOO_RENDEZVOUS_ADDR");
  ::unsetenv("HOROVOD_GLOO_RENDEZVOUS_PORT");
  CHECK(make_store_from_env(100ms) == nullptr);
  HttpStoreServer server(test_options());
  server.start();
  ::setenv("HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1", 1);
  CHECK_THROWS_AS(make_store_from_env(100ms), hvd::InvalidArgument);
  ::setenv("HOROVOD_GLOO_RENDEZVOUS_PORT", "70000", 1);
  CHECK_THROWS_AS(make_store_from_env(100ms), hvd::InvalidArgument);
  ::setenv("HOROVOD_GLOO_RENDEZVOUS_PORT", "abc", 1);
  CHECK_THROWS_AS(make_store_from_env(100ms), hvd::InvalidArgument);
  ::setenv("HOROVOD_GLOO_RENDEZVOUS_PORT", std::to_string(server.port()).c_str(), 1);
  ::setenv("HVDRUN_SECRET", kSecret, 1);
  auto s = make_store_from_env(2000ms);
  REQUIRE(s != nullptr);
  s->set_string("global/env", "works");
  CHECK(server.store().get_string("global/env", 0ms) == "works");
  ::setenv("HOROVOD_GLOO_RENDEZVOUS_PORT", std::to_string(unused_port()).c_str(), 1);
  CHECK_THROWS_AS(make_store_from_env(200ms), hvd::IoError);
  ::unsetenv("HOROVOD_GLOO_RENDEZVOUS_ADDR");
  ::unsetenv("HOROVOD_GLOO_RENDEZVOUS_PORT");
  ::unsetenv("HVDRUN_SECRET");
}

TEST_CASE("http: stress, 16 client threads x 1000 operations", "[store][http][stress]") {
  ServerOptions o = test_options();
  o.threads = 2;  // also exercises the strand-per-connection path
  HttpStoreServer server(o);
  server.start();
  constexpr int kThreads = 16, kOps = 1000;
  std::atomic<int> errors{0};
  std::atomic<int64_t> adds{0};
  std::vector<std::thread> threads;
  auto t0 = std::chrono::steady_clock::now();
  // Operation i of thread t: i%3==0 writes key j=i/3, i%3==1 reads it back, i%3==2 adds.
  auto key_of = [](int t, int j) { return "stress/" + std::to_string(t) + "/" + std::to_string(j); };
  auto value_of = [](int t, int j) {
    return "t" + std::to_string(t) + ":" + std::to_string(j) + std::string(j % 97, 'z');
  };
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        HttpStoreClient c(client_options(server.port()));
        for (int i = 0; i < kOps; ++i) {
          const int j = i / 3;
          switch (i % 3) {
            case 0: c.set_string(key_of(t, j), value_of(t, j)); break;
            case 1:
              if (c.get_string(key_of(t, j), 1000ms) != value_of(t, j)) ++errors;
              break;
            case 2:
              c.add("stress/total", 1);
              ++adds;
              break;
          }
        }
      } catch (const std::exception& e) {
        spdlog::error("stress thread {}: {}", t, e.what());
        ++errors;
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(errors == 0);
  CHECK(adds == kThreads * (kOps / 3));
  CHECK(server.store().get_string("stress/total", 0ms) == std::to_string(adds.load()));
  // Every value written is what the server holds.
  for (int t = 0; t < kThreads; ++t) {
    for (int j = 0; j * 3 < kOps; ++j) {
      auto v = server.store().try_get(key_of(t, j));
      REQUIRE(v.has_value());
      CHECK(str(*v) == value_of(t, j));
    }
  }
  spdlog::info("stress: {} requests in {:.2f} s", kThreads * kOps, seconds_since(t0));
}

TEST_CASE("http: mutated requests never take the server down", "[store][http]") {
  ServerOptions o = test_options();
  o.read_timeout = 2000ms;
  o.max_body_bytes = 1u << 16;
  HttpStoreServer server(o);
  server.start();
  HttpStoreClient good(client_options(server.port()));
  good.set_string("fuzz/anchor", "still here");
  const std::vector<std::string> seeds{
      "PUT /fuzz/a HTTP/1.1\r\nHost: x\r\n" + auth_header() + "Content-Length: 5\r\n\r\nhello",
      "GET /fuzz/a?wait_ms=10 HTTP/1.1\r\n" + auth_header() + "\r\n",
      "POST /fuzz/n?add=3 HTTP/1.1\r\n" + auth_header() + "Expect: 100-continue\r\nContent-Length: 0\r\n\r\n",
      "DELETE /fuzz/a HTTP/1.1\r\n" + auth_header() + "Connection: close\r\n\r\n"};
  std::mt19937 rng(20261122);
  int answered = 0;
  for (int batch = 0; batch < 8; ++batch) {
    std::vector<RawConn> conns;
    for (int i = 0; i < 40; ++i) {
      std::string req = seeds[rng() % seeds.size()];
      const int edits = 1 + static_cast<int>(rng() % 4);
      for (int e = 0; e < edits && !req.empty(); ++e) {
        const std::size_t pos = rng() % req.size();
        switch (rng() % 4) {
          case 0: req[pos] = static_cast<char>(rng()); break;
          case 1: req.insert(pos, 1, static_cast<char>(rng())); break;
          case 2: req.erase(pos, 1); break;
          case 3: req.resize(pos); break;
        }
      }
      conns.emplace_back(server.port());
      conns.back().send(req + req);  // two in a row: exercises pipelining after a valid one
      ::shutdown(conns.back().fd(), SHUT_WR);
    }
    for (auto& c : conns) {
      bool closed = false;
      std::string reply = c.read_until_close(5000ms, closed);
      CHECK(closed);  // every connection ends: answered and closed, or closed on EOF
      if (reply.rfind("HTTP/1.1 ", 0) == 0)
        ++answered;
      else
        CHECK(reply.empty());
    }
  }
  CHECK(answered > 0);
  CHECK(good.get_string("fuzz/anchor", 1000ms) == "still here");
  CHECK(eventually([&] { return server.connection_count() == 1; }));  // only `good`
}

TEST_CASE("http: start() failures and bind addresses", "[store][http]") {
  HttpStoreServer first(test_options());
  first.start();
  ServerOptions taken = test_options();
  taken.port = first.port();
  HttpStoreServer second(taken);
  CHECK_THROWS_WITH(second.start(), Catch::Contains("cannot listen on 127.0.0.1:" + std::to_string(first.port())));
  ServerOptions bogus = test_options();
  bogus.bind_address = "192.0.2.1";  // TEST-NET-1: not an address of this host; no traffic
  HttpStoreServer third(bogus);
  CHECK_THROWS_WITH(third.start(), Catch::Contains("cannot listen on 192.0.2.1"));
  CHECK_THROWS_AS(first.start(), hvd::InvalidArgument);  // twice
  ServerOptions named = test_options();
  named.bind_address = "localhost";
  HttpStoreServer by_name(named);
  by_name.start();
  CHECK(by_name.port() != 0);
  ServerOptions any = test_options();
  any.bind_address = "0.0.0.0";
  HttpStoreServer wildcard(any);
  wildcard.start();
  CHECK(wildcard.address() == "0.0.0.0");
  check_still_serving(wildcard, "wildcard/ok");  // reachable on loopback
}
