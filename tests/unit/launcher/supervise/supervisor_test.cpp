// The Supervisor's failure policy, driven by a FakeSpawner: no processes.
#include "hvd/launcher/supervise/supervisor.h"
#include "../fakes/fake_spawner.h"
#include "../fakes/log_capture.h"
#include "hvd/launcher/options/options.h"

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <catch2/catch.hpp>

#include <condition_variable>
#include <csignal>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

using namespace hvd::launcher;
using namespace std::chrono_literals;
using hvd::launcher::fakes::FakeHost;
using hvd::launcher::fakes::FakeSpawner;
using hvd::launcher::fakes::LogCapture;

namespace {

std::vector<WorkerSpec> specs(const std::string& host, std::vector<int> ranks) {
  std::vector<WorkerSpec> out;
  for (int r : ranks) {
    WorkerSpec w;
    w.slot.hostname = host;
    w.slot.rank = r;
    w.argv = {"train"};
    out.push_back(w);
  }
  return out;
}

struct Job {
  std::vector<std::shared_ptr<FakeHost>> fakes;
  std::vector<HostLaunch> hosts;
  std::shared_ptr<FakeHost> add(const std::string& name, std::vector<int> ranks) {
    auto fake = std::make_shared<FakeHost>();
    fake->name = name;
    HostLaunch h;
    h.host = name;
    h.workers = specs(name, ranks);
    h.spawner = std::make_unique<FakeSpawner>(fake);
    hosts.push_back(std::move(h));
    fakes.push_back(fake);
    return fake;
  }
};

SupervisorOptions fast_options() {
  SupervisorOptions o;
  o.kill_grace = 200ms;
  o.start_timeout = 2s;
  o.kill_wait = 1s;
  return o;
}

}  // namespace

TEST_CASE("Supervisor: all workers exit 0 -> 0", "[supervisor]") {
  Job job;
  auto a = job.add("hostA", {0, 1});
  auto b = job.add("hostB", {2, 3});
  for (auto& f : {a, b}) {
    f->on_launch = [](FakeHost& h) {
      for (int r : std::set<int>(h.alive)) h.exit_after(10ms * (r + 1), r, 0);
    };
  }
  Supervisor sup(fast_options(), nullptr);
  CHECK(sup.run(std::move(job.hosts)) == exit_code::kOk);
  CHECK(a->signals.empty());
  CHECK(b->signals.empty());
  CHECK(a->shut_down);
  CHECK(b->shut_down);
}

TEST_CASE("Supervisor: a process that stands for ranks (mpirun) is counted as they are", "[supervisor]") {
  LogCapture log;
  Job job;
  auto m = job.add("localhost", {0});
  job.hosts[0].stands_for = "mpirun (4 ranks on 2 hosts)";
  m->on_launch = [](FakeHost& h) { h.exit_after(10ms, 0, 0); };
  Supervisor sup(fast_options(), nullptr);
  CHECK(sup.run(std::move(job.hosts)) == exit_code::kOk);
  const std::string text = log.text();
  CHECK(text.find("started mpirun (4 ranks on 2 hosts) in ") != std::string::npos);
  CHECK(text.find("mpirun (4 ranks on 2 hosts) exited successfully (") != std::string::npos);
  CHECK(text.find("1 worker") == std::string::npos);
}

TEST_CASE("Supervisor: workers without a stand-in are counted as workers", "[supervisor]") {
  LogCapture log;
  Job job;
  auto a = job.add("hostA", {0, 1});
  a->on_launch = [](FakeHost& h) {
    for (int r : std::set<int>(h.alive)) h.exit_after(10ms, r, 0);
  };
  Supervisor sup(fast_options(), nullptr);
  CHECK(sup.run(std::move(job.hosts)) == exit_code::kOk);
  CHECK(log.text().find("started 2 workers on hostA in ") != std::string::npos);
  CHECK(log.text().find("all 2 workers exited successfully (") != std::string::npos);
}

TEST_CASE("Supervisor: a failing rank stops the others with SIGTERM and passes its code on", "[supervisor]") {
  Job job;
  auto a = job.add("hostA", {0, 1});
  auto b = job.add("hostB", {2, 3});
  LogCapture log;
  OutputOptions oo;
  oo.num_workers = 4;
  oo.stdout_fd = -1;  // output itself is not under test here
  oo.stderr_fd = -1;
  OutputRouter output(oo);
  Supervisor sup(fast_options(), &output);
  b->on_launch = [](FakeHost& h) {
    h.output(2, Stream::Stderr, "Traceback (most recent call last):\nValueError: bad shape\n");
    h.exit_after(20ms, 2, 3);
  };
  int code = sup.run(std::move(job.hosts));
  CHECK(code == 3);
  for (int r : {0, 1}) CHECK(a->signals_to(r) == std::vector<int>{SIGTERM});
  CHECK(b->signals_to(3) == std::vector<int>{SIGTERM});
  CHECK(b->signals_to(2).empty());
  std::string text = log.text();
  CHECK_THAT(text, Catch::Contains("rank 2 on hostB: exited with code 3"));
  CHECK_THAT(text, Catch::Contains("[2] ValueError: bad shape"));
}

TEST_CASE("Supervisor: workers ignoring SIGTERM get SIGKILL after the grace period", "[supervisor]") {
  Job job;
  auto a = job.add("hostA", {0, 1, 2});
  a->default_dies_on = {SIGKILL};
  a->on_launch = [](FakeHost& h) { h.exit_after(10ms, 1, 128 + SIGSEGV, SIGSEGV); };
  SupervisorOptions o = fast_options();
  Supervisor sup(o, nullptr);
  auto t0 = hvd::Clock::now();
  CHECK(sup.run(std::move(job.hosts)) == 128 + SIGSEGV);
  CHECK(hvd::Clock::now() - t0 < 2s);
  for (int r : {0, 2}) {
    CHECK(a->signals_to(r) == std::vector<int>{SIGTERM, SIGKILL});
    auto term = a->when(r, SIGTERM);
    auto kill = a->when(r, SIGKILL);
    REQUIRE(term);
    REQUIRE(kill);
    CHECK(*kill - *term >= o.kill_grace);
  }
}

TEST_CASE("Supervisor: a rank exiting 0 early does not end the job", "[supervisor]") {
  Job job;
  auto a = job.add("hostA", {0, 1});
  a->on_launch = [](FakeHost& h) {
    h.exit_after(5ms, 0, 0);
    h.exit_after(150ms, 1, 0);
  };
  Supervisor sup(fast_options(), nullptr);
  auto t0 = hvd::Clock::now();
  CHECK(sup.run(std::move(job.hosts)) == 0);
  CHECK(hvd::Clock::now() - t0 >= 140ms);
  CHECK(a->signals.empty());
}

TEST_CASE("Supervisor: signals are forwarded and map to 130/143/129", "[supervisor]") {
  auto [sig, code] = GENERATE(std::make_pair(SIGINT, 130), std::make_pair(SIGTERM, 143), std::make_pair(SIGHUP, 129));
  Job job;
  auto a = job.add("hostA", {0, 1});
  auto b = job.add("hostB", {2});
  Supervisor sup(fast_options(), nullptr);
  std::thread sender([&sup, sig = sig] {
    std::this_thread::sleep_for(30ms);
    sup.interrupt(sig);
  });
  CHECK(sup.run(std::move(job.hosts)) == code);
  sender.join();
  CHECK(a->signals_to(0) == std::vector<int>{sig});
  CHECK(a->signals_to(1) == std::vector<int>{sig});
  CHECK(b->signals_to(2) == std::vector<int>{sig});
}

TEST_CASE("Supervisor: a second interrupt escalates to SIGKILL at once", "[supervisor]") {
  Job job;
  auto a = job.add("hostA", {0, 1});
  a->default_dies_on = {SIGKILL};
  SupervisorOptions o = fast_options();
  o.kill_grace = 10s;  // escalation must not wait for this
  Supervisor sup(o, nullptr);
  std::thread sender([&sup] {
    std::this_thread::sleep_for(20ms);
    sup.interrupt(SIGINT);
    std::this_thread::sleep_for(50ms);
    sup.interrupt(SIGINT);
  });
  auto t0 = hvd::Clock::now();
  CHECK(sup.run(std::move(job.hosts)) == 130);
  sender.join();
  CHECK(hvd::Clock::now() - t0 < 2s);
  CHECK(a->signals_to(0) == std::vector<int>{SIGINT, SIGKILL});
}

TEST_CASE("Supervisor: an interrupt before run() is honoured", "[supervisor]") {
  Job job;
  auto a = job.add("hostA", {0});
  Supervisor sup(fast_options(), nullptr);
  sup.interrupt(SIGTERM);
  CHECK(sup.run(std::move(job.hosts)) == 143);
  CHECK(a->signals_to(0) == std::vector<int>{SIGTERM});
}

TEST_CASE("Supervisor: a lost worker ends the job with the launch code", "[supervisor]") {
  Job job;
  auto a = job.add("hostA", {0});
  auto b = job.add("node2", {1});
  LogCapture log;
  b->on_launch = [](FakeHost& h) { h.exit_after(10ms, 1, 0, 0, "SSH connection to node2 lost"); };
  Supervisor sup(fast_options(), nullptr);
  CHECK(sup.run(std::move(job.hosts)) == exit_code::kLaunch);
  CHECK(a->signals_to(0) == std::vector<int>{SIGTERM});
  CHECK_THAT(log.text(), Catch::Contains("rank 1 on node2: lost: SSH connection to node2 lost"));
}

TEST_CASE("Supervisor: a launch error stops every host and returns kLaunch", "[supervisor]") {
  Job job;
  auto a = job.add("hostA", {0, 1});
  auto b = job.add("node2", {2, 3});
  b->launch_error = "connection refused on port 22";
  Supervisor sup(fast_options(), nullptr);
  auto t0 = hvd::Clock::now();
  CHECK(sup.run(std::move(job.hosts)) == exit_code::kLaunch);
  CHECK(hvd::Clock::now() - t0 < 2s);
  CHECK(a->shut_down);
  CHECK(b->shut_down);
  CHECK(a->alive.empty());  // nothing left running
  CHECK(b->alive.empty());
}

TEST_CASE("Supervisor: a worker that never reports after SIGKILL does not hang hvdrun", "[supervisor]") {
  Job job;
  auto a = job.add("hostA", {0, 1});
  a->default_dies_on = {};  // a stuck host: signals go nowhere
  a->on_launch = [](FakeHost& h) { h.exit_after(5ms, 0, 1); };
  SupervisorOptions o = fast_options();
  o.kill_wait = 200ms;
  Supervisor sup(o, nullptr);
  auto t0 = hvd::Clock::now();
  CHECK(sup.run(std::move(job.hosts)) == 1);
  CHECK(hvd::Clock::now() - t0 < 2s);
  CHECK(a->shut_down);
  CHECK(a->alive.empty());
}

namespace {

/// A host still connecting: launch() blocks until cancel_launch() or the
/// deadline, like the SSH spawner waiting on a silent host.
class ConnectingSpawner : public Spawner {
 public:
  void launch(const std::vector<WorkerSpec>&, EventSink&, hvd::Deadline deadline) override {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_until(lock, deadline.at(), [&] { return cancelled_; });
    throw LaunchError("silent", cancelled_ ? "silent: cancelled" : "silent: connection timed out");
  }
  void signal(int, int) override {}
  void shutdown() override {}
  void cancel_launch() override {
    std::lock_guard<std::mutex> lock(mutex_);
    cancelled_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool cancelled_ = false;
};

}  // namespace

TEST_CASE("Supervisor: a signal while a host is still connecting ends the job at once with 128+N", "[supervisor]") {
  // Issue 21: hvdrun used to wait for --start-timeout and exit 3.
  for (int sig : {SIGINT, SIGTERM}) {
    Job job;
    auto a = job.add("hostA", {0});
    HostLaunch silent;
    silent.host = "silent";
    silent.workers = specs("silent", {1});
    silent.spawner = std::make_unique<ConnectingSpawner>();
    job.hosts.push_back(std::move(silent));
    SupervisorOptions o = fast_options();
    o.start_timeout = 20s;
    Supervisor sup(o, nullptr);
    std::thread killer([&] {
      std::this_thread::sleep_for(200ms);
      sup.interrupt(sig);
    });
    auto t0 = hvd::Clock::now();
    int code = sup.run(std::move(job.hosts));
    auto took = hvd::Clock::now() - t0;
    killer.join();
    CHECK(code == 128 + sig);
    CHECK(took < 1s);
    CHECK(a->shut_down);
    CHECK(a->alive.empty());  // the host that did start is stopped
  }
}

TEST_CASE("Supervisor: a signal before run() cancels the connecting at once", "[supervisor]") {
  Job job;
  HostLaunch silent;
  silent.host = "silent";
  silent.workers = specs("silent", {0});
  silent.spawner = std::make_unique<ConnectingSpawner>();
  job.hosts.push_back(std::move(silent));
  SupervisorOptions o = fast_options();
  o.start_timeout = 20s;
  Supervisor sup(o, nullptr);
  sup.interrupt(SIGINT);
  auto t0 = hvd::Clock::now();
  CHECK(sup.run(std::move(job.hosts)) == 130);
  CHECK(hvd::Clock::now() - t0 < 1s);
}
