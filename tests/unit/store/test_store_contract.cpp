// The Store contract, checked against every implementation: in-memory, file,
// prefix (over in-memory) and HTTP client -> HTTP server. Each fixture gives
// the store under test plus `handle()`, another view of the same data (a
// second client, a second FileStore on the directory) for multi-party checks.
#include "hvd/common/error.h"
#include "hvd/store/file_store.h"
#include "hvd/store/http_store.h"
#include "hvd/store/memory_store.h"
#include "hvd/store/prefix_store.h"
#include "test_store_util.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <numeric>
#include <thread>

using namespace hvd::store;
using namespace hvd::store::test;

namespace {

struct MemoryFixture {
  InMemoryStore mem;
  Store& store() { return mem; }
  std::shared_ptr<Store> handle() {
    return std::shared_ptr<Store>(&mem, [](Store*) {});
  }
};

struct FileFixture {
  TempDir dir;
  FileStore fs{FileStoreOptions{dir.path() + "/store", Ms(20)}};
  Store& store() { return fs; }
  std::shared_ptr<Store> handle() {
    return std::make_shared<FileStore>(FileStoreOptions{dir.path() + "/store", Ms(20)});
  }
};

struct PrefixFixture {
  InMemoryStore mem;
  PrefixStore ps{mem, "gen3"};
  Store& store() { return ps; }
  std::shared_ptr<Store> handle() { return std::make_shared<PrefixStore>(mem, "gen3/"); }
};

struct HttpFixture {
  static ServerOptions server_options() {
    ServerOptions o;
    o.bind_address = "127.0.0.1";
    o.secret = "contract-secret";
    return o;
  }
  HttpStoreServer server{server_options()};
  std::shared_ptr<Store> client;
  HttpFixture() {
    server.start();
    client = handle();
  }
  Store& store() { return *client; }
  std::shared_ptr<Store> handle() {
    ClientOptions o;
    o.host = "127.0.0.1";
    o.port = server.port();
    o.secret = "contract-secret";
    o.connect_timeout = Ms(5000);
    return std::make_shared<HttpStoreClient>(o);
  }
};

}  // namespace

#define STORE_FIXTURES MemoryFixture, FileFixture, PrefixFixture, HttpFixture

TEMPLATE_TEST_CASE("store contract: set, get, overwrite", "[store][contract]", STORE_FIXTURES) {
  TestType f;
  Store& s = f.store();
  s.set_string("global/rank_0", "addr-0");
  CHECK(s.get_string("global/rank_0", 1000ms) == "addr-0");
  s.set_string("global/rank_0", "addr-0-bis");
  CHECK(s.get_string("global/rank_0", 1000ms) == "addr-0-bis");
  auto other = f.handle();
  CHECK(other->get_string("global/rank_0", 1000ms) == "addr-0-bis");
  // An empty value is a value, not an absence.
  s.set("empty", Bytes{});
  auto e = s.try_get("empty");
  REQUIRE(e.has_value());
  CHECK(e->empty());
  CHECK(s.get("empty", 100ms).empty());
}

TEMPLATE_TEST_CASE("store contract: try_get and erase", "[store][contract]", STORE_FIXTURES) {
  TestType f;
  Store& s = f.store();
  CHECK_FALSE(s.try_get("nope/never").has_value());
  CHECK_FALSE(s.erase("nope/never"));
  s.set_string("scope/k", "v");
  auto v = s.try_get("scope/k");
  REQUIRE(v.has_value());
  CHECK(str(*v) == "v");
  CHECK(s.erase("scope/k"));
  CHECK_FALSE(s.erase("scope/k"));
  CHECK_FALSE(s.try_get("scope/k").has_value());
  CHECK_FALSE(f.handle()->try_get("scope/k").has_value());
}

TEMPLATE_TEST_CASE("store contract: add", "[store][contract]", STORE_FIXTURES) {
  TestType f;
  Store& s = f.store();
  CHECK(s.add("counter", 5) == 5);
  CHECK(s.add("counter", -2) == 3);
  CHECK(s.add("counter", 0) == 3);
  CHECK(s.get_string("counter", 100ms) == "3");
  s.set_string("text", "not a number");
  CHECK_THROWS_AS(s.add("text", 1), hvd::InvalidArgument);
  CHECK(s.get_string("text", 100ms) == "not a number");
}

TEMPLATE_TEST_CASE("store contract: concurrent adds are atomic", "[store][contract]", STORE_FIXTURES) {
  TestType f;
  constexpr int kThreads = 8, kAdds = 100;
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t, h = f.handle()] {
      try {
        for (int i = 0; i < kAdds; ++i) seen[t].push_back(h->add("shared/counter", 1));
      } catch (...) {
        ++failures;
      }
    });
  }
  for (auto& th : threads) th.join();
  REQUIRE(failures == 0);
  std::vector<int64_t> all;
  for (auto& v : seen) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  std::vector<int64_t> expected(kThreads * kAdds);
  std::iota(expected.begin(), expected.end(), 1);
  CHECK(all == expected);  // every intermediate value handed out exactly once
  CHECK(f.store().add("shared/counter", 0) == kThreads * kAdds);
}

TEMPLATE_TEST_CASE("store contract: timeouts name the missing keys", "[store][contract]", STORE_FIXTURES) {
  TestType f;
  Store& s = f.store();
  s.set_string("present", "1");
  auto t0 = std::chrono::steady_clock::now();
  try {
    s.get("absent/key_a", 150ms);
    FAIL("get did not time out");
  } catch (const hvd::TimeoutError& e) {
    CHECK_THAT(e.what(), Catch::Contains("absent/key_a"));
  }
  double took = seconds_since(t0);
  CHECK(took >= 0.14);
  CHECK(took < 3.0);

  t0 = std::chrono::steady_clock::now();
  try {
    s.wait({"present", "missing_a", "missing_b"}, 200ms);
    FAIL("wait did not time out");
  } catch (const hvd::TimeoutError& e) {
    CHECK_THAT(e.what(), Catch::Contains("missing_a") && Catch::Contains("missing_b"));
    CHECK_THAT(e.what(), !Catch::Contains("'present'"));
  }
  took = seconds_since(t0);
  CHECK(took >= 0.19);
  CHECK(took < 3.0);
  // Zero timeout: an existing key is still returned, a missing one times out at once.
  CHECK(s.get_string("present", 0ms) == "1");
  CHECK_THROWS_AS(s.get("absent", 0ms), hvd::TimeoutError);
  CHECK_NOTHROW(s.wait({"present"}, 0ms));
}

TEMPLATE_TEST_CASE("store contract: a blocked get is woken by a later set from another thread", "[store][contract]",
                   STORE_FIXTURES) {
  TestType f;
  Store& s = f.store();
  auto writer_handle = f.handle();
  std::thread writer([&] {
    std::this_thread::sleep_for(200ms);
    writer_handle->set_string("late/key", "arrived");
    std::this_thread::sleep_for(100ms);
    writer_handle->set_string("late/other", "too");
  });
  auto t0 = std::chrono::steady_clock::now();
  CHECK(s.get_string("late/key", 10000ms) == "arrived");
  double took = seconds_since(t0);
  CHECK(took >= 0.15);
  CHECK(took < 5.0);
  s.wait({"late/key", "late/other"}, 10000ms);
  CHECK(seconds_since(t0) < 5.0);
  writer.join();
}

TEMPLATE_TEST_CASE("store contract: binary values and unusual keys", "[store][contract]", STORE_FIXTURES) {
  TestType f;
  Store& s = f.store();
  Bytes all(256);
  for (int i = 0; i < 256; ++i) all[i] = static_cast<uint8_t>(i);
  Bytes nuls{0, 0, 'a', 0, 0};
  s.set("bin/all_bytes", all);
  s.set("bin/nuls", nuls);
  CHECK(s.get("bin/all_bytes", 1000ms) == all);
  CHECK(s.get("bin/nuls", 1000ms) == nuls);
  CHECK(f.handle()->get("bin/nuls", 1000ms) == nuls);
  // Keys with spaces, '%', '?', '#', dots and non-ASCII survive every encoding.
  const std::vector<std::string> keys{"a b/c d", "pct%41/q?x=1#frag", "../escape", "dots/./..", "ü/ключ", "x/y/z/w"};
  for (const auto& k : keys) s.set_string(k, "v:" + k);
  for (const auto& k : keys) CHECK(s.get_string(k, 1000ms) == "v:" + k);
  CHECK_FALSE(s.try_get("pctA/q").has_value());
}

TEMPLATE_TEST_CASE("store contract: large values", "[store][contract]", STORE_FIXTURES) {
  TestType f;
  Store& s = f.store();
  Bytes big(8u << 20);
  uint32_t x = 12345;
  for (auto& b : big) {
    x = x * 1103515245u + 12345u;
    b = static_cast<uint8_t>(x >> 24);
  }
  s.set("big/value", big);
  CHECK(s.get("big/value", 5000ms) == big);
  CHECK(f.handle()->get("big/value", 5000ms) == big);
}

// ---- implementation-specific checks ----------------------------------------

TEST_CASE("PrefixStore namespaces keys in the wrapped store", "[store]") {
  InMemoryStore mem;
  PrefixStore gen3(mem, "gen3");
  PrefixStore gen4(mem, "gen4/");
  gen3.set_string("rank_0", "a");
  CHECK(mem.get_string("gen3/rank_0", 0ms) == "a");
  CHECK_FALSE(gen4.try_get("rank_0").has_value());
  CHECK(gen3.full_key("x") == "gen3/x");
  CHECK_THROWS_AS(PrefixStore(mem, ""), hvd::InvalidArgument);
  try {
    gen4.get("rank_0", 10ms);
    FAIL("no timeout");
  } catch (const hvd::TimeoutError& e) {
    CHECK_THAT(e.what(), Catch::Contains("gen4/rank_0"));
  }
}

TEST_CASE("FileStore keeps every key inside its directory", "[store]") {
  TempDir dir;
  FileStore fs(FileStoreOptions{dir.path() + "/a/b", Ms(10)});
  fs.set_string("../../escape", "x");
  fs.set_string(".hidden", "y");
  struct stat st;
  CHECK(::stat((dir.path() + "/escape").c_str(), &st) != 0);
  CHECK(::stat((dir.path() + "/a/escape").c_str(), &st) != 0);
  CHECK(fs.get_string("../../escape", 0ms) == "x");
  CHECK(fs.get_string(".hidden", 0ms) == "y");
  CHECK_THROWS_AS(fs.set_string("", "x"), hvd::InvalidArgument);
  CHECK_THROWS_AS(fs.set_string(std::string(300, 'k'), "x"), hvd::InvalidArgument);
  CHECK_THROWS_AS(FileStore(FileStoreOptions{"/proc/definitely/not/writable", Ms(10)}), hvd::IoError);
}

TEST_CASE("InMemoryStore watchers fire once, outside the lock, and can be cancelled", "[store]") {
  InMemoryStore mem;
  int fired = 0;
  InMemoryStore::WatchId id = 0;
  CHECK_FALSE(mem.try_get_or_watch(
                     "k",
                     [&] {
                       ++fired;
                       mem.try_get("k");
                     },
                     id)
                  .has_value());
  CHECK(id != 0);
  CHECK(mem.watcher_count() == 1);
  mem.set_string("k", "v");  // the callback re-enters the store: must not deadlock
  mem.set_string("k", "w");
  CHECK(fired == 1);
  CHECK(mem.watcher_count() == 0);
  auto v = mem.try_get_or_watch(
      "k", [&] { ++fired; }, id);
  REQUIRE(v.has_value());
  CHECK(id == 0);
  CHECK_FALSE(mem.try_get_or_watch(
                     "j", [&] { ++fired; }, id)
                  .has_value());
  CHECK(mem.unwatch(id));
  CHECK_FALSE(mem.unwatch(id));
  mem.add("j", 1);
  CHECK(fired == 1);
}

TEST_CASE("InMemoryStore::erase_prefix drops exactly the keys under a prefix", "[store]") {
  InMemoryStore mem;
  for (const char* k : {"elastic/gen1/a", "elastic/gen1/rank_0/addr", "elastic/gen10/a", "elastic/gen1", "elastic/world/1",
                        "x/elastic/gen1/a"}) {
    mem.set_string(k, "v");
  }
  CHECK(mem.erase_prefix("elastic/gen1/") == 2);
  CHECK(mem.size() == 4);
  CHECK_FALSE(mem.try_get("elastic/gen1/a"));
  CHECK(mem.try_get("elastic/gen10/a"));  // another generation: "gen1/" is not its prefix
  CHECK(mem.try_get("elastic/gen1"));
  CHECK(mem.try_get("x/elastic/gen1/a"));
  CHECK(mem.erase_prefix("elastic/gen1/") == 0);
  CHECK_THROWS_AS(mem.erase_prefix(""), hvd::InvalidArgument);
  // A waiter for an erased key waits for it to be written again.
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    mem.set_string("elastic/gen10/a", "again");
  });
  CHECK(mem.erase_prefix("elastic/gen10/") == 1);
  CHECK(mem.get_string("elastic/gen10/a", std::chrono::seconds(5)) == "again");
  writer.join();
}

TEST_CASE("FileStore add is atomic across processes and readers never see torn values", "[store]") {
  TempDir dir;
  const FileStoreOptions opts{dir.path(), Ms(5)};
  constexpr int kChildren = 3, kAdds = 100;
  std::vector<pid_t> kids;
  for (int c = 0; c < kChildren; ++c) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int rc = 0;
      try {
        FileStore fs(opts);
        for (int i = 0; i < kAdds; ++i) fs.add("procs/counter", 1);
      } catch (...) {
        rc = 1;
      }
      ::_exit(rc);
    }
    kids.push_back(pid);
  }
  FileStore fs(opts);
  for (int i = 0; i < kAdds; ++i) fs.add("procs/counter", 1);
  for (pid_t pid : kids) {
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) == 0));
  }
  CHECK(fs.get_string("procs/counter", 0ms) == std::to_string((kChildren + 1) * kAdds));

  // set() is a rename: a concurrent reader sees one whole value or the other.
  std::atomic<bool> done{false};
  std::thread writer([&] {
    FileStore w(opts);
    for (int i = 0; i < 100; ++i) w.set("torn/v", Bytes(256u << 10, static_cast<uint8_t>('a' + i % 2)));
    done = true;
  });
  int reads = 0, torn = 0;
  while (!done) {
    if (auto v = fs.try_get("torn/v")) {
      ++reads;
      if (v->size() != (256u << 10) || std::count(v->begin(), v->end(), v->front()) != static_cast<long>(v->size()))
        ++torn;
    }
  }
  writer.join();
  CHECK(torn == 0);
  INFO("reads: " << reads);
  // No temp files are left behind.
  int stray = 0;
  for (auto& e : std::filesystem::directory_iterator(dir.path()))
    if (e.path().filename().string().rfind(".tmp.", 0) == 0) ++stray;
  CHECK(stray == 0);
}
