// The Context end to end with ranks as threads over an InMemoryStore:
// out-of-order submission, fusion, cache, mismatches, stalls, failures.
#include "hvd/collective/context.h"
#include "hvd/collective/hvd.h"
#include "hvd/collective/init_env.h"
#include "hvd/store/memory_store.h"
#include "thread_job.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <future>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace hvd::collective;
using namespace std::chrono_literals;

namespace {

using Job = hvd_test::ThreadJob;

Settings fast_settings() {
  Settings s;
  s.cycle_time = std::chrono::microseconds(500);
  return s;
}

}  // namespace

TEST_CASE("context: a job of size 1 needs no store and runs every op locally") {
  Settings s;
  auto ctx = Context::create(s, nullptr);
  REQUIRE(ctx->size() == 1);
  std::vector<float> v{1, 2, 3};
  ctx->allreduce({"v", v.data(), v.data(), DataType::Float32, {3}, ReduceOp::Average, 2.0, 1.0});
  CHECK(v == std::vector<float>{2, 4, 6});
  std::vector<int32_t> g{7, 8};
  Handle h = ctx->allgather({"g", g.data(), DataType::Int32, {2}, {}});
  CHECK(h.output_shape() == std::vector<int64_t>{2});
  CHECK(std::vector<int32_t>(static_cast<const int32_t*>(h.output()), static_cast<const int32_t*>(h.output()) + 2) ==
        g);
  ctx->barrier();
  ctx->shutdown();
  ctx->shutdown();  // idempotent
}

TEST_CASE("settings_from_env: no topology variables -> size 1 - partial or garbage -> InvalidArgument naming it") {
  const char* vars[] = {"HOROVOD_RANK",       "HOROVOD_SIZE",       "HOROVOD_LOCAL_RANK",
                        "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE"};
  for (const char* v : vars) unsetenv(v);
  CHECK(settings_from_env().size == 1);
  setenv("HOROVOD_SIZE", "2", 1);
  CHECK_THROWS_WITH(settings_from_env(), Catch::Contains("HOROVOD_SIZE is set but HOROVOD_RANK is not"));
  setenv("HOROVOD_RANK", "1", 1);
  setenv("HOROVOD_LOCAL_RANK", "0", 1);
  setenv("HOROVOD_LOCAL_SIZE", "1", 1);
  setenv("HOROVOD_CROSS_RANK", "1", 1);
  setenv("HOROVOD_CROSS_SIZE", "2", 1);
  Settings s = settings_from_env();
  CHECK(s.rank == 1);
  CHECK(s.size == 2);
  setenv("HOROVOD_RANK", "x", 1);
  CHECK_THROWS_WITH(settings_from_env(), Catch::Contains("HOROVOD_RANK='x'"));
  setenv("HOROVOD_RANK", "2", 1);
  CHECK_THROWS_WITH(settings_from_env(), Catch::Contains("HOROVOD_RANK=2 is out of range"));
  setenv("HOROVOD_RANK", "1", 1);
  setenv("HOROVOD_CYCLE_TIME", "-1", 1);
  CHECK_THROWS_WITH(settings_from_env(), Catch::Contains("HOROVOD_CYCLE_TIME"));
  unsetenv("HOROVOD_CYCLE_TIME");
  setenv("HOROVOD_GLOO_IFACE", "lo", 1);
  CHECK(settings_from_env().bind_address == "127.0.0.1");
  setenv("HOROVOD_GLOO_IFACE", "nosuchif0", 1);
  CHECK_THROWS_WITH(settings_from_env(), Catch::Contains("HOROVOD_GLOO_IFACE='nosuchif0'"));
  unsetenv("HOROVOD_GLOO_IFACE");
  setenv("HOROVOD_CACHE_CAPACITY", "-3", 1);
  CHECK_THROWS_WITH(settings_from_env(), Catch::Contains("HOROVOD_CACHE_CAPACITY=-3"));
  unsetenv("HOROVOD_CACHE_CAPACITY");
  for (const char* v : vars) unsetenv(v);
}

TEST_CASE("settings_from_env: Horovod's tuning variables, their defaults and bad values") {
  const char* tuning[] = {
      "HOROVOD_CYCLE_TIME",          "HOROVOD_FUSION_THRESHOLD",         "HOROVOD_CACHE_CAPACITY",
      "HOROVOD_STALL_CHECK_DISABLE", "HOROVOD_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
      "HOROVOD_START_TIMEOUT"};
  for (const char* v : tuning) unsetenv(v);
  Settings d = settings_from_env();
  CHECK(d.cycle_time == std::chrono::microseconds(1000));
  CHECK(d.fusion_threshold == (std::size_t(64) << 20));
  CHECK(d.cache_capacity == 1024);
  CHECK(d.stall_check);
  CHECK(d.stall_warn_after == std::chrono::milliseconds(60000));
  CHECK(d.stall_fail_after == std::chrono::milliseconds(0));
  CHECK(d.start_timeout == std::chrono::milliseconds(30000));

  setenv("HOROVOD_CYCLE_TIME", "2.5", 1);
  setenv("HOROVOD_FUSION_THRESHOLD", "33554432", 1);
  setenv("HOROVOD_CACHE_CAPACITY", "0", 1);
  setenv("HOROVOD_STALL_CHECK_DISABLE", "1", 1);
  setenv("HOROVOD_STALL_CHECK_TIME_SECONDS", "5", 1);
  setenv("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "20", 1);
  setenv("HOROVOD_START_TIMEOUT", "7", 1);
  Settings s = settings_from_env();
  CHECK(s.cycle_time == std::chrono::microseconds(2500));
  CHECK(s.fusion_threshold == 33554432u);
  CHECK(s.cache_capacity == 0);
  CHECK_FALSE(s.stall_check);
  CHECK(s.stall_warn_after == std::chrono::milliseconds(5000));
  CHECK(s.stall_fail_after == std::chrono::milliseconds(20000));
  CHECK(s.start_timeout == std::chrono::milliseconds(7000));

  setenv("HOROVOD_FUSION_THRESHOLD", "-1", 1);
  CHECK_THROWS_WITH(settings_from_env(), Catch::Contains("HOROVOD_FUSION_THRESHOLD=-1"));
  setenv("HOROVOD_FUSION_THRESHOLD", "lots", 1);
  CHECK_THROWS_WITH(settings_from_env(), Catch::Contains("HOROVOD_FUSION_THRESHOLD"));
  unsetenv("HOROVOD_FUSION_THRESHOLD");
  setenv("HOROVOD_STALL_CHECK_TIME_SECONDS", "soon", 1);
  CHECK_THROWS_WITH(settings_from_env(), Catch::Contains("HOROVOD_STALL_CHECK_TIME_SECONDS"));
  for (const char* v : tuning) unsetenv(v);
}

TEST_CASE("join: a joined rank contributes zeros to the others' allreduces, and join returns the last rank") {
  Job job(3, fast_settings());
  std::vector<int> last(3, -2);
  job.run([&](Context& c, int r) {
    if (r == 2) {
      last[r] = c.join();  // no data at all on this rank
      return;
    }
    std::vector<float> x(5, 1.0f);
    c.allreduce(AllreduceArgs{"sum", x.data(), x.data(), DataType::Float32, {5}, ReduceOp::Sum});
    CHECK(x == std::vector<float>(5, 2.0f));  // 1 + 1 + 0
    std::vector<double> a(3, 3.0);
    c.allreduce(AllreduceArgs{"avg", a.data(), a.data(), DataType::Float64, {3}, ReduceOp::Average});
    CHECK(a == std::vector<double>(3, 2.0));  // (3 + 3 + 0) / 3, as Horovod
    // A barrier completes, the joined rank taking part (Horovod's joined
    // rank runs the barrier from inside join()).
    c.barrier();
    if (r == 1) {
      // Other collectives fail on every active rank while a rank has joined,
      // with JoinedError (an internal error, as Horovod's; not InvalidArgument).
      std::vector<uint8_t> b(4, 1);
      CHECK_THROWS_AS(c.broadcast({"b", b.data(), b.data(), DataType::UInt8, {4}, 0}), JoinedError);
      CHECK(b == std::vector<uint8_t>(4, 1));  // nothing touched
      last[r] = c.join();
      return;
    }
    std::vector<uint8_t> b(4, 0);
    CHECK_THROWS_WITH(c.broadcast({"b", b.data(), b.data(), DataType::UInt8, {4}, 0}),
                      Catch::Contains("rank 2 has joined"));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // rank 1 joins first
    std::vector<int64_t> alone(4, 7);
    c.allreduce(AllreduceArgs{"alone", alone.data(), alone.data(), DataType::Int64, {4}, ReduceOp::Sum});
    CHECK(alone == std::vector<int64_t>(4, 7));
    last[r] = c.join();
  });
  CHECK(last == std::vector<int>{0, 0, 0});  // rank 0 joined last, everyone hears it
  // The job goes on normally afterwards.
  job.run([&](Context& c, int) {
    std::vector<int32_t> v(2, 1);
    c.allreduce(AllreduceArgs{"after", v.data(), v.data(), DataType::Int32, {2}, ReduceOp::Sum});
    CHECK(v == std::vector<int32_t>(2, 3));
  });
}

TEST_CASE("every op on 1..4 ranks for several dtypes gives closed-form results") {
  for (int n : {1, 2, 3, 4}) {
    Job job(n, fast_settings());
    job.run([&](Context& c, int r) {
      // allreduce sum / average / max over int32, float64.
      std::vector<int32_t> a(5, r + 1);
      c.allreduce({"a", a.data(), a.data(), DataType::Int32, {5}, ReduceOp::Sum});
      CHECK(a == std::vector<int32_t>(5, n * (n + 1) / 2));
      std::vector<double> d(3, r), out(3);
      c.allreduce({"d", d.data(), out.data(), DataType::Float64, {3}, ReduceOp::Average, 1.0, 2.0});
      CHECK(out[2] == Approx((n - 1) / 2.0 * 2.0));
      std::vector<int64_t> m{int64_t(r), int64_t(-r)};
      c.allreduce({"m", m.data(), m.data(), DataType::Int64, {2}, ReduceOp::Max});
      CHECK(m == std::vector<int64_t>{n - 1, 0});
      // allgather with a per-rank first dimension: rank r contributes r+1 rows of 2.
      std::vector<float> g(static_cast<std::size_t>(2 * (r + 1)), float(r));
      Handle h = c.allgather({"g", g.data(), DataType::Float32, {r + 1, 2}, {}});
      int64_t rows = n * (n + 1) / 2;
      REQUIRE(h.output_shape() == std::vector<int64_t>{rows, 2});
      const float* o = static_cast<const float*>(h.output());
      std::size_t k = 0;
      for (int q = 0; q < n; ++q) {
        for (int i = 0; i < 2 * (q + 1); ++i) CHECK(o[k++] == float(q));
      }
      // broadcast from the last rank.
      std::vector<uint8_t> b(4, static_cast<uint8_t>(r));
      c.broadcast({"b", b.data(), b.data(), DataType::UInt8, {4}, n - 1});
      CHECK(b == std::vector<uint8_t>(4, static_cast<uint8_t>(n - 1)));
      // alltoall: rank r sends q+1 rows of value 100r+q to rank q.
      std::vector<int64_t> splits;
      std::vector<int32_t> send;
      for (int q = 0; q < n; ++q) {
        splits.push_back(q + 1);
        for (int i = 0; i <= q; ++i) send.push_back(100 * r + q);
      }
      Handle t = c.alltoall({"t", send.data(), DataType::Int32, {static_cast<int64_t>(send.size())}, splits, {}});
      REQUIRE(t.recv_splits() == std::vector<int64_t>(n, r + 1));
      const int32_t* to = static_cast<const int32_t*>(t.output());
      for (int q = 0; q < n; ++q) {
        for (int i = 0; i <= r; ++i) CHECK(*to++ == 100 * q + r);
      }
      // reducescatter of 2n+1 rows of 3 floats.
      std::vector<float> rs(static_cast<std::size_t>((2 * n + 1) * 3), 1.0f);
      Handle s = c.reducescatter({"rs", rs.data(), DataType::Float32, {2 * n + 1, 3}, ReduceOp::Sum, 1.0, 1.0, {}});
      CHECK(s.output_shape() == std::vector<int64_t>{reducescatter_rows(2 * n + 1, r, n), 3});
      const float* so = static_cast<const float*>(s.output());
      for (std::size_t i = 0; i < s.output_bytes() / sizeof(float); ++i) CHECK(so[i] == float(n));
      c.barrier();
    });
  }
}

TEST_CASE("ranks may submit named operations in different orders") {
  Job job(3, fast_settings());
  job.run([&](Context& c, int r) {
    constexpr int kTensors = 20;
    std::vector<int> order(kTensors);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(1234 + r));
    std::vector<std::vector<int32_t>> data(kTensors);
    std::vector<Handle> handles(kTensors);
    for (int i : order) {
      data[i].assign(static_cast<std::size_t>(i + 1), i * (r + 1));
      handles[i] = c.allreduce_async(
          {"t" + std::to_string(i), data[i].data(), data[i].data(), DataType::Int32, {i + 1}, ReduceOp::Sum});
    }
    for (int i = 0; i < kTensors; ++i) {
      handles[i].wait();
      CHECK(data[i] == std::vector<int32_t>(static_cast<std::size_t>(i + 1), i * 6));
    }
  });
}

TEST_CASE("fusion: 100 small allreduces are packed into few reductions") {
  Settings s = fast_settings();
  s.cycle_time = std::chrono::milliseconds(20);
  Job job(2, s);
  job.run([&](Context& c, int r) {
    std::vector<std::vector<float>> data(100);
    std::vector<Handle> hs;
    for (int i = 0; i < 100; ++i) {
      data[i].assign(16, float(i + r));
      hs.push_back(
          c.allreduce_async({"f" + std::to_string(i), data[i].data(), data[i].data(), DataType::Float32, {16}}));
    }
    for (int i = 0; i < 100; ++i) {
      hs[i].wait();
      CHECK(data[i][15] == float(2 * i + 1));
    }
    ContextStats st = c.stats();
    CHECK(st.fused_tensors >= 50);
    CHECK(st.fused_responses >= 1);
    CHECK(st.responses < 60);
  });
}

TEST_CASE("response cache: repeated identical submissions take the cached fast path") {
  for (std::size_t capacity : {std::size_t(1024), std::size_t(0)}) {
    Settings s = fast_settings();
    s.cache_capacity = capacity;
    Job job(2, s);
    job.run([&](Context& c, int r) {
      for (int i = 0; i < 10; ++i) {
        std::vector<float> v(8, 1.0f);
        c.allreduce({"loss", v.data(), v.data(), DataType::Float32, {8}});
        CHECK(v[0] == 2.0f);
      }
      ContextStats st = c.stats();
      if (capacity > 0) {
        CHECK(st.cache_hits == 9);
        CHECK(st.cache_misses == 1);
      } else {
        CHECK(st.cache_hits == 0);
        CHECK(st.cache_misses == 10);
      }
    });
  }
}

TEST_CASE("mismatched submissions fail on every rank with a message naming the ranks - the job goes on") {
  Job job(3, fast_settings());
  job.run([&](Context& c, int r) {
    // Shape.
    std::vector<float> w(20, 1.0f);
    int64_t cols = r == 1 ? 5 : 4;
    Handle h = c.allreduce_async({"grad.w", w.data(), w.data(), DataType::Float32, {4, cols}});
    CHECK_THROWS_MATCHES(
        h.wait(), MismatchError,
        Catch::Message("tensor 'grad.w' mismatch: ranks 0,2 have float32[4,4], rank 1 has float32[4,5]"));
    // Dtype.
    std::vector<double> d(4, 1.0);
    DataType dt = r == 2 ? DataType::Float64 : DataType::Float32;
    CHECK_THROWS_MATCHES(c.allreduce({"dt", d.data(), d.data(), dt, {2}}), MismatchError,
                         Catch::Message("tensor 'dt' mismatch: ranks 0,1 have float32[2], rank 2 has float64[2]"));
    // Reduce op.
    ReduceOp op = r == 0 ? ReduceOp::Min : ReduceOp::Sum;
    CHECK_THROWS_MATCHES(c.allreduce({"op", d.data(), d.data(), DataType::Float64, {4}, op}), MismatchError,
                         Catch::Message("tensor 'op' mismatch: rank 0 uses op min, ranks 1,2 use op sum"));
    // Broadcast root.
    CHECK_THROWS_MATCHES(c.broadcast({"root", d.data(), d.data(), DataType::Float64, {4}, r == 2 ? 1 : 0}),
                         MismatchError,
                         Catch::Message("tensor 'root' mismatch: ranks 0,1 use root 0, rank 2 uses root 1"));
    // The name is free again and the job still works.
    std::vector<float> ok(4, 1.0f);
    c.allreduce({"grad.w", ok.data(), ok.data(), DataType::Float32, {4}});
    CHECK(ok[0] == 3.0f);
  });
}

TEST_CASE("argument errors are reported at submission") {
  Job job(2, fast_settings());
  std::vector<float> v(4);
  Context& c = job[0];
  CHECK_THROWS_WITH(c.broadcast_async({"b", v.data(), v.data(), DataType::Float32, {4}, 2}),
                    Catch::Contains("root rank 2 is out of range"));
  CHECK_THROWS_WITH(c.alltoall_async({"a", v.data(), DataType::Float32, {4}, {1, 2}, {}}),
                    Catch::Contains("splits sum to 3 but the first dimension is 4"));
  CHECK_THROWS_WITH(c.allreduce_async({"n", nullptr, v.data(), DataType::Float32, {4}}),
                    Catch::Contains("input is null"));
  // (Integer tensors take prescale/postscale since issue 27, as Horovod's:
  // python.horovod_semantics checks the values.)
  // Duplicate while pending (rank 1 never submits "dup" until later).
  Handle h = c.allreduce_async({"dup", v.data(), v.data(), DataType::Float32, {4}});
  CHECK_THROWS_WITH(c.allreduce_async({"dup", v.data(), v.data(), DataType::Float32, {4}}),
                    Catch::Contains("tensor 'dup' is already pending on rank 0"));
  std::vector<float> w(4);
  job[1].allreduce({"dup", w.data(), w.data(), DataType::Float32, {4}});
  h.wait();
}

TEST_CASE("allgather uses the caller's allocator - a failing allocator fails only that rank's op") {
  Job job(2, fast_settings());
  job.run([&](Context& c, int r) {
    std::vector<int32_t> mine(3, r);
    std::vector<int32_t> storage;
    std::vector<int64_t> seen_shape;
    Allocator alloc = [&](const std::vector<int64_t>& shape, std::size_t bytes) -> void* {
      seen_shape = shape;
      storage.resize(bytes / sizeof(int32_t));
      return storage.data();
    };
    Handle h = c.allgather({"ga", mine.data(), DataType::Int32, {3}, alloc});
    CHECK(seen_shape == std::vector<int64_t>{6});
    CHECK(h.output() == storage.data());
    CHECK(storage == std::vector<int32_t>{0, 0, 0, 1, 1, 1});
    Allocator broken = [](const std::vector<int64_t>&, std::size_t) -> void* { return nullptr; };
    Handle h2 = c.allgather_async({"gb", mine.data(), DataType::Int32, {3}, r == 0 ? broken : Allocator{}});
    if (r == 0) {
      CHECK_THROWS_WITH(h2.wait(), Catch::Contains("allocator returned null"));
    } else {
      h2.wait();
      CHECK(h2.output_bytes() == 6 * sizeof(int32_t));
    }
  });
}

TEST_CASE("stall check: warns naming the missing ranks, then fails the tensor on the ranks that submitted it") {
  Settings s = fast_settings();
  s.stall_warn_after = 200ms;
  s.stall_fail_after = 900ms;
  Job job(3, s);
  std::vector<float> v0(2), v1(2);
  auto t0 = std::chrono::steady_clock::now();
  Handle h0 = job[0].allreduce_async({"lonely", v0.data(), v0.data(), DataType::Float32, {2}});
  Handle h1 = job[1].allreduce_async({"lonely", v1.data(), v1.data(), DataType::Float32, {2}});
  CHECK_THROWS_AS(h0.wait(), hvd::TimeoutError);
  CHECK_THROWS_WITH(h0.wait(), Catch::Contains("tensor 'lonely' stalled: rank 2"));
  CHECK_THROWS_AS(h1.wait(), hvd::TimeoutError);
  auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= 800ms);
  CHECK(waited < 5s);
  ContextStats st = job[0].stats();
  REQUIRE_FALSE(st.stall_warnings.empty());
  CHECK_THAT(st.stall_warnings[0], Catch::Contains("'lonely'") && Catch::Contains("ranks 0,1") &&
                                       Catch::Contains("rank 2 that never submitted it"));
}

TEST_CASE("a communicator failure fails every pending and later op with IoError within 2 s") {
  Job job(3, fast_settings());
  std::vector<float> v0(1 << 16, 1.0f), v1(1 << 16, 1.0f);
  Handle h0 = job[0].allreduce_async({"x", v0.data(), v0.data(), DataType::Float32, {1 << 16}});
  Handle h1 = job[1].allreduce_async({"x", v1.data(), v1.data(), DataType::Float32, {1 << 16}});
  std::this_thread::sleep_for(50ms);
  auto t0 = std::chrono::steady_clock::now();
  job[2].abort("injected failure of rank 2");
  CHECK_THROWS_AS(h0.wait(), hvd::IoError);
  CHECK_THROWS_AS(h1.wait(), hvd::IoError);
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  for (int r = 0; r < 3; ++r) {
    // Every rank learns (rank 2 from its own abort, the others from the links).
    auto deadline = std::chrono::steady_clock::now() + 2s;
    while (!job[r].failed() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
    CHECK(job[r].failed());
    CHECK_THROWS_AS(job[r].allreduce_async({"later", v0.data(), v0.data(), DataType::Float32, {4}}), hvd::IoError);
  }
  CHECK_THROWS_WITH(job[2].barrier_async(), Catch::Contains("injected failure of rank 2"));
  for (int r = 0; r < 3; ++r) job[r].shutdown();
}

TEST_CASE("shutdown fails operations that can no longer run with ShutdownError") {
  Job job(2, fast_settings());
  std::vector<float> v(2);
  Handle h = job[1].allreduce_async({"never", v.data(), v.data(), DataType::Float32, {2}});
  job[0].shutdown();
  CHECK_THROWS_AS(h.wait(), ShutdownError);
  CHECK_THROWS_WITH(h.wait(), Catch::Contains("rank 0 shut down the job"));
  CHECK_THROWS_AS(job[1].barrier_async(), ShutdownError);
  CHECK_THROWS_AS(job[0].barrier_async(), ShutdownError);
  job[1].shutdown();
}

TEST_CASE("global API: init without hvdrun is a job of size 1 - use before init is an error") {
  for (const char* v : {"HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                        "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE", "HOROVOD_GLOO_RENDEZVOUS_ADDR"}) {
    unsetenv(v);
  }
  CHECK_FALSE(hvd::is_initialized());
  CHECK_THROWS_AS(hvd::rank(), NotInitializedError);
  hvd::init();
  CHECK(hvd::is_initialized());
  CHECK(hvd::size() == 1);
  CHECK(hvd::rank() == 0);
  std::vector<double> v{1.5, 2.5};
  hvd::allreduce("v", v);
  CHECK(v == std::vector<double>{1.5, 2.5});
  CHECK(hvd::allgather("g", std::vector<int32_t>{4, 5}) == std::vector<int32_t>{4, 5});
  hvd::shutdown();
  CHECK_FALSE(hvd::is_initialized());
  hvd::init();  // re-init after shutdown works
  CHECK(hvd::size() == 1);
  hvd::shutdown();
}

TEST_CASE("op variants: even alltoall, min/product, scaled reducescatter, broadcast into a separate buffer") {
  Job job(3, fast_settings());
  job.run([&](Context& c, int r) {
    // Even alltoall: 6 rows of 2, two rows to each rank.
    std::vector<int64_t> send(12);
    for (int i = 0; i < 12; ++i) send[i] = 1000 * r + i / 4;  // rows 2q,2q+1 -> value 1000r+q
    Handle t = c.alltoall({"even", send.data(), DataType::Int64, {6, 2}, {}, {}});
    CHECK(t.recv_splits() == std::vector<int64_t>{2, 2, 2});
    CHECK(t.output_shape() == std::vector<int64_t>{6, 2});
    const int64_t* o = static_cast<const int64_t*>(t.output());
    for (int q = 0; q < 3; ++q) {
      for (int i = 0; i < 4; ++i) CHECK(o[q * 4 + i] == 1000 * q + r);
    }
    std::vector<int32_t> mn{r + 5, -r};
    c.allreduce({"min", mn.data(), mn.data(), DataType::Int32, {2}, ReduceOp::Min});
    CHECK(mn == std::vector<int32_t>{5, -2});
    std::vector<double> pr{double(r + 1)};
    c.allreduce({"prod", pr.data(), pr.data(), DataType::Float64, {}, ReduceOp::Product});
    CHECK(pr[0] == 6.0);
    std::vector<float> rs(6, 1.0f);
    Handle s = c.reducescatter({"rs", rs.data(), DataType::Float32, {3, 2}, ReduceOp::Average, 4.0, 0.5, {}});
    CHECK(s.output_shape() == std::vector<int64_t>{1, 2});
    CHECK(static_cast<const float*>(s.output())[1] == Approx(2.0));
    std::vector<int8_t> src(3, static_cast<int8_t>(r == 1 ? 9 : 0)), dst(3, 0);
    c.broadcast({"sep", r == 1 ? src.data() : nullptr, dst.data(), DataType::Int8, {3}, 1});
    CHECK(dst == std::vector<int8_t>(3, 9));
    // Unnamed ops match by submission order.
    std::vector<float> u(2, 1.0f);
    c.allreduce({"", u.data(), u.data(), DataType::Float32, {2}});
    CHECK(u[0] == 3.0f);
  });
}

TEST_CASE("rendezvous failures are clear: absent peers time out naming the store - unreachable store is an IoError") {
  Settings s;
  s.rank = 0;
  s.size = 2;
  s.start_timeout = 300ms;
  auto store = std::make_shared<hvd::store::InMemoryStore>();
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_MATCHES(Context::create(s, store), hvd::TimeoutError,
                       Catch::Matchers::Predicate<hvd::TimeoutError>([](const hvd::TimeoutError& e) {
                         return std::string(e.what()).find("could not rendezvous") != std::string::npos;
                       }));
  CHECK(std::chrono::steady_clock::now() - t0 < 5s);

  // A port nothing listens on (bound, then closed).
  setenv("HOROVOD_RANK", "0", 1);
  setenv("HOROVOD_SIZE", "2", 1);
  setenv("HOROVOD_LOCAL_RANK", "0", 1);
  setenv("HOROVOD_LOCAL_SIZE", "2", 1);
  setenv("HOROVOD_CROSS_RANK", "0", 1);
  setenv("HOROVOD_CROSS_SIZE", "1", 1);
  setenv("HOROVOD_START_TIMEOUT", "1", 1);
  setenv("HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1", 1);
  setenv("HOROVOD_GLOO_RENDEZVOUS_PORT", "1", 1);
  t0 = std::chrono::steady_clock::now();
  try {
    context_from_env();
    FAIL("context_from_env succeeded without a store");
  } catch (const hvd::Error& e) {
    CHECK_THAT(std::string(e.what()),
               Catch::Contains("rendezvous store unreachable") || Catch::Contains("could not rendezvous"));
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  unsetenv("HOROVOD_GLOO_RENDEZVOUS_ADDR");
  CHECK_THROWS_WITH(context_from_env(), Catch::Contains("HOROVOD_GLOO_RENDEZVOUS_ADDR is not set"));
  for (const char* v :
       {"HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE", "HOROVOD_CROSS_RANK",
        "HOROVOD_CROSS_SIZE", "HOROVOD_START_TIMEOUT", "HOROVOD_GLOO_RENDEZVOUS_PORT"}) {
    unsetenv(v);
  }
}

TEST_CASE("response cache: a tiny capacity with eviction keeps ranks in agreement") {
  Settings s = fast_settings();
  s.cache_capacity = 2;
  Job job(3, s);
  job.run([&](Context& c, int r) {
    std::mt19937 rng(99 + r);
    for (int iter = 0; iter < 30; ++iter) {
      std::vector<int> order{0, 1, 2, 3, 4};
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<std::vector<int32_t>> data(5);
      std::vector<Handle> hs(5);
      for (int i : order) {
        // Shapes change every 7 iterations, so entries are also replaced.
        data[i].assign(static_cast<std::size_t>(i + 1 + iter / 7), r);
        hs[i] = c.allreduce_async({"rot" + std::to_string(i),
                                   data[i].data(),
                                   data[i].data(),
                                   DataType::Int32,
                                   {static_cast<int64_t>(data[i].size())}});
      }
      for (int i = 0; i < 5; ++i) {
        hs[i].wait();
        CHECK(data[i][0] == 3);
      }
    }
    CHECK_FALSE(c.failed());
    CHECK(c.stats().cache_hits > 0);
  });
}
