// State / BufferState / check_host_updates over Contexts that are threads
// of this process (a fake Membership decides who saw a host update), plus
// the C ABI and the process-wide path of hvd::init() in an elastic job.
#include "elastic_fixture.h"

#include "hvd/collective/c_api.h"
#include "hvd/collective/context.h"
#include "hvd/collective/elastic.h"
#include "hvd/collective/elastic_member.h"
#include "hvd/collective/hvd.h"
#include "hvd/store/memory_store.h"

#include <catch2/catch.hpp>

#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <thread>

using namespace hvd;
using namespace hvd::elastic;
using namespace std::chrono_literals;

namespace {

/// A membership whose host-update flag the test sets per rank.
class FakeMembership final : public Membership {
 public:
  explicit FakeMembership(collective::Context& ctx) : ctx_(ctx) {}
  collective::Context& context() override { return ctx_; }
  bool elastic() const override { return elastic_; }
  bool hosts_updated() const override { return updated_; }
  void reset() override { throw std::logic_error("FakeMembership cannot reset"); }
  void synced() override { ++synced_; }

  bool elastic_ = true;
  std::atomic<int> synced_{0};
  std::atomic<bool> updated_{false};

 private:
  collective::Context& ctx_;
};

/// `n` connected Contexts (one per rank) through one in-memory store.
std::vector<std::unique_ptr<collective::Context>> make_job(int n, const std::string& prefix) {
  auto st = std::make_shared<store::InMemoryStore>();
  std::vector<std::future<std::unique_ptr<collective::Context>>> fs;
  for (int r = 0; r < n; ++r) {
    fs.push_back(std::async(std::launch::async, [=] {
      collective::Settings s;
      s.rank = r;
      s.size = n;
      s.comm_prefix = prefix;
      s.secret = "state-test";
      s.bind_address = "127.0.0.1";
      s.start_timeout = 10s;
      return collective::Context::create(s, st);
    }));
  }
  std::vector<std::unique_ptr<collective::Context>> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

/// Runs fn(rank) on one thread per rank; returns what each threw ("" if nothing).
std::vector<std::string> on_all_ranks(int n, const std::function<void(int)>& fn) {
  std::vector<std::future<std::string>> fs;
  for (int r = 0; r < n; ++r) {
    fs.push_back(std::async(std::launch::async, [&, r]() -> std::string {
      try {
        fn(r);
        return "";
      } catch (const HostsUpdatedInterrupt&) {
        return "HostsUpdatedInterrupt";
      } catch (const std::exception& e) {
        return std::string("other: ") + e.what();
      }
    }));
  }
  std::vector<std::string> out;
  for (auto& f : fs) out.push_back(f.get());
  return out;
}

class ScopedEnv {
 public:
  void set(const char* name, const std::string& value) {
    names_.push_back(name);
    ::setenv(name, value.c_str(), 1);
  }
  ~ScopedEnv() {
    for (const char* n : names_) ::unsetenv(n);
  }

 private:
  std::vector<const char*> names_;
};

}  // namespace

TEST_CASE("elastic check_host_updates: when one rank saw a new world, every rank throws at the same commit",
          "[elastic][state]") {
  constexpr int n = 3;
  auto job = make_job(n, "agree/");
  std::vector<std::unique_ptr<FakeMembership>> ms;
  for (auto& c : job) ms.push_back(std::make_unique<FakeMembership>(*c));

  // Nobody saw anything: nobody throws.
  auto quiet = on_all_ranks(n, [&](int r) { check_host_updates(*ms[r]); });
  CHECK(quiet == std::vector<std::string>(n, ""));

  // Only rank 2 saw the update: all three throw.
  ms[2]->updated_ = true;
  auto outcome = on_all_ranks(n, [&](int r) {
    std::vector<int64_t> v{r};
    BufferState s;
    s.add("v", v);
    s.set_membership(*ms[r]);
    s.commit();
  });
  CHECK(outcome == std::vector<std::string>(n, "HostsUpdatedInterrupt"));
}

TEST_CASE("elastic sync takes the state of the rank with the most commits, lowest rank on ties", "[elastic][state]") {
  constexpr int n = 4;
  auto job = make_job(n, "sync/");
  std::vector<std::unique_ptr<FakeMembership>> ms;
  for (auto& c : job) ms.push_back(std::make_unique<FakeMembership>(*c));
  const std::vector<int> commits = {2, 5, 1, 5};  // ranks 1 and 3 tie: rank 1 wins
  std::vector<std::vector<float>> weights(n), after(n);
  std::vector<std::vector<int32_t>> counters(n);
  std::vector<uint64_t> adopted(n);
  auto outcome = on_all_ranks(n, [&](int r) {
    weights[r].assign(1000, static_cast<float>(r) + 0.5f);
    counters[r] = {r * 10};
    BufferState s;
    s.add("weights", weights[r]);
    s.add("counter", counters[r]);
    s.set_membership(*ms[r]);
    ms[r]->elastic_ = false;  // local commits while setting up
    for (int i = 0; i < commits[r]; ++i) s.commit();
    ms[r]->elastic_ = true;
    weights[r][0] = -1.0f;  // uncommitted change: sync sends the live state
    REQUIRE(ms[r]->synced_ == 0);
    s.sync();
    CHECK(ms[r]->synced_ == 1);  // told hvdrun: it holds the state now
    adopted[r] = s.commits();
    // sync saved: a restore keeps the synced state.
    weights[r][1] = 99.0f;
    s.restore();
    after[r] = weights[r];
  });
  CHECK(outcome == std::vector<std::string>(n, ""));
  for (int r = 0; r < n; ++r) {
    INFO("rank " << r);
    CHECK(adopted[r] == 5);
    CHECK(counters[r][0] == 10);
    CHECK(after[r][0] == -1.0f);
    CHECK(after[r][1] == 1.5f);
    CHECK(after[r][999] == 1.5f);
  }
}

TEST_CASE("elastic restore returns to the last commit", "[elastic][state]") {
  auto job = make_job(1, "single/");
  FakeMembership m(*job[0]);
  std::vector<double> w{1.0, 2.0};
  BufferState s;
  s.add("w", w);
  s.set_membership(m);
  s.commit();
  w = {7.0, 8.0};
  s.restore();
  CHECK(w == std::vector<double>{1.0, 2.0});
  CHECK(s.commits() == 1);
  CHECK_THROWS_AS(s.add("w", w), InvalidArgument);
}

TEST_CASE("elastic run outside an elastic job syncs and calls fn once", "[elastic][state]") {
  auto job = make_job(2, "plain/");
  std::vector<std::unique_ptr<FakeMembership>> ms;
  for (auto& c : job) ms.push_back(std::make_unique<FakeMembership>(*c));
  std::atomic<int> calls{0};
  std::vector<std::vector<int32_t>> v = {{1}, {2}};
  auto outcome = on_all_ranks(2, [&](int r) {
    ms[r]->elastic_ = false;
    BufferState s;
    s.add("v", v[r]);
    s.set_membership(*ms[r]);
    run(s, [&](State&) { ++calls; });
  });
  CHECK(outcome == std::vector<std::string>(2, ""));
  CHECK(calls == 2);
  CHECK(v[1][0] == 1);  // synced from rank 0 (equal commits)
}

TEST_CASE("elastic C ABI outside an elastic job", "[elastic][c_api]") {
  ::unsetenv("HOROVOD_ELASTIC");
  CHECK(hvd_elastic_enabled() == 0);
  CHECK(hvd_elastic_hosts_updated() == 0);
  CHECK(hvd_elastic_world_version() == 0);
  CHECK(hvd_elastic_reset() == HVD_ERR_INVALID);
  CHECK(std::string(hvd_last_error()).find("not an elastic job") != std::string::npos);
  CHECK(hvd_elastic_state_synced() == HVD_OK);  // nothing to tell
  CHECK(HVD_ERR_PEER_FAILURE != HVD_ERR_IO);
}

TEST_CASE("elastic hvd::init in an elastic job joins the published world, reset and removal through the C ABI",
          "[elastic][c_api][process]") {
  testing::FakeDriver driver;
  ScopedEnv env;
  env.set("HOROVOD_ELASTIC", "1");
  env.set("HVDRUN_WORKER_ID", "solo");
  env.set("HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1");
  env.set("HOROVOD_GLOO_RENDEZVOUS_PORT", std::to_string(driver.port()));
  env.set("HVDRUN_SECRET", testing::kSecret);
  env.set("HOROVOD_ELASTIC_TIMEOUT", "10");
  driver.publish(1, {"solo", "buddy"});

  // hvd_init() and a second member (a thread with its own ElasticMember) form world 1.
  ElasticMember buddy(driver.options("buddy"));
  auto jb = std::async(std::launch::async, [&] { buddy.join(); });
  REQUIRE(hvd_init() == HVD_OK);
  jb.get();
  CHECK(hvd_elastic_enabled() == 1);
  CHECK(hvd_elastic_world_version() == 1);
  CHECK(hvd_size() == 2);
  CHECK(hvd_rank() == 0);
  CHECK(driver.store().try_get(store::elastic::ready_key("solo")).has_value());
  {
    auto other = std::async(std::launch::async, [&] { check_host_updates(buddy); });
    CHECK(hvd_elastic_check_host_updates() == HVD_OK);
    other.get();
  }
  // The buddy dies: the C ABI reports a peer failure, distinct from HVD_ERR_IO.
  buddy.context().abort("simulated kill -9");
  float y = 1.0f;
  CHECK(hvd_allreduce("before_failure", &y, &y, 1, HVD_FLOAT32, HVD_SUM) == HVD_ERR_PEER_FAILURE);
  buddy.close();
  driver.publish(2, {"solo"}, false, "buddy failed");
  REQUIRE(hvd_elastic_reset() == HVD_OK);
  CHECK(hvd_elastic_world_version() == 2);
  CHECK(hvd_size() == 1);
  CHECK(hvd_elastic_check_host_updates() == HVD_OK);

  driver.publish(3, {"solo"});
  const auto end = std::chrono::steady_clock::now() + 3s;
  while (!hvd_elastic_hosts_updated() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(5ms);
  CHECK(hvd_elastic_hosts_updated() == 1);
  CHECK(hvd_elastic_check_host_updates() == HVD_ERR_HOSTS_UPDATED);
  REQUIRE(hvd_elastic_reset() == HVD_OK);
  CHECK(hvd_elastic_world_version() == 3);
  CHECK(hvd_elastic_hosts_updated() == 0);
  float x = 2.0f;
  CHECK(hvd_allreduce("after_reset", &x, &x, 1, HVD_FLOAT32, HVD_SUM) == HVD_OK);
  CHECK(x == 2.0f);
  // A program with its own state reports its broadcast: hvdrun reads the world.
  CHECK_FALSE(driver.store().try_get(store::elastic::synced_key("solo")));
  CHECK(hvd_elastic_state_synced() == HVD_OK);
  const auto synced = driver.store().try_get(store::elastic::synced_key("solo"));
  REQUIRE(synced.has_value());
  CHECK(std::string(synced->begin(), synced->end()) == "3");

  driver.publish(4, {"someone_else"}, false, "solo's host left");
  CHECK(hvd_elastic_reset() == HVD_ERR_REMOVED);
  CHECK(std::string(hvd_last_error()).find("removed") != std::string::npos);
  CHECK(hvd_shutdown() == HVD_OK);
}
