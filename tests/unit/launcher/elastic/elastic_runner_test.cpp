// The ElasticRunner's wiring, driven without a process: a scripted
// HostSource, a fake SpawnerFactory whose workers only exist in this test,
// and a real in-memory store in which the runner publishes worlds. A
// "trainer" thread plays the collective library: it marks the newest
// published world formed (as the last member to arrive would) and ends the
// job when the test says so.
#include "hvd/launcher/elastic/elastic_runner.h"
#include "../fakes/fake_spawner.h"
#include "../fakes/log_capture.h"
#include "../fakes/scripted_host_source.h"
#include "hvd/store/elastic_world.h"

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

using namespace hvd::launcher;
using namespace std::chrono_literals;
namespace se = hvd::store::elastic;
namespace fakes = hvd::launcher::fakes;
using fakes::ScriptedHostSource;

namespace {

/// Every fake worker of the job, by serial, on the shared fake spawners
/// (fakes/fake_spawner.h). A launched worker sets its ready key at once (it
/// "can take part"); it ends when the test exits it or a stopping signal
/// reaches it.
struct FakeCluster {
  explicit FakeCluster(hvd::store::InMemoryStore& s) : store(s) {
    factory.on_new_host = [this](fakes::FakeHost& h) {
      h.on_launch = [this](fakes::FakeHost& host) { launched(host); };
    };
  }
  struct Worker {
    std::string id;
    std::shared_ptr<fakes::FakeHost> host;
  };
  hvd::store::InMemoryStore& store;
  fakes::FakeSpawnerFactory factory;
  std::mutex mutex;
  std::map<int, Worker> workers;
  std::map<std::string, std::map<std::string, std::string>> envs;  ///< by worker id
  int launches = 0;
  std::string env_of(const std::string& id, const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = envs.find(id);
    if (it == envs.end()) return "<no worker>";
    auto v = it->second.find(name);
    return v == it->second.end() ? "<unset>" : v->second;
  }

  void launched(fakes::FakeHost& host) {
    std::vector<WorkerSpec> batch;
    {
      std::lock_guard<std::mutex> lock(host.mutex);
      batch = host.launches.back();
    }
    auto shared = factory.host(host.name);
    for (const auto& w : batch) {
      const std::string id = w.env.at("HVDRUN_WORKER_ID");
      {
        std::lock_guard<std::mutex> lock(mutex);
        envs[id] = w.env;
        workers[w.slot.rank] = Worker{id, shared};
        ++launches;
      }
      store.set_string(se::ready_key(id), "1");
    }
  }
  std::shared_ptr<fakes::FakeHost> host_of(int serial) {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = workers.find(serial);
    return it == workers.end() ? nullptr : it->second.host;
  }
  /// Reports the exit of a live worker; false if it had exited already.
  bool exit(int serial, int status) {
    auto host = host_of(serial);
    return host && host->exit(serial, status, status > 128 ? status - 128 : 0);
  }
  int serial_of(const std::string& id) {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& [serial, w] : workers) {
      if (w.id == id) return serial;
    }
    return -1;
  }
  std::vector<int> alive_on(const std::string& host) {
    std::map<int, std::shared_ptr<fakes::FakeHost>> all;
    {
      std::lock_guard<std::mutex> lock(mutex);
      for (auto& [serial, w] : workers) all[serial] = w.host;
    }
    std::vector<int> out;
    for (auto& [serial, h] : all) {
      if (h->name == host && h->is_alive(serial)) out.push_back(serial);
    }
    return out;
  }
  std::vector<int> signals_to(int serial) {
    auto host = host_of(serial);
    return host ? host->signals_to(serial) : std::vector<int>{};
  }
};

std::optional<se::World> world(hvd::store::InMemoryStore& store, uint64_t v) {
  auto text = store.try_get(se::world_key(v));
  if (!text) return std::nullopt;
  return se::decode_world(std::string(text->begin(), text->end()));
}

uint64_t latest(hvd::store::InMemoryStore& store) {
  auto text = store.try_get(se::kVersionKey);
  return text ? std::stoull(std::string(text->begin(), text->end())) : 0;
}

/// The job under test: the runner on the test's thread, a trainer thread,
/// and the test's script on a third one. Scripts use CHECK, never REQUIRE:
/// an assertion must not throw on a thread of its own.
struct Job {
  Options options;
  hvd::store::InMemoryStore store;
  FakeCluster cluster{store};
  std::unique_ptr<OutputRouter> output;
  fakes::LogCapture log_capture;

  Job(int np, int min_np) {
    options.num_proc = np;
    options.elastic.min_np = min_np;
    options.elastic.host_discovery_script = "scripted";
    options.elastic.discovery_interval = 20ms;
    options.start_timeout = std::chrono::seconds(10);
    options.kill_grace = 200ms;
    options.command = {"train"};
    OutputOptions oo;
    oo.stdout_fd = -1;
    oo.stderr_fd = -1;
    output = std::make_unique<OutputRouter>(oo);
  }

  /// Runs the job to its end with `source`; `script` runs beside it and
  /// drives the workers.
  /// On a failed expectation a script returns early after abort(): the job
  /// then ends (SIGTERM to every worker) instead of hanging.
  int run(HostSource& source, const std::function<void(Job&)>& script) {
    ElasticRunnerDeps deps(source, cluster.factory, initial_store ? *initial_store : store, *output);
    deps.worker_env = {{"HOROVOD_GLOO_RENDEZVOUS_PORT", "1"}};
    deps.driver_address = "127.0.0.1";
    deps.choose_address = [](const std::vector<HostSpec>&) { return std::string("127.0.0.1"); };
    deps.store_address = "127.0.0.1:1";
    deps.seed = 1;
    if (customize) customize(deps);
    ElasticRunner runner(elastic_runner_options(options), std::move(deps));
    runner_ = &runner;
    DiscoveryResult first = source.discover();
    std::atomic<bool> stop{false};
    // The library's part: the newest published world forms (members skip
    // a world that a newer one superseded before they got to it, as the
    // real library does; they write nothing of it afterwards).
    std::thread trainer([&] {
      uint64_t formed = 0;
      while (!stop) {
        uint64_t v = latest(store);
        if (v > formed) {
          formed = v;
          store.set_string(se::formed_key(formed), "1");
        }
        std::this_thread::sleep_for(5ms);
      }
    });
    std::thread driver([&] { script(*this); });
    int code = runner.run(std::move(first));
    stop = true;
    driver.join();
    trainer.join();
    return code;
  }

  /// Waits until world version >= v is published and returns it.
  se::World wait_world(uint64_t v, std::chrono::milliseconds limit = 10s) {
    auto until = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < until) {
      uint64_t latest_v = latest(store);
      if (latest_v >= v) return *world(store, latest_v);
      std::this_thread::sleep_for(5ms);
    }
    // Catch assertions must not throw on this (the script's) thread.
    CHECK(latest(store) >= v);
    return {};
  }
  /// Every member of `w` exits 0: training is done.
  void finish(const se::World& w) {
    for (const auto& m : w.members) cluster.exit(cluster.serial_of(m.worker_id), 0);
  }
  std::string log() { return log_capture.text(); }
  void abort() { runner_->interrupt(SIGTERM); }
  void interrupt(int sig) { runner_->interrupt(sig); }
  ElasticRunner* runner_ = nullptr;
  /// The store the runner starts with, when not `store` (a test of rebind_store).
  hvd::store::InMemoryStore* initial_store = nullptr;
  /// Adjusts the runner's dependencies before it is made.
  std::function<void(ElasticRunnerDeps&)> customize;
};

std::vector<std::string> hosts_of(const se::World& w) {
  std::vector<std::string> out;
  for (const auto& m : w.members) out.push_back(m.host);
  return out;
}

}  // namespace

TEST_CASE("ElasticRunner: a crashed worker is replaced on its slot and the job goes on", "[elastic_runner]") {
  Job job(2, 1);
  ScriptedHostSource hosts({{"hostA", 2}});
  int code = job.run(hosts, [](Job& j) {
    se::World w1 = j.wait_world(1);
    CHECK(w1.size() == 2);
    if (w1.size() != 2) return j.abort();
    // One worker crashes; the survivor is not touched.
    const int victim = j.cluster.serial_of(w1.members[1].worker_id);
    const int survivor = j.cluster.serial_of(w1.members[0].worker_id);
    j.cluster.exit(victim, 1);
    // A world without it, then one with its replacement (a new worker id).
    se::World w = j.wait_world(2);
    auto until = std::chrono::steady_clock::now() + 10s;
    while (w.size() < 2 && std::chrono::steady_clock::now() < until) w = j.wait_world(w.version + 1);
    CHECK(w.size() == 2);
    if (w.size() != 2) return j.abort();
    CHECK(w.members[0].worker_id == w1.members[0].worker_id);  // rank 0 stays rank 0
    CHECK(w.members[1].worker_id != w1.members[1].worker_id);
    CHECK(j.cluster.signals_to(survivor).empty());
    // HOROVOD_RANK & co.: the place each was started for (horovodrun's
    // rule); the replacement comes after the survivor.
    for (int r = 0; r < 2; ++r) {
      CHECK(j.cluster.env_of(w1.members[r].worker_id, "HOROVOD_RANK") == std::to_string(r));
      CHECK(j.cluster.env_of(w1.members[r].worker_id, "HOROVOD_SIZE") == "2");
      CHECK(j.cluster.env_of(w1.members[r].worker_id, "HOROVOD_LOCAL_RANK") == std::to_string(r));
      CHECK(j.cluster.env_of(w1.members[r].worker_id, "HOROVOD_LOCAL_SIZE") == "2");
      CHECK(j.cluster.env_of(w1.members[r].worker_id, "HOROVOD_CROSS_SIZE") == "1");
      CHECK(j.cluster.env_of(w1.members[r].worker_id, "HOROVOD_HOSTNAME") == "hostA");
    }
    CHECK(j.cluster.env_of(w.members[1].worker_id, "HOROVOD_RANK") == "1");
    CHECK(j.cluster.env_of(w.members[1].worker_id, "HOROVOD_SIZE") == "2");
    j.finish(w);
  });
  CHECK(code == exit_code::kOk);
  CHECK(job.cluster.launches == 3);
}

TEST_CASE("ElasticRunner: the keys of worlds no live worker uses and of departed workers are erased",
          "[elastic_runner]") {
  // A job that re-forms for a week must not grow its store: after a crash
  // and the replacement's world formed, nothing of worlds 1 and 2 is left.
  Job job(2, 1);
  ScriptedHostSource hosts({{"hostA", 2}});
  int code = job.run(hosts, [](Job& j) {
    se::World w1 = j.wait_world(1);
    CHECK(w1.size() == 2);
    if (w1.size() != 2) return j.abort();
    const std::string victim = w1.members[1].worker_id;
    while (!j.store.try_get(se::formed_key(1))) std::this_thread::sleep_for(5ms);  // world 1 trained
    // What the library writes under a world's prefix (addresses, barriers,
    // a process set's keys), and a departing worker's own key.
    for (const char* k : {"rank_0/addr", "rank_1/addr", "arrived", "pset1.2/rank_0/addr"}) {
      j.store.set_string(se::comm_prefix(1) + k, "x");
    }
    j.store.set_string(se::left_key(victim), "1");
    j.cluster.exit(j.cluster.serial_of(victim), 1);
    se::World w = j.wait_world(3);
    CHECK(w.size() == 2);
    // Every key of worlds 1 and 2 (a world's keys go in two erasures:
    // wait for all of them, not the first).
    const std::vector<std::string> old_keys{se::world_key(1),
                                            se::world_key(2),
                                            se::ready_key(victim),
                                            se::left_key(victim),
                                            se::comm_prefix(1) + "rank_0/addr",
                                            se::comm_prefix(1) + "rank_1/addr",
                                            se::comm_prefix(1) + "arrived",
                                            se::comm_prefix(1) + "pset1.2/rank_0/addr",
                                            se::formed_key(1)};
    auto left = [&] {
      std::vector<std::string> out;
      for (const auto& k : old_keys) {
        if (j.store.try_get(k)) out.push_back(k);
      }
      return out;
    };
    for (int i = 0; i < 1000 && !left().empty(); ++i) std::this_thread::sleep_for(5ms);
    CHECK(left() == std::vector<std::string>{});
    // The newest world, its members' keys and the version stay.
    CHECK(j.store.try_get(se::world_key(3)));
    CHECK(j.store.try_get(se::formed_key(3)));
    CHECK(latest(j.store) == 3);
    for (const auto& m : w.members) CHECK(j.store.try_get(se::ready_key(m.worker_id)));
    j.finish(w);
  });
  CHECK(code == exit_code::kOk);
}

TEST_CASE("ElasticRunner: a launch whose workers all exited has its spawner shut down while the job runs",
          "[elastic_runner]") {
  // One spawner per host and launch: B's worker crashes, its spawner is shut
  // down (on the reaper thread) while A's and the replacement's keep running.
  Job job(2, 1);
  ScriptedHostSource hosts({{"hostA", 1}, {"hostB", 1}});
  int code = job.run(hosts, [](Job& j) {
    se::World w1 = j.wait_world(1);
    if (j.cluster.alive_on("hostB").empty()) return j.abort();
    const int on_b = j.cluster.alive_on("hostB").at(0);
    auto b = j.cluster.host_of(on_b);
    auto a = j.cluster.host_of(j.cluster.alive_on("hostA").at(0));
    auto shutdowns = [](fakes::FakeHost& h) {
      std::lock_guard<std::mutex> lock(h.mutex);
      return h.shutdowns;
    };
    CHECK(shutdowns(*b) == 0);
    j.cluster.exit(on_b, 1);
    se::World w = j.wait_world(2);
    while (w.size() < 2 && w.version < 10) w = j.wait_world(w.version + 1);
    CHECK(w.size() == 2);
    for (int i = 0; i < 400 && shutdowns(*b) == 0; ++i) std::this_thread::sleep_for(5ms);
    CHECK(shutdowns(*b) == 1);
    CHECK(shutdowns(*a) == 0);
    CHECK(j.cluster.alive_on("hostB").size() == 1);  // the replacement, on a spawner of its own
    j.finish(w);
  });
  CHECK(code == exit_code::kOk);
}

TEST_CASE("ElasticRunner: a host that leaves discovery has its trained workers drain", "[elastic_runner]") {
  Job job(2, 1);
  ScriptedHostSource hosts({{"hostA", 1}, {"hostB", 1}});
  int code = job.run(hosts, [&hosts](Job& j) {
    se::World w1 = j.wait_world(1);
    if (j.cluster.alive_on("hostB").empty()) return j.abort();
    const int on_b = j.cluster.alive_on("hostB").at(0);
    const std::string id = "w" + std::to_string(on_b);
    // The world formed (the trainer thread writes "formed"): hostB's worker
    // has trained, so it drains instead of being signalled.
    while (!j.store.try_get(se::formed_key(1))) std::this_thread::sleep_for(5ms);
    hosts.set_hosts({{"hostA", 1}});
    se::World w2 = j.wait_world(2);
    CHECK(hosts_of(w2) == std::vector<std::string>{"hostA"});
    CHECK(w2.draining == std::vector<std::string>{id});
    std::this_thread::sleep_for(300ms);  // more than the kill grace
    CHECK(j.cluster.signals_to(on_b).empty());
    CHECK(j.cluster.alive_on("hostB").size() == 1);
    // It leaves at its commit: its re-join writes left_key, and a non-zero
    // exit then is no failure (no restart, no new world, nothing written).
    j.store.set_string(se::left_key(id), "2");
    j.cluster.exit(on_b, 1);
    std::this_thread::sleep_for(200ms);
    CHECK(latest(j.store) == 2);
    CHECK_FALSE(j.store.try_get(se::drain_failed_key(id)));
    j.finish(w2);
  });
  CHECK(code == exit_code::kOk);
}

TEST_CASE("ElasticRunner: a draining worker that fails gets drain_failed_key, and drain timeout 0 stops at once",
          "[elastic_runner]") {
  SECTION("fails while draining") {
    Job job(2, 1);
    ScriptedHostSource hosts({{"hostA", 1}, {"hostB", 1}});
    int code = job.run(hosts, [&hosts](Job& j) {
      j.wait_world(1);
      if (j.cluster.alive_on("hostB").empty()) return j.abort();
      const int on_b = j.cluster.alive_on("hostB").at(0);
      while (!j.store.try_get(se::formed_key(1))) std::this_thread::sleep_for(5ms);
      hosts.set_hosts({{"hostA", 1}});
      se::World w2 = j.wait_world(2);
      j.cluster.exit(on_b, 137);
      const std::string key = se::drain_failed_key("w" + std::to_string(on_b));
      for (int i = 0; i < 200 && !j.store.try_get(key); ++i) std::this_thread::sleep_for(5ms);
      auto text = j.store.try_get(key);
      CHECK(text.has_value());
      if (text) CHECK(std::string(text->begin(), text->end()).find("killed by SIGKILL") != std::string::npos);
      CHECK(j.store.add(se::kDrainFailuresKey, 0) == 1);  // the counter members poll
      j.finish(w2);
    });
    CHECK(code == exit_code::kOk);
  }
  SECTION("--elastic-drain-timeout 0") {
    Job job(2, 1);
    job.options.elastic.drain_timeout = 0ms;
    ScriptedHostSource hosts({{"hostA", 1}, {"hostB", 1}});
    int code = job.run(hosts, [&hosts](Job& j) {
      se::World w1 = j.wait_world(1);
      CHECK(hosts_of(w1) == std::vector<std::string>{"hostA", "hostB"});
      if (j.cluster.alive_on("hostB").empty()) return j.abort();
      const int on_b = j.cluster.alive_on("hostB").at(0);
      while (!j.store.try_get(se::formed_key(1))) std::this_thread::sleep_for(5ms);
      hosts.set_hosts({{"hostA", 1}});
      se::World w2 = j.wait_world(2);
      CHECK(hosts_of(w2) == std::vector<std::string>{"hostA"});
      CHECK(w2.draining.empty());
      CHECK(j.cluster.signals_to(on_b) == std::vector<int>{SIGTERM});
      CHECK(j.cluster.alive_on("hostB").empty());
      j.finish(w2);
    });
    CHECK(code == exit_code::kOk);
  }
}

TEST_CASE("ElasticRunner: more re-formations than --reset-limit end the job with exit 5", "[elastic_runner]") {
  Job job(2, 1);
  job.options.elastic.reset_limit = 1;
  ScriptedHostSource hosts({{"hostA", 2}});
  int code = job.run(hosts, [](Job& j) {
    se::World w = j.wait_world(1);
    // Crash after crash, each making a new world, until the runner gives up.
    for (int i = 0; i < 20; ++i) {
      auto alive = j.cluster.alive_on("hostA");
      if (alive.empty()) break;
      j.cluster.exit(alive.back(), 1);
      std::this_thread::sleep_for(100ms);
    }
  });
  CHECK(code == exit_code::kElastic);
  CHECK(job.cluster.launches >= 3);  // it restarted the first crash, then gave up
}

TEST_CASE("ElasticRunner: a failing look keeps the last host set and is logged once", "[elastic_runner]") {
  Job job(2, 2);
  ScriptedHostSource hosts({{"hostA", 2}});
  int code = job.run(hosts, [&hosts](Job& j) {
    se::World w1 = j.wait_world(1);
    hosts.set_error("scripted source: API server unreachable");
    const int looks = hosts.looks();
    while (hosts.looks() < looks + 5) std::this_thread::sleep_for(10ms);
    // Nobody was stopped, no new world.
    CHECK(j.cluster.alive_on("hostA").size() == 2);
    CHECK(latest(j.store) == 1);
    j.finish(w1);
  });
  CHECK(code == exit_code::kOk);
  const std::string log = job.log();
  const auto first = log.find("API server unreachable");
  REQUIRE(first != std::string::npos);
  CHECK(log.find("API server unreachable", first + 1) == std::string::npos);
}

TEST_CASE("ElasticRunner: a signal stops every worker and gives 128+signal", "[elastic_runner]") {
  Job job(2, 1);
  ScriptedHostSource hosts({{"hostA", 1}, {"hostB", 1}});
  int code = job.run(hosts, [](Job& j) {
    j.wait_world(1);
    j.interrupt(SIGTERM);
  });
  CHECK(code == 128 + SIGTERM);
  CHECK(job.cluster.alive_on("hostA").empty());
  CHECK(job.cluster.alive_on("hostB").empty());
}

TEST_CASE("ElasticRunner: a job that starts without hosts moves its store once, when the first hosts appear",
          "[elastic_runner]") {
  Job job(1, 1);
  hvd::store::InMemoryStore loopback_store;  // the store before the move: nothing may land there
  job.initial_store = &loopback_store;
  ScriptedHostSource hosts({});
  std::vector<std::string> moved_to;
  job.customize = [&](ElasticRunnerDeps& d) {
    d.driver_address.reset();
    d.choose_address = [](const std::vector<HostSpec>&) { return std::string("10.1.2.3"); };
    d.rebind_store = [&](const std::string& address) {
      moved_to.push_back(address);
      return ElasticRunnerDeps::ReboundStore{&job.store, 4242};
    };
  };
  int code = job.run(hosts, [&](Job& j) {
    while (hosts.looks() < 4) std::this_thread::sleep_for(5ms);  // a few looks without hosts
    CHECK(moved_to.empty());
    hosts.set_hosts({{"hostA", 1}});
    se::World w1 = j.wait_world(1);  // published in the moved store, where the worker got ready
    CHECK(w1.size() == 1);
    if (w1.size() != 1) return j.abort();
    hosts.set_hosts({{"hostA", 1}, {"hostB", 1}});  // later hosts: no second move
    while (hosts.looks() < 12) std::this_thread::sleep_for(5ms);
    j.finish(j.wait_world(2));
  });
  CHECK(code == 0);
  CHECK(moved_to == std::vector<std::string>{"10.1.2.3"});
  CHECK(latest(loopback_store) == 0);
  CHECK(job.log().find("workers reach the store on 10.1.2.3:4242") != std::string::npos);
}

namespace {

/// A source that watches its hosts (as the Kubernetes one does): it tells
/// the runner about a change through the change listener.
class WatchingHostSource final : public HostSource {
 public:
  explicit WatchingHostSource(std::vector<HostSpec> hosts) : hosts_(std::move(hosts)) {}
  DiscoveryResult discover() override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++looks_;
    DiscoveryResult r;
    r.hosts = hosts_;
    return r;
  }
  std::string describe() const override { return "watched hosts"; }
  void set_change_listener(std::function<void()> listener) override {
    std::lock_guard<std::mutex> lock(mutex_);
    listener_ = std::move(listener);
    ++listener_changes_;
  }
  /// New hosts, announced like a watch event.
  void change(std::vector<HostSpec> hosts) {
    std::lock_guard<std::mutex> lock(mutex_);
    hosts_ = std::move(hosts);
    if (listener_) listener_();
  }
  int looks() {
    std::lock_guard<std::mutex> lock(mutex_);
    return looks_;
  }
  bool has_listener() {
    std::lock_guard<std::mutex> lock(mutex_);
    return static_cast<bool>(listener_);
  }
  int listener_changes() {
    std::lock_guard<std::mutex> lock(mutex_);
    return listener_changes_;
  }

 private:
  std::mutex mutex_;
  std::vector<HostSpec> hosts_;
  std::function<void()> listener_;
  int looks_ = 0;
  int listener_changes_ = 0;
};

}  // namespace

TEST_CASE("ElasticRunner: a watching source's change listener wakes discovery before the interval",
          "[elastic_runner]") {
  Job job(2, 1);
  job.options.elastic.discovery_interval = std::chrono::hours(1);  // only the listener can make it look again
  WatchingHostSource hosts({{"hostA", 1}, {"hostB", 1}});
  int code = job.run(hosts, [&hosts](Job& j) {
    se::World w1 = j.wait_world(1);
    CHECK(hosts.has_listener());
    const int looks = hosts.looks();
    std::this_thread::sleep_for(200ms);
    CHECK(hosts.looks() == looks);  // no polling meanwhile
    if (j.cluster.alive_on("hostB").empty()) return j.abort();
    const auto t0 = std::chrono::steady_clock::now();
    hosts.change({{"hostA", 1}});
    se::World w2 = j.wait_world(2, 2s);
    CHECK(std::chrono::steady_clock::now() - t0 < 1s);
    CHECK(hosts_of(w2) == std::vector<std::string>{"hostA"});
    j.finish(w2);
  });
  CHECK(code == exit_code::kOk);
  CHECK_FALSE(hosts.has_listener());  // cleared when the runner's discovery stopped
  CHECK(hosts.listener_changes() == 2);
}
