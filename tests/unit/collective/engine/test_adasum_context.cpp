// Adasum through the Context (negotiation, fusion, process sets, submit-time
// refusals), ranks as threads over one InMemoryStore. The numerics against a
// tree reference are in tests/unit/collective/algorithms/test_adasum.cpp; here each
// expected value is the pairwise formula written out.
#include "hvd/collective/context.h"
#include "hvd/store/memory_store.h"
#include "thread_job.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <cmath>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

using namespace hvd::collective;
using namespace std::chrono_literals;

namespace {

using Job = hvd_test::ThreadJob;

std::vector<double> pair(const std::vector<double>& a, const std::vector<double>& b) {
  double dot = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    dot += a[i] * b[i];
    aa += a[i] * a[i];
    bb += b[i] * b[i];
  }
  std::vector<double> out(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) out[i] = (1 - dot / (2 * aa)) * a[i] + (1 - dot / (2 * bb)) * b[i];
  return out;
}

/// Rank r's tensor k (k + 2 elements).
std::vector<double> grad(int r, int k) {
  std::vector<double> v(static_cast<std::size_t>(k + 2));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = std::cos(1.0 + r * 0.9 + static_cast<double>(i) * (k + 1)) + 0.5;
  return v;
}

}  // namespace

TEST_CASE("adasum through the context: fused tensors on 4 ranks each get their own tree result") {
  Settings s;
  s.cycle_time = 20ms;  // every tensor submitted before the first cycle: one fused response
  Job job(4, s);
  constexpr int kTensors = 12;
  job.run([&](Context& c, int r) {
    std::vector<std::vector<double>> data;
    for (int k = 0; k < kTensors; ++k) data.push_back(grad(r, k));
    std::vector<Handle> hs;
    for (int k = 0; k < kTensors; ++k) {
      hs.push_back(c.allreduce_async({"g" + std::to_string(k),
                                      data[k].data(),
                                      data[k].data(),
                                      DataType::Float64,
                                      {static_cast<int64_t>(data[k].size())},
                                      ReduceOp::Adasum}));
    }
    for (int k = 0; k < kTensors; ++k) {
      hs[k].wait();
      const std::vector<double> want = pair(pair(grad(0, k), grad(1, k)), pair(grad(2, k), grad(3, k)));
      for (std::size_t i = 0; i < want.size(); ++i) CHECK(data[k][i] == Approx(want[i]).epsilon(1e-12));
    }
    CHECK(c.stats().fused_tensors >= kTensors / 2);
  });
}

TEST_CASE("adasum through the context: Horovod's refusals at submit, and a power-of-two process set of 3 ranks") {
  Settings s;
  s.cycle_time = 1ms;
  s.process_sets = {{0, 2}};
  Job job(3, s);
  job.run([&](Context& c, int r) {
    std::vector<float> f(4, 1.0f);
    CHECK_THROWS_WITH(c.allreduce({"a", f.data(), f.data(), DataType::Float32, {4}, ReduceOp::Adasum}),
                      Catch::Contains("power-of-two number of ranks") && Catch::Contains("has 3"));
    std::vector<int32_t> i(4, 1);
    CHECK_THROWS_WITH(c.allreduce({"i", i.data(), i.data(), DataType::Int32, {4}, ReduceOp::Adasum}),
                      Catch::Contains("float16, float32 and float64"));
    ReducescatterArgs rs;
    rs.name = "rs";
    rs.input = f.data();
    rs.shape = {3};
    rs.op = ReduceOp::Adasum;
    CHECK_THROWS_WITH(c.reducescatter(rs), Catch::Contains("allreduce-only"));
    // The set {0, 2} has two ranks: Adasum runs there.
    if (r != 1) {
      std::vector<double> v = grad(r, 3);
      AllreduceArgs a{"ps", v.data(), v.data(), DataType::Float64, {5}, ReduceOp::Adasum};
      a.process_set = 1;
      c.allreduce(a);
      const std::vector<double> want = pair(grad(0, 3), grad(2, 3));
      for (std::size_t k = 0; k < v.size(); ++k) CHECK(v[k] == Approx(want[k]).epsilon(1e-12));
    }
    // The job goes on.
    std::vector<double> sum(2, 1.0);
    c.allreduce({"sum", sum.data(), sum.data(), DataType::Float64, {2}, ReduceOp::Sum});
    CHECK(sum[0] == 3.0);
  });
}
