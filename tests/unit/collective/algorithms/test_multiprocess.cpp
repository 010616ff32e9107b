// Real processes (fork), a real SIGKILL: the survivors of a killed rank must
// fail with hvd::IoError within 2 s, as the kernel closes the dead
// process's sockets and the abort cascade spreads. Ranks rendezvous through
// a FileStore in a temporary directory.
#include "hvd/collective/algorithms.h"
#include "hvd/collective/comm.h"
#include "hvd/common/error.h"
#include "hvd/store/file_store.h"

#include <catch2/catch.hpp>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>
#include <vector>

using namespace hvd;
using namespace hvd::collective;
using namespace std::chrono_literals;

namespace {

struct Record {
  int32_t rank;
  int32_t status;  // 1: IoError, 2: other exception, 3: no failure at all
  int64_t when_ns;  // steady_clock (CLOCK_MONOTONIC: comparable across processes)
};

int64_t now_ns() { return std::chrono::steady_clock::now().time_since_epoch().count(); }

[[noreturn]] void child(int rank, int n, const std::string& dir, int ready_fd, int report_fd) {
  Record rec{rank, 3, 0};
  try {
    store::FileStoreOptions fo;
    fo.directory = dir;
    fo.max_poll_interval = std::chrono::milliseconds(5);
    store::FileStore st(fo);
    CommOptions o;
    o.rank = rank;
    o.size = n;
    o.prefix = "mp/";
    o.secret = "multiprocess-secret";
    o.timeout = 20s;
    auto comm = connect_comm(st, o);
    std::vector<float> buf(1u << 20, 1.0f);
    bool told = false;
    const auto limit = std::chrono::steady_clock::now() + 20s;
    while (std::chrono::steady_clock::now() < limit) {
      allreduce(*comm, buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum);
      std::fill(buf.begin(), buf.end(), 1.0f);
      if (!told) {
        char c = 'r';
        if (::write(ready_fd, &c, 1) != 1) break;
        told = true;
      }
    }
  } catch (const IoError&) {
    rec.status = 1;
    rec.when_ns = now_ns();
  } catch (...) {
    rec.status = 2;
  }
  ssize_t w = ::write(report_fd, &rec, sizeof(rec));
  (void)w;
  ::_exit(0);
}

}  // namespace

TEST_CASE("SIGKILL of a rank process mid-allreduce fails every survivor within 2 s", "[collective][failure][process]") {
  const int n = 4, victim = 2;
  char tmpl[] = "/tmp/hvd-multiprocess-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const std::string dir = tmpl;
  int ready[2], report[2];
  REQUIRE(::pipe(ready) == 0);
  REQUIRE(::pipe(report) == 0);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      ::close(ready[0]);
      ::close(report[0]);
      child(r, n, dir, ready[1], report[1]);
    }
    pids.push_back(pid);
  }
  ::close(ready[1]);
  ::close(report[1]);

  // Wait until every rank completed one allreduce, then kill the victim.
  int started = 0;
  const auto give_up = std::chrono::steady_clock::now() + 30s;
  while (started < n && std::chrono::steady_clock::now() < give_up) {
    pollfd p{ready[0], POLLIN, 0};
    if (::poll(&p, 1, 200) > 0) {
      char c;
      if (::read(ready[0], &c, 1) == 1) ++started;
    }
  }
  CHECK(started == n);
  const int64_t killed_at = now_ns();
  ::kill(pids[victim], SIGKILL);

  // Reap everyone (bounded), killing stragglers so no orphan survives.
  std::vector<bool> reaped(n, false);
  const auto reap_limit = std::chrono::steady_clock::now() + 15s;
  for (int left = n; left > 0 && std::chrono::steady_clock::now() < reap_limit;) {
    for (int r = 0; r < n; ++r) {
      if (!reaped[r] && ::waitpid(pids[r], nullptr, WNOHANG) == pids[r]) {
        reaped[r] = true;
        --left;
      }
    }
    std::this_thread::sleep_for(10ms);
  }
  for (int r = 0; r < n; ++r) {
    if (!reaped[r]) {
      ::kill(pids[r], SIGKILL);
      ::waitpid(pids[r], nullptr, 0);
      FAIL_CHECK("rank " << r << " did not exit within 15 s of the kill");
    }
  }

  std::vector<Record> recs(n, Record{-1, 0, 0});
  Record rec;
  while (::read(report[0], &rec, sizeof(rec)) == static_cast<ssize_t>(sizeof(rec))) {
    if (rec.rank >= 0 && rec.rank < n) recs[rec.rank] = rec;
  }
  ::close(ready[0]);
  ::close(report[0]);
  std::filesystem::remove_all(dir);

  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    const double latency = (recs[r].when_ns - killed_at) / 1e9;
    INFO("rank " << r << " status " << recs[r].status << " latency " << latency << " s");
    CHECK(recs[r].status == 1);
    CHECK(latency < 2.0);
  }
}
