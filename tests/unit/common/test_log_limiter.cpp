// LogLimiter: the first event of a burst in full, then one count per period.
#include "hvd/common/error.h"
#include "hvd/common/log_limiter.h"

#include <catch2/catch.hpp>

using hvd::LogLimiter;
using namespace std::chrono_literals;

TEST_CASE("log limiter: first event in full, the rest counted once per period", "[store][log]") {
  LogLimiter lim(5s);
  const auto t0 = LogLimiter::Clock::time_point{} + 100s;
  CHECK(lim.admit(t0));
  CHECK_FALSE(lim.take(t0));  // nothing suppressed yet
  for (int i = 1; i <= 31891; ++i) CHECK_FALSE(lim.admit(t0 + std::chrono::microseconds(i * 100)));
  CHECK_FALSE(lim.take(t0 + 4999ms));  // not a period yet
  auto s = lim.take(t0 + 5s);
  REQUIRE(s);
  CHECK(s->suppressed == 31891);
  CHECK(s->window == 5000ms);
  CHECK(LogLimiter::window_text(s->window) == "5 s");
  // The burst goes on: counted, not logged in full, reported a period later.
  CHECK_FALSE(lim.admit(t0 + 6s));
  CHECK_FALSE(lim.admit(t0 + 7s));
  CHECK_FALSE(lim.take(t0 + 9s));
  s = lim.take(t0 + 10s);
  REQUIRE(s);
  CHECK(s->suppressed == 2);
  // A quiet period ends the burst: the next event is logged in full again.
  CHECK_FALSE(lim.take(t0 + 15s));
  CHECK(lim.admit(t0 + 15500ms));
  CHECK_FALSE(lim.admit(t0 + 15600ms));
}

TEST_CASE("log limiter: a burst ends after a quiet period even without take()", "[store][log]") {
  LogLimiter lim(1s);
  const auto t0 = LogLimiter::Clock::time_point{} + 10s;
  CHECK(lim.admit(t0));
  CHECK(lim.admit(t0 + 2s));  // nothing counted in between: a new burst
  CHECK_FALSE(lim.admit(t0 + 2100ms));
  CHECK(lim.admit(t0 + 10s) == false);  // one event is still waiting to be reported
  auto s = lim.take(t0 + 10s);
  REQUIRE(s);
  CHECK(s->suppressed == 2);
  CHECK(s->window == 8000ms);
}

TEST_CASE("log limiter: force reports a partial period and bad periods are refused", "[store][log]") {
  LogLimiter lim(5s);
  const auto t0 = LogLimiter::Clock::time_point{} + 1s;
  CHECK_FALSE(lim.take(t0, true));  // nothing at all
  CHECK(lim.admit(t0));
  CHECK_FALSE(lim.admit(t0 + 100ms));
  auto s = lim.take(t0 + 300ms, true);
  REQUIRE(s);
  CHECK(s->suppressed == 1);
  CHECK(LogLimiter::window_text(s->window) == "0.3 s");
  CHECK_FALSE(lim.take(t0 + 400ms, true));
  CHECK_THROWS_AS(LogLimiter(0ms), hvd::InvalidArgument);
}
