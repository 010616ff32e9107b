// Adasum (algorithms/adasum.cpp) against a reference computed here: the
// pairwise Adasum formula applied per tensor in the same binary-tree order
// (ranks 2k and 2k+1 first, then pairs of pairs, ...), in double, rounding to
// the element type after every pairwise step as the algorithm does.
#include "hvd/collective/algorithms.h"
#include "hvd/collective/comm.h"
#include "hvd/collective/types.h"
#include "hvd/common/error.h"
#include "hvd/store/memory_store.h"

#include "comm_world.h"
#include "algorithms/half.h"

#include <catch2/catch.hpp>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <thread>

using namespace hvd;
using namespace hvd::collective;
using namespace std::chrono_literals;

namespace {

using hvd_test::Comms;
using hvd_test::make_world;

/// Runs body(rank, comm) on one thread per rank; returns each rank's error text.
std::vector<std::string> run_ranks(Comms& comms, const std::function<void(int, Comm&)>& body) {
  std::vector<std::string> errs(comms.size());
  std::vector<std::thread> ts;
  for (std::size_t r = 0; r < comms.size(); ++r) {
    ts.emplace_back([&, r] {
      try {
        body(static_cast<int>(r), *comms[r]);
      } catch (const std::exception& e) {
        errs[r] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  return errs;
}

double round_to(DataType t, double v) {
  switch (t) {
    case DataType::Float16: return detail::half_to_float(detail::float_to_half(static_cast<float>(v)));
    case DataType::Float32: return static_cast<float>(v);
    default: return v;
  }
}

std::vector<uint8_t> encode(DataType t, const std::vector<double>& v) {
  std::vector<uint8_t> out(v.size() * dtype_size(t));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (t == DataType::Float16) {
      const uint16_t h = detail::float_to_half(static_cast<float>(v[i]));
      std::memcpy(out.data() + 2 * i, &h, 2);
    } else if (t == DataType::Float32) {
      const float f = static_cast<float>(v[i]);
      std::memcpy(out.data() + 4 * i, &f, 4);
    } else {
      std::memcpy(out.data() + 8 * i, &v[i], 8);
    }
  }
  return out;
}

double decode(DataType t, const uint8_t* p, std::size_t i) {
  if (t == DataType::Float16) {
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return detail::half_to_float(h);
  }
  if (t == DataType::Float32) {
    float f;
    std::memcpy(&f, p + 4 * i, 4);
    return f;
  }
  double d;
  std::memcpy(&d, p + 8 * i, 8);
  return d;
}

/// Horovod's pairwise Adasum of a and b (one tensor), rounded to `t`.
std::vector<double> adasum_pair(DataType t, const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  const double tiny = std::sqrt(DBL_MIN);
  const double ca = aa >= tiny ? 1.0 - dot / (2 * aa) : 1.0;
  const double cb = bb >= tiny ? 1.0 - dot / (2 * bb) : 1.0;
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = round_to(t, ca * a[i] + cb * b[i]);
  return out;
}

/// The tree over ranks [lo, hi) (hi - lo a power of two), one tensor.
std::vector<double> adasum_tree(DataType t, const std::vector<std::vector<double>>& per_rank, int lo, int hi) {
  if (hi - lo == 1) return per_rank[lo];
  const int mid = (lo + hi) / 2;
  return adasum_pair(t, adasum_tree(t, per_rank, lo, mid), adasum_tree(t, per_rank, mid, hi));
}

/// Rank r's input for tensor `k` of `count` elements: random, with some
/// structure so that gradients partly agree (dot products far from 0).
std::vector<double> input(DataType t, int r, std::size_t k, std::size_t count, double prescale) {
  std::mt19937 gen(static_cast<uint32_t>(1000 * r + 17 * k + count));
  std::normal_distribution<double> noise(0.0, 1.0);
  std::vector<double> v(count);
  for (std::size_t i = 0; i < count; ++i) {
    const double shared = std::sin(0.37 * static_cast<double>(i) + static_cast<double>(k));
    v[i] = round_to(t, (r % 2 ? 1.5 : 1.0) * shared + 0.7 * noise(gen));
    if (k == 2) v[i] = 0.0;  // an all-zero tensor: its coefficients stay 1
  }
  for (double& x : v) x = round_to(t, x * prescale);
  return v;
}

double tolerance(DataType t) {
  switch (t) {
    case DataType::Float16: return 1e-2;
    case DataType::Float32: return 1e-5;
    default: return 1e-11;
  }
}

struct Case {
  int n;
  DataType dtype;
  std::vector<std::size_t> counts;  // one entry: an unfused tensor
  double prescale = 1.0, postscale = 1.0;
};

/// Runs one case and checks every rank's result against the reference; the
/// ranks' results must also be bit-identical.
void check_case(Comms& comms, const Case& c) {
  INFO(fmt::format("n={} dtype={} counts=[{}] pre={} post={}", c.n, dtype_name(c.dtype), fmt::join(c.counts, ","),
                   c.prescale, c.postscale));
  const std::size_t es = dtype_size(c.dtype);
  std::size_t total = 0;
  for (std::size_t k : c.counts) total += k;
  // Expected, per tensor.
  std::vector<double> expected;
  for (std::size_t k = 0; k < c.counts.size(); ++k) {
    std::vector<std::vector<double>> per_rank;
    for (int r = 0; r < c.n; ++r) per_rank.push_back(input(c.dtype, r, k, c.counts[k], 1.0));
    std::vector<double> e = adasum_tree(c.dtype, per_rank, 0, c.n);
    for (double& x : e) x *= c.prescale * c.postscale;
    expected.insert(expected.end(), e.begin(), e.end());
  }
  std::vector<std::vector<uint8_t>> bufs(c.n);
  for (int r = 0; r < c.n; ++r) {
    std::vector<double> all;
    for (std::size_t k = 0; k < c.counts.size(); ++k) {
      std::vector<double> v = input(c.dtype, r, k, c.counts[k], 1.0);
      all.insert(all.end(), v.begin(), v.end());
    }
    bufs[r] = encode(c.dtype, all);
  }
  auto errs = run_ranks(comms, [&](int r, Comm& comm) {
    if (c.counts.size() == 1) {
      allreduce(comm, bufs[r].data(), total, c.dtype, ReduceOp::Adasum, c.prescale, c.postscale);
    } else {
      adasum_allreduce(comm, bufs[r].data(), c.counts, c.dtype, c.prescale, c.postscale);
    }
  });
  for (int r = 0; r < c.n; ++r) REQUIRE(errs[r] == "");
  double scale = 1e-30;
  for (double x : expected) scale = std::max(scale, std::abs(x));
  double worst = 0;
  for (std::size_t i = 0; i < total; ++i)
    worst = std::max(worst, std::abs(decode(c.dtype, bufs[0].data(), i) - expected[i]));
  CHECK(worst <= tolerance(c.dtype) * scale);
  for (int r = 1; r < c.n; ++r) CHECK(bufs[r] == bufs[0]);
  (void)es;
}

}  // namespace

TEST_CASE("adasum matches the pairwise tree reference on 1, 2, 4 and 8 ranks", "[collective][adasum]") {
  store::InMemoryStore st;
  for (int n : {1, 2, 4, 8}) {
    Comms comms = make_world(st, n, fmt::format("adasum{}/", n));
    for (DataType t : {DataType::Float64, DataType::Float32, DataType::Float16}) {
      // Unfused: tiny, odd, and larger than a level's halves split evenly.
      for (std::size_t count : {std::size_t{1}, std::size_t{5}, std::size_t{1001}}) check_case(comms, {n, t, {count}});
      // Fused: several tensors (one all zeros, one empty) back to back, with
      // boundaries that fall inside every level's halves.
      check_case(comms, {n, t, {37, 3, 64, 0, 999}});
    }
    check_case(comms, {n, DataType::Float64, {300}, 0.5, 3.0});
    check_case(comms, {n, DataType::Float32, {17, 40}, 2.0, 0.25});
  }
}

TEST_CASE("adasum combines fused tensors each with its own coefficients", "[collective][adasum]") {
  // Two tensors whose per-tensor Adasum differs from the Adasum of their
  // concatenation: t0 identical on both ranks (Adasum(g, g) = g), t1
  // orthogonal (Adasum = a + b). One coefficient pair over the whole buffer
  // would give neither.
  store::InMemoryStore st;
  Comms comms = make_world(st, 2, "fused/");
  std::vector<std::vector<double>> bufs = {{1, 2, 3, 4, 0}, {1, 2, 3, 0, 5}};
  auto errs = run_ranks(comms, [&](int r, Comm& comm) {
    adasum_allreduce(comm, bufs[r].data(), {3, 2}, DataType::Float64);
  });
  REQUIRE(errs == std::vector<std::string>(2));
  for (int r = 0; r < 2; ++r) CHECK(bufs[r] == std::vector<double>{1, 2, 3, 4, 5});
  // The same data as one tensor: dot 14, |a|^2 = 30, |b|^2 = 39.
  std::vector<std::vector<double>> one = {{1, 2, 3, 4, 0}, {1, 2, 3, 0, 5}};
  errs = run_ranks(comms,
                   [&](int r, Comm& comm) { allreduce(comm, one[r].data(), 5, DataType::Float64, ReduceOp::Adasum); });
  REQUIRE(errs == std::vector<std::string>(2));
  const double ca = 1 - 14.0 / 60, cb = 1 - 14.0 / 78;
  CHECK(one[0][0] == Approx(ca + cb));
  CHECK(one[0][3] == Approx(4 * ca));
  CHECK(one[0][4] == Approx(5 * cb));
}

TEST_CASE("adasum refuses non-power-of-two sizes and non-floating types before any traffic", "[collective][adasum]") {
  CHECK_FALSE(adasum_supported_size(3));
  CHECK_FALSE(adasum_supported_size(6));
  CHECK_FALSE(adasum_supported_size(0));
  CHECK(adasum_supported_size(1));
  CHECK(adasum_supported_size(16));
  store::InMemoryStore st;
  Comms comms = make_world(st, 3, "three/");
  auto errs = run_ranks(comms, [&](int r, Comm& comm) {
    std::vector<float> v(8, 1.0f);
    allreduce(comm, v.data(), v.size(), DataType::Float32, ReduceOp::Adasum);
  });
  for (const std::string& e : errs) CHECK_THAT(e, Catch::Contains("power-of-two number of ranks"));
  errs = run_ranks(comms, [&](int r, Comm& comm) {
    std::vector<int32_t> v(8, 1);
    allreduce(comm, v.data(), v.size(), DataType::Int32, ReduceOp::Adasum);
  });
  for (const std::string& e : errs) CHECK_THAT(e, Catch::Contains("float16, float32 and float64"));
  errs = run_ranks(comms, [&](int r, Comm& comm) {
    std::vector<float> v(3, 1.0f), out(1);
    reducescatter(comm, v.data(), out.data(), {1, 1, 1}, DataType::Float32, ReduceOp::Adasum);
  });
  for (const std::string& e : errs) CHECK_THAT(e, Catch::Contains("allreduce-only"));
  // The communicator is still healthy: a sum goes through.
  errs = run_ranks(comms, [&](int r, Comm& comm) {
    std::vector<double> v(4, 1.0);
    allreduce(comm, v.data(), v.size(), DataType::Float64, ReduceOp::Sum);
    if (v[3] != 3.0) throw std::runtime_error("sum after refusal is wrong");
  });
  CHECK(errs == std::vector<std::string>(3));
}
