#include "control_block.h"

#include "hvd/common/error.h"

#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

using namespace hvd::collective::cuda::detail;
using namespace std::chrono_literals;
using hvd::Deadline;

TEST_CASE("cuda: control block: counters published by one side are seen by the other", "[cuda][control]") {
  const std::string name = ControlBlock::make_name();
  auto a = ControlBlock::create(name, 3);
  auto b = ControlBlock::open(name, 3);
  CHECK(a.ranks() == 3);
  CHECK(b.value(2, Counter::Ready) == 0);
  a.publish(2, Counter::Ready, 7);
  a.publish(1, Counter::Done, 9);
  CHECK(b.value(2, Counter::Ready) == 7);
  CHECK(b.value(2, Counter::Done) == 0);
  CHECK(b.value(1, Counter::Done) == 9);
  b.wait_at_least(2, Counter::Ready, 7, Deadline::after(1s));

  std::thread later([&] {
    std::this_thread::sleep_for(20ms);
    a.publish(0, Counter::Done, 3);
  });
  const auto t0 = std::chrono::steady_clock::now();
  b.wait_at_least(0, Counter::Done, 3, Deadline::after(5s));
  later.join();
  CHECK(std::chrono::steady_clock::now() - t0 < 4s);
  CHECK_THROWS_AS(a.publish(3, Counter::Ready, 1), hvd::Error);
}

TEST_CASE("cuda: control block: waits are bounded and name the rank and step", "[cuda][control]") {
  auto a = ControlBlock::create(ControlBlock::make_name(), 2);
  a.publish(1, Counter::Ready, 4);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(a.wait_at_least(1, Counter::Ready, 5, Deadline::after(100ms)),
                    Catch::Contains("local rank 1") && Catch::Contains("step 5") && Catch::Contains("at 4"));
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= 100ms);
  CHECK(waited < 2s);
  CHECK_THROWS_AS(a.wait_at_least(1, Counter::Done, 1, Deadline::after(10ms)), hvd::TimeoutError);
}

TEST_CASE("cuda: control block: abort wakes every waiter with IoError", "[cuda][control]") {
  const std::string name = ControlBlock::make_name();
  auto a = ControlBlock::create(name, 2);
  auto b = ControlBlock::open(name, 2);
  std::thread killer([&] {
    std::this_thread::sleep_for(20ms);
    a.abort(1);
  });
  CHECK_THROWS_WITH(b.wait_at_least(0, Counter::Ready, 1, Deadline::after(10s)),
                    Catch::Contains("aborted by local rank 1"));
  killer.join();
  CHECK(b.aborted());
  a.abort(0);  // the first abort wins
  CHECK_THROWS_WITH(a.wait_attached(Deadline::after(10s)), Catch::Contains("local rank 1"));
}

TEST_CASE("cuda: control block: names are exclusive, validated and unlinked after attach", "[cuda][control]") {
  const std::string name = ControlBlock::make_name();
  CHECK(name.rfind("/hvd-cuda-", 0) == 0);
  CHECK(name != ControlBlock::make_name());
  CHECK_THROWS_AS(ControlBlock::open(name, 2), hvd::IoError);  // not created yet
  auto a = ControlBlock::create(name, 2);
  CHECK_THROWS_AS(ControlBlock::create(name, 2), hvd::IoError);  // O_EXCL
  CHECK_THROWS_WITH(ControlBlock::open(name, 3), Catch::Contains("expected"));
  auto b = ControlBlock::open(name, 2);
  a.attach();
  b.attach();
  a.wait_attached(Deadline::after(1s));
  a.unlink();
  CHECK_THROWS_AS(ControlBlock::open(name, 2), hvd::IoError);
  // The mappings outlive the name.
  b.publish(1, Counter::Ready, 11);
  CHECK(a.value(1, Counter::Ready) == 11);
  CHECK_THROWS_AS(ControlBlock::create(ControlBlock::make_name(), 0), hvd::InvalidArgument);
}

TEST_CASE("cuda: control block: works across processes", "[cuda][control]") {
  const std::string name = ControlBlock::make_name();
  auto a = ControlBlock::create(name, 2);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int rc = 1;
    try {
      auto b = ControlBlock::open(name, 2);
      b.attach();
      // Ping-pong 200 steps with the parent.
      for (uint64_t k = 1; k <= 200; ++k) {
        b.wait_at_least(0, Counter::Ready, k, Deadline::after(10s));
        b.publish(1, Counter::Ready, k);
      }
      rc = 0;
    } catch (...) {
    }
    ::_exit(rc);
  }
  a.attach();
  a.wait_attached(Deadline::after(10s));
  a.unlink();
  for (uint64_t k = 1; k <= 200; ++k) {
    a.publish(0, Counter::Ready, k);
    a.wait_at_least(1, Counter::Ready, k, Deadline::after(10s));
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

TEST_CASE("cuda: control block: flags and mailboxes reach the other side", "[cuda][control]") {
  const std::string name = ControlBlock::make_name();
  auto a = ControlBlock::create(name, 3);
  CHECK(a.flags() == 0);
  a.set_flags(1);
  auto b = ControlBlock::open(name, 3);
  CHECK(b.flags() == 1);
  // A message written before a publish is what the peer reads after its wait.
  std::thread writer([&] {
    std::vector<uint8_t> msg(ControlBlock::kMailboxBytes);
    for (std::size_t i = 0; i < msg.size(); ++i) msg[i] = static_cast<uint8_t>(i * 7 + 1);
    a.put_mailbox(2, msg.data(), msg.size());
    a.publish(2, Counter::Ready, 1);
  });
  b.wait_at_least(2, Counter::Ready, 1, Deadline::after(5s));
  std::vector<uint8_t> got(ControlBlock::kMailboxBytes);
  b.get_mailbox(2, got.data(), got.size());
  writer.join();
  for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == static_cast<uint8_t>(i * 7 + 1));
  // Ranks' mailboxes are apart, and too large a message is refused.
  std::vector<uint8_t> other(ControlBlock::kMailboxBytes, 0);
  b.get_mailbox(1, other.data(), other.size());
  CHECK(std::all_of(other.begin(), other.end(), [](uint8_t v) { return v == 0; }));
  std::vector<uint8_t> big(ControlBlock::kMailboxBytes + 1);
  CHECK_THROWS_AS(a.put_mailbox(0, big.data(), big.size()), hvd::Error);
  CHECK_THROWS_AS(a.get_mailbox(3, big.data(), 1), hvd::Error);
}
