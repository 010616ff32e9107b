// Shared-memory links: the SPSC ring (wrap-around, full/empty, the sleep
// flags), the memfd segment, pairing (tokens, strangers), transfers through
// progress() with tiny rings (every wait path), and failure: a SIGKILLed
// peer process, a local shutdown. Nothing may appear in /dev/shm.
#include "hvd/common/error.h"
#include "hvd/transport/link.h"
#include "hvd/transport/shm.h"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <map>
#include <random>
#include <thread>
#include <vector>

using namespace hvd;
using namespace hvd::transport;
using namespace std::chrono_literals;

namespace {

struct AlignedBuffer {
  explicit AlignedBuffer(std::size_t n) : p(static_cast<char*>(std::aligned_alloc(64, (n + 63) / 64 * 64))) {}
  ~AlignedBuffer() { std::free(p); }
  char* p;
};

std::vector<char> pattern(std::size_t n, unsigned seed) {
  std::vector<char> v(n);
  std::mt19937 g(seed);
  for (auto& c : v) c = static_cast<char>(g());
  return v;
}

/// Each side sends n pattern bytes (seeds `seed`, `seed`+1) while receiving
/// the other's, at once (b on a second thread), and both arrive intact.
void exchange_both_ways(ShmLink& a, ShmLink& b, std::size_t n, unsigned seed) {
  const std::vector<char> x = pattern(n, seed), y = pattern(n, seed + 1);
  std::vector<char> gx(n), gy(n);
  auto fut = std::async(std::launch::async, [&] { sendrecv(b, y.data(), n, b, gx.data(), n); });
  sendrecv(a, x.data(), n, a, gy.data(), n);
  fut.get();
  CHECK(gx == x);
  CHECK(gy == y);
}

std::size_t dev_shm_entries() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

/// Rank 0 listens, rank 1 connects (threads of this process).
std::pair<std::unique_ptr<ShmLink>, std::unique_ptr<ShmLink>> shm_pair(std::size_t capacity,
                                                                       std::chrono::microseconds spin = 0us) {
  ShmListener listener("secret", "gen0/", 0);
  const ShmToken token = random_token();
  auto fut = std::async(std::launch::async,
                        [&] { return shm_connect(listener.name(), 1, 0, token, capacity, Deadline::after(5s), spin); });
  std::map<int, ShmToken> tokens{{1, token}};
  auto a = listener.accept(0, tokens, Deadline::after(5s), spin);
  auto b = fut.get();
  CHECK(tokens.empty());
  return {std::move(a), std::move(b)};
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct EnvGuard {
  explicit EnvGuard(const char* n) : name(n) {
    if (const char* v = std::getenv(n)) old = v;
  }
  ~EnvGuard() {
    if (old.empty())
      ::unsetenv(name);
    else
      ::setenv(name, old.c_str(), 1);
  }
  const char* name;
  std::string old;
};

}  // namespace

TEST_CASE("shm ring: full, empty and wrap-around", "[transport][shm]") {
  AlignedBuffer mem(ShmRing::bytes_for(64));
  ShmRing r = ShmRing::create(mem.p, 64);
  CHECK(r.capacity() == 64);
  CHECK(r.readable() == 0);
  CHECK(r.writable() == 64);
  char out[200];
  CHECK(r.read(out, sizeof out) == 0);
  const std::vector<char> data = pattern(200, 1);
  CHECK(r.write(data.data(), 40) == 40);
  CHECK(r.read(out, 30) == 30);
  CHECK(std::memcmp(out, data.data(), 30) == 0);
  // 10 left; 54 more fit, wrapping past the end.
  CHECK(r.write(data.data() + 40, 100) == 54);
  CHECK(r.writable() == 0);
  CHECK(r.write(data.data(), 1) == 0);
  CHECK(r.readable() == 64);
  CHECK(r.read(out, sizeof out) == 64);
  CHECK(std::memcmp(out, data.data() + 30, 64) == 0);
  // A view attached to the same memory sees the same state.
  ShmRing other = ShmRing::attach(mem.p, ShmRing::bytes_for(64));
  CHECK(other.capacity() == 64);
  CHECK(other.readable() == 0);
}

namespace {
struct Collect {
  std::vector<char> bytes;
  std::vector<std::size_t> calls;
};
void collect_sink(void* ctx, const char* data, std::size_t n) {
  auto* c = static_cast<Collect*>(ctx);
  c->bytes.insert(c->bytes.end(), data, data + n);
  c->calls.push_back(n);
}
}  // namespace

TEST_CASE("shm ring: read_view hands out whole elements in place, across the wrap", "[transport][shm]") {
  AlignedBuffer mem(ShmRing::bytes_for(64));
  ShmRing r = ShmRing::create(mem.p, 64);
  const std::vector<char> data = pattern(200, 4);
  Collect c;
  CHECK(r.read_view(64, 4, &collect_sink, &c) == 0);  // empty
  // 6 bytes: one whole 4-byte element is taken, 2 stay.
  CHECK(r.write(data.data(), 6) == 6);
  CHECK(r.read_view(64, 4, &collect_sink, &c) == 4);
  CHECK(r.readable() == 2);
  // Move the ring to position 62 so an element straddles the end.
  char skip[64];
  CHECK(r.read(skip, 2) == 2);  // tail 6
  CHECK(r.write(data.data(), 56) == 56);
  CHECK(r.read(skip, 56) == 56);  // tail 62
  c = Collect{};
  CHECK(r.write(data.data() + 100, 22) == 22);  // 2 bytes before the end, 20 after
  CHECK(r.read_view(16, 4, &collect_sink, &c) == 16);  // len limits
  CHECK(r.read_view(64, 4, &collect_sink, &c) == 4);  // 2 left: not a whole element
  CHECK(r.readable() == 2);
  REQUIRE(c.bytes.size() == 20);
  CHECK(std::memcmp(c.bytes.data(), data.data() + 100, 20) == 0);
  // The straddling element came alone (through the local copy), the rest in place.
  CHECK(c.calls == std::vector<std::size_t>{4, 12, 4});
  // Ends on a multiple of the element size: one span, no copy.
  c = Collect{};
  CHECK(r.write(data.data() + 122, 2) == 2);
  CHECK(r.read_view(8, 4, &collect_sink, &c) == 4);
  CHECK(c.calls == std::vector<std::size_t>{4});
  CHECK(std::memcmp(c.bytes.data(), data.data() + 120, 4) == 0);
}

TEST_CASE("shm ring: capacities and headers are checked", "[transport][shm]") {
  AlignedBuffer mem(ShmRing::bytes_for(128));
  CHECK_THROWS_AS(ShmRing::create(mem.p, 100), InvalidArgument);
  CHECK_THROWS_AS(ShmRing::create(mem.p, 32), InvalidArgument);
  std::memset(mem.p, 0, ShmRing::bytes_for(128));
  CHECK_THROWS_AS(ShmRing::attach(mem.p, ShmRing::bytes_for(128)), InvalidArgument);  // no magic
  ShmRing::create(mem.p, 128);
  CHECK_THROWS_AS(ShmRing::attach(mem.p, ShmRing::bytes_for(64)), InvalidArgument);  // does not fit
}

TEST_CASE("shm ring: the sleep flags are published and taken once", "[transport][shm]") {
  AlignedBuffer mem(ShmRing::bytes_for(64));
  ShmRing r = ShmRing::create(mem.p, 64);
  CHECK_FALSE(r.take_consumer_waiter());
  CHECK(r.arm_consumer_wait());  // empty: may sleep
  char b[64] = {};
  r.write(b, 1);
  CHECK(r.take_consumer_waiter());  // the producer must wake it...
  CHECK_FALSE(r.take_consumer_waiter());  // ...once
  CHECK_FALSE(r.arm_consumer_wait());  // data there: do not sleep
  r.write(b, 63);
  CHECK(r.arm_producer_wait());  // full: may sleep
  r.read(b, 8);
  CHECK(r.take_producer_waiter());
  CHECK_FALSE(r.arm_producer_wait());  // space there
}

TEST_CASE("shm ring: one producer and one consumer thread move a stream intact", "[transport][shm]") {
  AlignedBuffer mem(ShmRing::bytes_for(4096));
  ShmRing prod = ShmRing::create(mem.p, 4096);
  ShmRing cons = ShmRing::attach(mem.p, ShmRing::bytes_for(4096));
  const std::vector<char> data = pattern(2 << 20, 7);
  std::vector<char> got(data.size());
  std::thread t([&] {
    std::mt19937 g(3);
    std::size_t off = 0;
    while (off < data.size())
      off += prod.write(data.data() + off, std::min<std::size_t>(g() % 9000 + 1, data.size() - off));
  });
  std::mt19937 g(5);
  std::size_t off = 0;
  while (off < got.size()) off += cons.read(got.data() + off, std::min<std::size_t>(g() % 7000 + 1, got.size() - off));
  t.join();
  CHECK(got == data);
}

TEST_CASE("shm links carry large messages both ways at once through tiny rings", "[transport][shm]") {
  const std::size_t before = dev_shm_entries();
  // Spin 0: every wait goes through the flags and the wake-up sockets.
  auto [a, b] = shm_pair(4096);
  CHECK(a->peer() == 1);
  CHECK(b->peer() == 0);
  CHECK(a->describe() == "rank 1 (shared memory, pid " + std::to_string(::getpid()) + ")");
  CHECK(dev_shm_entries() == before);
  for (std::size_t n : {std::size_t{1}, std::size_t{4096}, std::size_t{100001}, std::size_t{3} << 20}) {
    // Sends of >= 1 MiB run on progress()'s send helper thread while the
    // caller receives: both wait on the same link at once.
    exchange_both_ways(*a, *b, n, 11);
  }
}

TEST_CASE("shm links hand received bytes out in place (recv_view) through progress()", "[transport][shm]") {
  auto [a, b] = shm_pair(4096);
  REQUIRE(b->supports_recv_view());
  // Misalign the ring first (an odd-sized message), then stream 8-byte
  // elements through a 4 KiB ring: every wait path, and wrapped elements.
  const std::vector<char> odd = pattern(3, 30);
  std::vector<char> got_odd(3);
  auto f0 = std::async(std::launch::async, [&, l = a.get()] { l->send(odd.data(), odd.size()); });
  b->recv(got_odd.data(), got_odd.size());
  f0.get();
  CHECK(got_odd == odd);
  const std::size_t n = 300000 * 8;
  const std::vector<char> x = pattern(n, 31);
  auto fut = std::async(std::launch::async, [&, l = a.get()] { l->send(x.data(), n); });
  Collect c;
  Transfer t = Transfer::recv_view(*b, n, 8, &collect_sink, &c);
  progress(&t, 1, Deadline::after(10s));
  fut.get();
  CHECK(t.done == n);
  CHECK(c.bytes == x);
  for (std::size_t k : c.calls) CHECK(k % 8 == 0);
}

TEST_CASE("shm links: may_move says when a try_send / try_recv could move bytes", "[transport][shm]") {
  auto [a, b] = shm_pair(64);
  CHECK(a->busy_poll_hint() == 0ns);  // the default, until the caller decides
  a->set_busy_poll(1500ns);
  CHECK(a->busy_poll_hint() == 1500ns);
  CHECK_FALSE(a->may_move(false));  // nothing sent to a
  CHECK(a->may_move(true));  // a's ring to b is empty
  const std::vector<char> x = pattern(64, 50);
  CHECK(b->try_send(x.data(), 10) == 10);
  CHECK(a->may_move(false));
  CHECK_FALSE(b->may_move(false));
  CHECK(a->try_send(x.data(), 64) == 64);  // a's ring to b is full now
  CHECK_FALSE(a->may_move(true));
  char got[64];
  CHECK(b->try_recv(got, 1) == 1);
  CHECK(a->may_move(true));
  CHECK(a->try_recv(got, 64) == 10);
  CHECK_FALSE(a->may_move(false));
  // A shut-down link says yes: the next try throws (progress() must see it).
  a->shutdown();
  CHECK(a->may_move(false));
  CHECK_THROWS_AS(a->try_recv(got, 1), IoError);
}

TEST_CASE("shm links with busy polling: small round trips and long waits complete intact", "[transport][shm]") {
  // Busy polling between the spin's yields (the default with no more local
  // ranks than cores). Round trips of one small message exercise the busy
  // poll; a peer that answers only after 30 ms makes the waiter give up the
  // spin and sleep on the wake-up socket.
  auto [a, b] = shm_pair(8192, 200us);
  a->set_busy_poll(2000ns);
  b->set_busy_poll(2000ns);
  const std::vector<char> x = pattern(4096, 60);
  auto echo = std::async(std::launch::async, [&, l = b.get()] {
    std::vector<char> buf(4096);
    for (int i = 0; i < 2000; ++i) {
      l->recv(buf.data(), buf.size(), Deadline::after(10s));
      if (i == 1999) std::this_thread::sleep_for(30ms);
      l->send(buf.data(), buf.size(), Deadline::after(10s));
    }
  });
  std::vector<char> got(4096);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 2000; ++i) {
    a->send(x.data(), x.size(), Deadline::after(10s));
    a->recv(got.data(), got.size(), Deadline::after(10s));
    REQUIRE(got == x);
  }
  echo.get();
  CHECK(seconds_since(t0) < 10.0);
}

TEST_CASE("HVD_SHM_REDUCE_IN_RING=0 turns the in-place receive off", "[transport][shm]") {
  EnvGuard g(kShmInPlaceEnv);
  ::setenv(kShmInPlaceEnv, "0", 1);
  auto [a, b] = shm_pair(4096);
  CHECK_FALSE(a->supports_recv_view());
  CHECK_FALSE(b->supports_recv_view());
}

namespace {
/// A link that only moves bytes (as TCP): no shared-memory capability.
class BytesOnlyLink final : public Link {
 public:
  int peer() const override { return 1; }
  std::size_t try_send(const void*, std::size_t) override { return 0; }
  std::size_t try_recv(void*, std::size_t) override { return 0; }
  int poll_fd() const override { return -1; }
  void shutdown() override {}
  bool is_shutdown() const override { return false; }
  std::string describe() const override { return "a bytes-only link"; }
};
}  // namespace

TEST_CASE("a link without the shared-memory capability refuses in-place receives", "[transport][shm]") {
  BytesOnlyLink link;
  CHECK(link.shared_memory() == nullptr);
  auto [a, b] = shm_pair(64);
  CHECK(static_cast<Link&>(*a).shared_memory() == a.get());
  Collect c;
  Transfer t = Transfer::recv_view(link, 8, 8, &collect_sink, &c);
  CHECK(t.shm == nullptr);
  CHECK_THROWS_AS(progress(&t, 1, Deadline::after(1s)), Error);
}

TEST_CASE("single-copy sends (HVD_SHM_CMA=1) carry large messages both ways through tiny rings",
          "[transport][shm][cma]") {
  EnvGuard g(kShmCmaEnv);
  ::setenv(kShmCmaEnv, "1", 1);
  auto [a, b] = shm_pair(4096);
  for (std::size_t n : {std::size_t{1000}, kShmCmaMinBytes, std::size_t{3} << 20}) exchange_both_ways(*a, *b, n, 21);
  // Everything from kShmCmaMinBytes on went single copy (this process may
  // read its own memory).
  CHECK(a->single_copy_bytes() == kShmCmaMinBytes + (std::size_t{3} << 20));
  CHECK(b->single_copy_bytes() == a->single_copy_bytes());
}

TEST_CASE("a receiver that refuses single copy gets the data through the ring", "[transport][shm][cma]") {
  EnvGuard g(kShmCmaEnv);
  ShmListener listener("secret", "gen0/", 0);
  const ShmToken token = random_token();
  const std::size_t n = std::size_t{2} << 20;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // the sender, with single copy on
    int rc = 1;
    try {
      ::setenv(kShmCmaEnv, "1", 1);
      auto l = shm_connect(listener.name(), 1, 0, token, 4096, Deadline::after(5s), 0us);
      const std::vector<char> x = pattern(n, 31);
      l->send(x.data(), n, Deadline::after(10s));
      char ack = 0;
      l->recv(&ack, 1, Deadline::after(10s));
      rc = ack == 'y' ? 0 : 2;
    } catch (...) {
    }
    ::_exit(rc);
  }
  ::setenv(kShmCmaEnv, "0", 1);  // the receiver refuses
  std::map<int, ShmToken> tokens{{1, token}};
  auto link = listener.accept(0, tokens, Deadline::after(5s), 0us);
  std::vector<char> got(n);
  link->recv(got.data(), n, Deadline::after(10s));
  CHECK(got == pattern(n, 31));
  CHECK(link->single_copy_bytes() == 0);
  const char ack = 'y';
  link->send(&ack, 1, Deadline::after(5s));
  int status = -1;
  ::waitpid(child, &status, 0);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("a shm pairing with the wrong token or from a stranger is refused, the real peer pairs",
          "[transport][shm][security]") {
  ShmListener listener("secret", "gen0/", 0);
  const ShmToken good = random_token();
  ShmToken bad = good;
  bad[0] ^= 1;
  std::map<int, ShmToken> tokens{{1, good}};
  auto accepted = std::async(std::launch::async, [&] { return listener.accept(0, tokens, Deadline::after(10s), 0us); });
  // A stranger that connects and sends garbage.
  {
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::memcpy(a.sun_path + 1, listener.name().data(), listener.name().size());
    REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a),
                      static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + listener.name().size())) == 0);
    const char junk[32] = "GET / HTTP/1.0\r\n";
    CHECK(::send(fd, junk, sizeof junk, MSG_NOSIGNAL) == sizeof junk);
    char c;
    CHECK(::recv(fd, &c, 1, 0) == 0);  // closed without an answer
    ::close(fd);
  }
  // The right rank with a wrong token, and a rank that was not invited.
  CHECK_THROWS_WITH(shm_connect(listener.name(), 1, 0, bad, 4096, Deadline::after(5s), 0us),
                    Catch::Contains("refused"));
  CHECK_THROWS_WITH(shm_connect(listener.name(), 2, 0, good, 4096, Deadline::after(5s), 0us),
                    Catch::Contains("refused"));
  auto mine = shm_connect(listener.name(), 1, 0, good, 4096, Deadline::after(5s), 0us);
  auto theirs = accepted.get();
  CHECK(theirs->peer() == 1);
  char x = 42, y = 0;
  mine->send(&x, 1);
  theirs->recv(&y, 1);
  CHECK(y == 42);
}

TEST_CASE("shm accept times out when nobody comes", "[transport][shm]") {
  ShmListener listener("secret", "gen0/", 0);
  std::map<int, ShmToken> tokens{{1, random_token()}};
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(listener.accept(0, tokens, Deadline::after(200ms), 0us), TimeoutError);
  CHECK(seconds_since(t0) < 2.0);
}

TEST_CASE("a local shutdown wakes a thread blocked on a shm link and the peer fails too", "[transport][shm][failure]") {
  auto [a, b] = shm_pair(4096);
  auto fut = std::async(std::launch::async, [&, l = a.get()] {
    char buf[16];
    l->recv(buf, sizeof buf);
  });
  std::this_thread::sleep_for(50ms);
  const auto t0 = std::chrono::steady_clock::now();
  a->shutdown();
  CHECK_THROWS_AS(fut.get(), IoError);
  CHECK(seconds_since(t0) < 2.0);
  char buf[16];
  CHECK_THROWS_WITH(b->recv(buf, sizeof buf, Deadline::after(5s)),
                    Catch::Contains("rank 0") && Catch::Contains("closed by peer"));
  std::vector<char> big(1 << 20);
  CHECK_THROWS_AS(b->send(big.data(), big.size(), Deadline::after(5s)), IoError);
}

TEST_CASE("SIGKILL of the peer process fails a blocked shm receive and send within 2 s, naming the rank",
          "[transport][shm][failure]") {
  const std::size_t before = dev_shm_entries();
  for (const bool sending : {false, true}) {
    ShmListener listener("secret", "gen0/", 0);
    const ShmToken token = random_token();
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      try {
        auto l = shm_connect(listener.name(), 1, 0, token, 4096, Deadline::after(5s), 0us);
        char x[100] = {};
        l->send(x, sizeof x);  // then hang: neither reads nor writes more
        ::pause();
      } catch (...) {
      }
      ::_exit(1);
    }
    std::map<int, ShmToken> tokens{{1, token}};
    auto link = listener.accept(0, tokens, Deadline::after(5s), 0us);
    CHECK(link->peer_pid() == child);
    char got[100];
    link->recv(got, sizeof got, Deadline::after(5s));
    auto fut = std::async(std::launch::async, [&, l = link.get()] {
      std::vector<char> buf(1 << 20);
      if (sending)
        l->send(buf.data(), buf.size());  // fills the 4 KiB ring, then waits for space
      else
        l->recv(buf.data(), buf.size());
    });
    std::this_thread::sleep_for(100ms);
    const auto t0 = std::chrono::steady_clock::now();
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    CHECK_THROWS_WITH(fut.get(), Catch::Contains("rank 1") && Catch::Contains("closed by peer"));
    CHECK(seconds_since(t0) < 2.0);
  }
  CHECK(dev_shm_entries() == before);
}

TEST_CASE("a SIGKILLed peer whose forked child still holds the link fails a blocked receive within 2 s",
          "[transport][shm][failure]") {
  ShmListener listener("secret", "gen0/", 0);
  const ShmToken token = random_token();
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    try {
      auto l = shm_connect(listener.name(), 1, 0, token, 4096, Deadline::after(5s), 0us);
      // A grandchild inherits the link's sockets (as a data loader worker
      // would) and outlives us: no EOF reaches the peer when we die.
      const pid_t grandchild = ::fork();
      if (grandchild == 0) {
        ::sleep(10);
        ::_exit(0);
      }
      ssize_t w = ::write(pipefd[1], &grandchild, sizeof grandchild);
      (void)w;
      ::pause();
    } catch (...) {
    }
    ::_exit(1);
  }
  ::close(pipefd[1]);
  std::map<int, ShmToken> tokens{{1, token}};
  auto link = listener.accept(0, tokens, Deadline::after(5s), 0us);
  pid_t grandchild = 0;
  REQUIRE(::read(pipefd[0], &grandchild, sizeof grandchild) == sizeof grandchild);
  ::close(pipefd[0]);
  auto fut = std::async(std::launch::async, [&, l = link.get()] {
    char buf[64];
    l->recv(buf, sizeof buf);
  });
  std::this_thread::sleep_for(100ms);
  const auto t0 = std::chrono::steady_clock::now();
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CHECK_THROWS_WITH(fut.get(), Catch::Contains("rank 1") && Catch::Contains("is gone"));
  CHECK(seconds_since(t0) < 2.0);
  ::kill(grandchild, SIGKILL);  // reparented: init reaps it
}

TEST_CASE(
    "HVD_TRANSPORT, HVD_SHM_SPIN_US, HVD_SHM_BUSY_POLL_NS, HVD_SHM_CMA and HVD_SHM_REDUCE_IN_RING are parsed strictly",
    "[transport][shm]") {
  EnvGuard g1(kTransportEnv), g2(kShmSpinEnv), g5(kShmBusyPollEnv);
  ::unsetenv(kShmBusyPollEnv);
  ::unsetenv(kTransportEnv);
  CHECK(shm_enabled_from_env());
  ::setenv(kTransportEnv, "shm", 1);
  CHECK(shm_enabled_from_env());
  ::setenv(kTransportEnv, "tcp", 1);
  CHECK_FALSE(shm_enabled_from_env());
  ::setenv(kTransportEnv, "infiniband", 1);
  CHECK_THROWS_WITH(shm_enabled_from_env(), Catch::Contains("HVD_TRANSPORT") && Catch::Contains("infiniband"));
  ::unsetenv(kShmSpinEnv);
  CHECK(shm_spin_from_env(1) == default_shm_spin(1));
  CHECK(default_shm_spin(2) == 20us);
  CHECK(default_shm_spin(100000) == 0us);  // heavily oversubscribed: never spin
  ::setenv(kShmSpinEnv, "7", 1);
  CHECK(shm_spin_from_env(100000) == 7us);
  ::setenv(kShmSpinEnv, "soon", 1);
  CHECK_THROWS_WITH(shm_spin_from_env(2), Catch::Contains("HVD_SHM_SPIN_US"));
  EnvGuard g3(kShmCmaEnv);
  ::unsetenv(kShmCmaEnv);
  CHECK_FALSE(shm_cma_from_env());
  ::setenv(kShmCmaEnv, "1", 1);
  CHECK(shm_cma_from_env());
  ::unsetenv(kShmSpinEnv);
  ::setenv(kShmCmaEnv, "maybe", 1);
  CHECK_THROWS_WITH(check_shm_env(), Catch::Contains("HVD_SHM_CMA"));
  ::unsetenv(kShmCmaEnv);
  EnvGuard g4(kShmInPlaceEnv);
  ::unsetenv(kShmInPlaceEnv);
  CHECK(shm_reduce_in_ring_from_env());
  ::setenv(kShmInPlaceEnv, "0", 1);
  CHECK_FALSE(shm_reduce_in_ring_from_env());
  ::setenv(kShmInPlaceEnv, "sometimes", 1);
  CHECK_THROWS_WITH(check_shm_env(), Catch::Contains("HVD_SHM_REDUCE_IN_RING"));
  ::unsetenv(kShmInPlaceEnv);
  // Busy polling: on (2 us) while the local ranks do not outnumber the
  // CPUs they may use together, off beyond; the variable wins.
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(0, sizeof set, &set) == 0);
  const int cpus = CPU_COUNT(&set);
  CHECK(default_shm_busy_poll(2, 2) == 2000ns);
  CHECK(default_shm_busy_poll(1, 1) == 2000ns);
  CHECK(default_shm_busy_poll(3, 2) == 0ns);
  CHECK(shm_busy_poll_from_env(3, 2) == 0ns);
  CHECK(shm_busy_poll_from_env(cpus, cpus) == 2000ns);
  ::setenv(kShmBusyPollEnv, "500", 1);
  CHECK(shm_busy_poll_from_env(3, 2) == 500ns);
  ::setenv(kShmBusyPollEnv, "0", 1);
  CHECK(shm_busy_poll_from_env(1, 1) == 0ns);
  for (const char* bad : {"2us", "-1", "1000001"}) {
    ::setenv(kShmBusyPollEnv, bad, 1);
    CHECK_THROWS_WITH(check_shm_env(), Catch::Contains("HVD_SHM_BUSY_POLL_NS") && Catch::Contains(bad));
  }
}

TEST_CASE("shared-memory links use the send helper thread only with a spare core per rank", "[transport][shm]") {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(0, sizeof set, &set) == 0);
  const int cpus = CPU_COUNT(&set);
  CHECK(shm_offload_sends(cpus / 2) == (cpus >= 2));
  CHECK_FALSE(shm_offload_sends(cpus / 2 + 1));
  CHECK_FALSE(shm_offload_sends(4 * cpus));
  auto [a, b] = shm_pair(4096);
  CHECK(a->offload_sends());  // the default, until the caller decides
  a->set_offload_sends(false);
  CHECK_FALSE(a->offload_sends());
  // Without the helper a large exchange still completes both ways (one
  // thread per side alternates between its send and its receive).
  b->set_offload_sends(false);
  exchange_both_ways(*a, *b, std::size_t{3} << 20, 41);
}

TEST_CASE("the local ranks' CPUs are the union of their affinity masks", "[transport][shm]") {
  cpu_set_t set;
  CPU_ZERO(&set);
  REQUIRE(::sched_getaffinity(0, sizeof set, &set) == 0);
  const int cpus = CPU_COUNT(&set);
  CHECK(shm_local_cpus({}) == cpus);
  CHECK(shm_local_cpus({::getpid(), -1}) == cpus);  // an unreadable peer adds nothing
  if (cpus < 2) {
    SUCCEED("one CPU: the pinned case needs two");
    return;
  }
  // Two children pinned to different single CPUs (as mpirun --bind-to core
  // does): each sees one CPU, together they have two.
  int first = -1, second = -1;
  for (int c = 0; c < CPU_SETSIZE && second < 0; ++c) {
    if (!CPU_ISSET(c, &set)) continue;
    (first < 0 ? first : second) = c;
  }
  int ready[2];
  REQUIRE(::pipe(ready) == 0);
  auto spawn = [&](int cpu) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      const char ok = ::sched_setaffinity(0, sizeof one, &one) == 0 ? 'y' : 'n';
      (void)!::write(ready[1], &ok, 1);
      ::pause();
      ::_exit(0);
    }
    return pid;
  };
  const pid_t a = spawn(first), b = spawn(second);
  char ok[2] = {0, 0};
  REQUIRE(::read(ready[0], &ok[0], 1) == 1);
  REQUIRE(::read(ready[0], &ok[1], 1) == 1);
  ::close(ready[0]);
  ::close(ready[1]);
  CHECK(ok[0] == 'y');
  CHECK(ok[1] == 'y');
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(::sched_setaffinity(0, sizeof one, &one) == 0);  // this thread: one CPU, like the children
  CHECK(shm_local_cpus({}) == 1);
  CHECK(shm_local_cpus({a}) == 1);
  CHECK(shm_local_cpus({a, b}) == 2);
  REQUIRE(::sched_setaffinity(0, sizeof set, &set) == 0);
  for (pid_t p : {a, b}) {
    ::kill(p, SIGKILL);
    ::waitpid(p, nullptr, 0);
  }
}

TEST_CASE("ring capacity shrinks with many local peers, within bounds", "[transport][shm]") {
  CHECK(shm_ring_capacity(1) == (1u << 20));
  CHECK(shm_ring_capacity(8) == (1u << 20));
  CHECK(shm_ring_capacity(16) == (512u << 10));
  CHECK(shm_ring_capacity(63) == (128u << 10));
  CHECK(shm_ring_capacity(1000) == (64u << 10));
  CHECK_FALSE(shm_host_id().empty());
  CHECK(shm_host_id() == shm_host_id());
}
