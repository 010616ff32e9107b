// SignalGuard, the one owner of hvdrun's signal state: a forwarded signal
// is held while the guard lives and taken by wait(), by a loop polling
// fd(), or by the watcher; the mask is restored at the end.
#include "hvd/launcher/process/signal_guard.h"

#include <catch2/catch.hpp>

#include <poll.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

using namespace hvd::launcher;
using namespace std::chrono_literals;

namespace {

bool blocked(int sig) {
  sigset_t now;
  pthread_sigmask(SIG_BLOCK, nullptr, &now);
  return sigismember(&now, sig) == 1;
}

}  // namespace

TEST_CASE("SignalGuard: wait() takes a signal that arrived, once, and the mask comes back", "[signal_guard]") {
  REQUIRE_FALSE(blocked(SIGTERM));
  {
    SignalGuard guard;
    CHECK(blocked(SIGTERM));
    CHECK(guard.wait(0ms) == 0);  // nothing yet
    raise(SIGTERM);  // held, not delivered: the test process goes on
    CHECK(guard.wait(1000ms) == SIGTERM);
    CHECK(guard.wait(20ms) == 0);  // taken once
  }
  CHECK_FALSE(blocked(SIGTERM));
}

TEST_CASE("SignalGuard: fd() turns readable for a loop that polls it", "[signal_guard]") {
  SignalGuard guard;
  struct pollfd pfd = {guard.fd(), POLLIN, 0};
  CHECK(::poll(&pfd, 1, 0) == 0);
  raise(SIGHUP);
  CHECK(::poll(&pfd, 1, 1000) == 1);
  CHECK(guard.wait(0ms) == SIGHUP);
}

TEST_CASE("SignalGuard: the watcher gets signals until stop_watching, and a late one is consumed at the end",
          "[signal_guard]") {
  std::atomic<int> seen{0};
  {
    SignalGuard guard;
    guard.watch([&seen](int sig) { seen = sig; });
    // To the process, as a user's kill is (the watcher thread reads it; a
    // raise() would stay pending for this thread alone).
    ::kill(::getpid(), SIGINT);
    for (int i = 0; i < 100 && seen == 0; ++i) std::this_thread::sleep_for(10ms);
    CHECK(seen == SIGINT);
    guard.stop_watching();
    ::kill(::getpid(), SIGINT);  // after the job: consumed by the destructor, never delivered
  }
  CHECK_FALSE(blocked(SIGINT));
}
