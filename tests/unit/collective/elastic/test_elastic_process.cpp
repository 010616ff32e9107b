// Real worker processes and a real SIGKILL: two elastic workers train, one
// is killed mid-allreduce, the survivor must see PeerFailureError at once,
// re-form alone from its last commit, then grow back to two when a
// replacement worker is admitted, and finish with the result of a run
// without faults. The parent plays hvdrun (store server + worlds).
//
// Children are forked before the store server starts, so the parent has
// no other threads when it forks; they learn the port through a pipe.
#include "elastic_fixture.h"

#include "hvd/collective/context.h"
#include "hvd/collective/elastic.h"
#include "hvd/collective/elastic_member.h"

#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

using namespace hvd;
using namespace hvd::elastic;
using namespace std::chrono_literals;

namespace {

enum Kind : int32_t { kStep = 1, kFailure = 2, kDone = 3, kError = 4 };

/// One line of a child's report (atomic pipe write: smaller than PIPE_BUF).
struct Record {
  int32_t child;
  int32_t kind;
  int64_t commits;
  int64_t size;
  int64_t value;
  int64_t when_ns;  // steady_clock: CLOCK_MONOTONIC, comparable across processes
};

int64_t now_ns() { return std::chrono::steady_clock::now().time_since_epoch().count(); }

constexpr int64_t kSteps = 120;

void report(int fd, const Record& r) {
  ssize_t w = ::write(fd, &r, sizeof r);
  (void)w;
}

[[noreturn]] void child(int index, int port_fd, int report_fd) {
  Record rec{index, kError, 0, 0, 0, 0};
  try {
    uint16_t port = 0;
    pollfd p{port_fd, POLLIN, 0};
    if (::poll(&p, 1, 30000) <= 0 || ::read(port_fd, &port, sizeof port) != static_cast<ssize_t>(sizeof port)) {
      ::_exit(2);  // the parent never started us: nothing to report
    }
    ElasticMember member(testing::member_options(port, "p" + std::to_string(index), 20s));
    member.join();
    std::vector<int64_t> value{0};
    BufferState state;
    state.add("value", value);
    state.set_membership(member);
    run(state, [&](State&) {
      while (static_cast<int64_t>(state.commits()) < kSteps) {
        collective::Context& ctx = member.context();
        int64_t one = 1;
        try {
          ctx.allreduce(collective::AllreduceArgs{
              "step", &one, &one, collective::DataType::Int64, {1}, collective::ReduceOp::Average});
          value[0] += one;
          std::this_thread::sleep_for(4ms);
          state.commit();  // its host-update agreement may be what fails
        } catch (const PeerFailureError&) {
          report(report_fd,
                 Record{index, kFailure, static_cast<int64_t>(state.commits()), ctx.size(), value[0], now_ns()});
          throw;
        }
        report(report_fd, Record{index, kStep, static_cast<int64_t>(state.commits()), ctx.size(), value[0], now_ns()});
      }
    });
    rec = Record{index, kDone, static_cast<int64_t>(state.commits()), 0, value[0], now_ns()};
    report(report_fd, rec);
    member.close();
    ::_exit(0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %d: %s\n", index, e.what());
  }
  report(report_fd, rec);
  ::_exit(1);
}

}  // namespace

TEST_CASE("elastic SIGKILL of a worker mid-training: the survivor resumes alone at once and regrows to two",
          "[elastic][process][failure]") {
  constexpr int kChildren = 3;  // p0, p1 (killed), p2 (replacement)
  int report_pipe[2];
  REQUIRE(::pipe(report_pipe) == 0);
  std::vector<int> port_fd(kChildren);
  std::vector<pid_t> pids(kChildren);
  for (int i = 0; i < kChildren; ++i) {
    int pp[2];
    REQUIRE(::pipe(pp) == 0);
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(pp[1]);
      ::close(report_pipe[0]);
      child(i, pp[0], report_pipe[1]);
    }
    ::close(pp[0]);
    port_fd[i] = pp[1];
    pids[i] = pid;
  }
  ::close(report_pipe[1]);
  std::vector<bool> reaped(kChildren, false);
  // Whatever happens below (a failed REQUIRE included), no child outlives the test.
  struct Reaper {
    std::vector<pid_t>& pids;
    std::vector<bool>& reaped;
    std::vector<int>& fds;
    int report_fd;
    ~Reaper() {
      for (std::size_t i = 0; i < pids.size(); ++i) {
        ::close(fds[i]);
        if (reaped[i]) continue;
        ::kill(pids[i], SIGKILL);
        ::waitpid(pids[i], nullptr, 0);
      }
      ::close(report_fd);
    }
  } reaper{pids, reaped, port_fd, report_pipe[0]};

  {
    testing::FakeDriver driver;
    const uint16_t port = driver.port();
    auto start_child = [&](int i) { REQUIRE(::write(port_fd[i], &port, sizeof port) == sizeof port); };
    start_child(0);
    start_child(1);
    driver.publish(1, {"p0", "p1"});

    // Reads records until `until` is satisfied or 20 s pass.
    std::vector<Record> log;
    auto read_until = [&](const std::function<bool(const Record&)>& until) -> const Record* {
      const auto limit = std::chrono::steady_clock::now() + 20s;
      while (std::chrono::steady_clock::now() < limit) {
        pollfd p{report_pipe[0], POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        Record r{};
        if (::read(report_pipe[0], &r, sizeof r) != static_cast<ssize_t>(sizeof r)) return nullptr;
        log.push_back(r);
        if (r.kind == kError) return nullptr;
        if (until(r)) return &log.back();
      }
      return nullptr;
    };

    // Both train at size 2 for a while.
    REQUIRE(read_until([](const Record& r) { return r.child == 1 && r.kind == kStep && r.commits >= 20; }));
    const int64_t killed_at = now_ns();
    ::kill(pids[1], SIGKILL);
    REQUIRE(::waitpid(pids[1], nullptr, 0) == pids[1]);
    reaped[1] = true;

    // The survivor notices through its sockets alone (no world published yet).
    const Record* failure = read_until([](const Record& r) { return r.child == 0 && r.kind == kFailure; });
    REQUIRE(failure);
    const double detect_s = (failure->when_ns - killed_at) / 1e9;
    const int64_t restored_to = failure->commits;

    const int64_t published_at = now_ns();
    driver.publish(2, {"p0"}, false, "worker p1 failed");  // hvdrun's reaction
    const Record* resumed = read_until([](const Record& r) { return r.child == 0 && r.kind == kStep && r.size == 1; });
    REQUIRE(resumed);
    const double resume_s = (resumed->when_ns - published_at) / 1e9;
    // Resumed from its last commit, not from scratch.
    CHECK(resumed->commits == restored_to + 1);
    CHECK(resumed->value == resumed->commits);

    // A replacement worker is started and admitted.
    const int64_t started_at = now_ns();
    start_child(2);
    const auto ready_limit = std::chrono::steady_clock::now() + 10s;
    while (!driver.store().try_get(store::elastic::ready_key("p2")) && std::chrono::steady_clock::now() < ready_limit) {
      std::this_thread::sleep_for(2ms);
    }
    driver.publish(3, {"p0", "p2"}, false, "worker p2 joined");
    const Record* regrown = read_until([](const Record& r) { return r.child == 2 && r.kind == kStep && r.size == 2; });
    REQUIRE(regrown);
    const double regrow_s = (regrown->when_ns - started_at) / 1e9;
    // The newcomer continued from the survivor's commit count.
    CHECK(regrown->commits > resumed->commits);

    int done = 0;
    std::vector<int64_t> finals;
    read_until([&](const Record& r) {
      if (r.kind == kDone) {
        finals.push_back(r.value);
        ++done;
      }
      return done == 2;
    });
    WARN("kill -9 -> survivor's PeerFailureError " << detect_s << " s; world published -> survivor training at size 1 "
                                                   << resume_s << " s; replacement process start -> training at size 2 "
                                                   << regrow_s << " s");
    CHECK(detect_s < 0.5);
    CHECK(resume_s < 1.0);
    CHECK(regrow_s < 5.0);
    REQUIRE(done == 2);
    CHECK(finals == std::vector<int64_t>{kSteps, kSteps});

    // The workers exit 0 on their own (while the store is still up, as
    // under hvdrun).
    const auto limit = std::chrono::steady_clock::now() + 10s;
    for (int i = 0; i < kChildren; ++i) {
      while (!reaped[i] && std::chrono::steady_clock::now() < limit) {
        int status = 0;
        if (::waitpid(pids[i], &status, WNOHANG) == pids[i]) {
          reaped[i] = true;
          CHECK(WIFEXITED(status));
          CHECK(WEXITSTATUS(status) == 0);
        } else {
          std::this_thread::sleep_for(10ms);
        }
      }
      CHECK(reaped[i]);
    }
  }
}
