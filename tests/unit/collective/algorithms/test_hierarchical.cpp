// Hierarchical allreduce/allgather (HOROVOD_HIERARCHICAL_ALLREDUCE /
// _ALLGATHER): the two-level algorithms against the flat ones on fake
// topologies (hosts x local ranks as threads over one loopback mesh), the
// layout plan, and the Context path end to end on 2 hosts x 2 ranks.
//
// Inputs are small integers, so every partial sum/product is exact in
// every dtype and the hierarchical result must equal the flat one bit for
// bit whatever the order of additions.
#include "algorithms/hierarchical.h"
#include "engine/hierarchy.h"

#include "hvd/collective/algorithms.h"
#include "hvd/collective/comm.h"
#include "hvd/collective/context.h"
#include "hvd/collective/types.h"
#include "hvd/store/memory_store.h"

#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <future>
#include <thread>
#include <vector>

using namespace hvd::collective;
using namespace hvd::collective::detail;
using namespace std::chrono_literals;

namespace {

std::vector<std::unique_ptr<Comm>> mesh(hvd::store::Store& st, int n, const std::string& prefix) {
  std::vector<std::unique_ptr<Comm>> comms(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      CommOptions o;
      o.rank = r;
      o.size = n;
      o.prefix = prefix;
      o.secret = "hier";
      o.timeout = 10s;
      comms[r] = connect_comm(st, o);
    });
  }
  for (auto& t : ts) t.join();
  for (auto& c : comms) REQUIRE(c);
  return comms;
}

/// Runs fn(rank) on one thread per rank; returns the exceptions' texts.
std::vector<std::string> on_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::string> errors(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      try {
        fn(r);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  std::vector<std::string> out;
  for (int r = 0; r < n; ++r) {
    if (!errors[r].empty()) out.push_back(fmt::format("rank {}: {}", r, errors[r]));
  }
  return out;
}

/// Element i of rank r as a small integer (1 or 2 for products).
double value(int r, std::size_t i, ReduceOp op) {
  if (op == ReduceOp::Product) return 1 + (r + i) % 2;
  return 1 + (r * 5 + i * 3) % 7;
}

void store_value(DataType t, char* p, std::size_t i, double v) {
  switch (t) {
    case DataType::UInt8: reinterpret_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); return;
    case DataType::Int32: reinterpret_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); return;
    case DataType::Int64: reinterpret_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); return;
    case DataType::Float32: reinterpret_cast<float*>(p)[i] = static_cast<float>(v); return;
    case DataType::Float64: reinterpret_cast<double*>(p)[i] = v; return;
    case DataType::Float16: {  // small integers: exact half bit patterns
      const uint16_t bits[] = {0x0000, 0x3c00, 0x4000, 0x4200, 0x4400, 0x4500, 0x4600, 0x4700};
      reinterpret_cast<uint16_t*>(p)[i] = bits[static_cast<int>(v)];
      return;
    }
    case DataType::BFloat16: {
      const float f = static_cast<float>(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(u >> 16);
      return;
    }
    default: FAIL("dtype not in the grid");
  }
}

const DataType kTypes[] = {DataType::UInt8,    DataType::Int32,   DataType::Int64,  DataType::Float16,
                           DataType::BFloat16, DataType::Float32, DataType::Float64};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product};
// 0, a count smaller than the local size, non-divisible ones, and one that
// takes the ring paths (> 64 KiB per rank).
const std::size_t kCounts[] = {0, 1, 7, 1001, 40001};

}  // namespace

TEST_CASE("hierarchy plan: regular host-major layouts only", "[hierarchical]") {
  auto topo = [](int hosts, int local) {
    std::vector<int32_t> t;
    for (int r = 0; r < hosts * local; ++r) {
      t.insert(t.end(), {r % local, r / local, local});
    }
    return t;
  };
  HierarchyPlan p = plan_hierarchy(topo(3, 2), 6, 3);
  REQUIRE(p.usable);
  CHECK(p.hosts == 3);
  CHECK(p.host == 1);
  CHECK(p.local == std::vector<int>{2, 3});
  CHECK(p.cross == std::vector<int>{1, 3, 5});
  CHECK(p.leaders == std::vector<int>{0, 2, 4});
  CHECK_FALSE(plan_hierarchy(topo(1, 4), 4, 0).usable);  // one host: flat
  CHECK(plan_hierarchy(topo(1, 4), 4, 0).why_not == "all ranks are on one host");
  auto uneven = topo(2, 2);
  uneven[3 * 3 + 2] = 3;  // rank 3 claims 3 local ranks
  CHECK_THAT(plan_hierarchy(uneven, 4, 0).why_not, Catch::Matchers::Contains("different numbers of ranks"));
  auto interleaved = topo(2, 2);
  std::swap(interleaved[3 * 1 + 1], interleaved[3 * 2 + 1]);  // ranks 1 and 2 swap hosts
  std::swap(interleaved[3 * 1], interleaved[3 * 2]);
  CHECK_THAT(plan_hierarchy(interleaved, 4, 0).why_not, Catch::Matchers::Contains("not host-major"));
}

TEST_CASE("hierarchical allreduce equals the flat one bit for bit", "[hierarchical]") {
  hvd::store::InMemoryStore st;
  for (auto [hosts, local] : {std::pair{2, 2}, std::pair{2, 3}, std::pair{3, 2}}) {
    const int n = hosts * local;
    auto comms = mesh(st, n, fmt::format("h{}x{}/", hosts, local));
    std::vector<std::vector<std::string>> mismatches(n);
    auto errors = on_threads(n, [&](int r) {
      Comm& world = *comms[r];
      std::vector<int> lm, cm;
      for (int i = 0; i < local; ++i) lm.push_back(r / local * local + i);
      for (int h = 0; h < hosts; ++h) cm.push_back(h * local + r % local);
      GroupComm lg(world, lm), cg(world, cm);
      for (DataType t : kTypes) {
        for (ReduceOp op : kOps) {
          for (std::size_t count : kCounts) {
            const std::size_t bytes = count * dtype_size(t);
            std::vector<char> flat(bytes + 1, 0), hier(bytes + 1, 0);
            for (std::size_t i = 0; i < count; ++i) store_value(t, flat.data(), i, value(r, i, op));
            flat.back() = hier.back() = 0x5a;
            std::memcpy(hier.data(), flat.data(), bytes);
            const bool fp =
                t == DataType::Float32 || t == DataType::Float64 || t == DataType::Float16 || t == DataType::BFloat16;
            const double pre = fp ? 0.5 : 1.0, post = fp ? 4.0 : 1.0;
            allreduce(world, flat.data(), count, t, op, pre, post);
            hierarchical_allreduce(lg, cg, hier.data(), count, t, op, pre, post);
            if (flat != hier) {
              mismatches[r].push_back(
                  fmt::format("{}x{} {} {} count {}", hosts, local, dtype_name(t), reduce_op_name(op), count));
            }
          }
        }
      }
    });
    REQUIRE(errors.empty());
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r << ": " << (mismatches[r].empty() ? "" : mismatches[r][0]));
      CHECK(mismatches[r].empty());
    }
  }
}

TEST_CASE("hierarchical allgatherv equals the flat one, uneven and empty blocks", "[hierarchical]") {
  hvd::store::InMemoryStore st;
  for (auto [hosts, local] : {std::pair{2, 2}, std::pair{2, 3}, std::pair{3, 2}}) {
    const int n = hosts * local;
    auto comms = mesh(st, n, fmt::format("g{}x{}/", hosts, local));
    std::vector<int> bad(n, 0);
    auto errors = on_threads(n, [&](int r) {
      Comm& world = *comms[r];
      std::vector<int> lm, leaders;
      for (int i = 0; i < local; ++i) lm.push_back(r / local * local + i);
      for (int h = 0; h < hosts; ++h) leaders.push_back(h * local);
      GroupComm lg(world, lm);
      std::unique_ptr<GroupComm> leader_group;
      if (r % local == 0) leader_group = std::make_unique<GroupComm>(world, leaders);
      for (std::size_t scale : {std::size_t(0), std::size_t(1), std::size_t(3), std::size_t(50000)}) {
        std::vector<std::size_t> sizes(n);
        for (int q = 0; q < n; ++q) sizes[q] = (q == 1 ? 0 : scale * (q + 1) + q % 2);  // rank 1 sends nothing
        std::size_t total = 0;
        for (auto s : sizes) total += s;
        std::vector<char> mine(sizes[r]);
        for (std::size_t i = 0; i < mine.size(); ++i) mine[i] = static_cast<char>(r * 31 + i);
        std::vector<char> flat(total + 1, 0), hier(total + 1, 0);
        flat.back() = hier.back() = 0x5a;
        allgatherv(world, mine.data(), mine.size(), flat.data(), sizes);
        hierarchical_allgatherv(lg, leader_group.get(), r / local, hosts, mine.data(), mine.size(), hier.data(), sizes);
        if (flat != hier) ++bad[r];
      }
    });
    REQUIRE(errors.empty());
    for (int r = 0; r < n; ++r) CHECK(bad[r] == 0);
  }
}

TEST_CASE("Context: hierarchical settings on a fake 2 hosts x 2 ranks job run the two-level ops", "[hierarchical]") {
  for (bool on : {true, false}) {
    auto store = std::make_shared<hvd::store::InMemoryStore>();
    const int n = 4;
    std::vector<std::unique_ptr<Context>> ctx(n);
    auto errors = on_threads(n, [&](int r) {
      Settings s;
      s.rank = r;
      s.size = n;
      s.local_rank = r % 2;
      s.local_size = 2;
      s.cross_rank = r / 2;
      s.cross_size = 2;
      s.secret = "hier-ctx";
      s.start_timeout = 10s;
      s.cycle_time = std::chrono::microseconds(500);
      s.hierarchical_allreduce = on;
      s.hierarchical_allgather = on;
      ctx[r] = Context::create(s, store);
    });
    REQUIRE(errors.empty());
    std::vector<std::string> wrong(n);
    errors = on_threads(n, [&](int r) {
      Context& c = *ctx[r];
      // Two tensors fused into one allreduce, one averaged alone, one gather.
      std::vector<float> a(1001), b(33);
      for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(r + i % 5);
      for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(r * i);
      std::vector<int64_t> g(3, r);
      std::vector<float> av(7, static_cast<float>(r * 2));
      Handle ha = c.allreduce_async({"a", a.data(), a.data(), DataType::Float32, {1001}});
      Handle hb = c.allreduce_async({"b", b.data(), b.data(), DataType::Float32, {33}});
      AllreduceArgs avg{"avg", av.data(), av.data(), DataType::Float32, {7}};
      avg.op = ReduceOp::Average;
      Handle hv = c.allreduce_async(avg);
      Handle hg = c.allgather({"g", g.data(), DataType::Int64, {1, 3}, {}});
      ha.wait();
      hb.wait();
      hv.wait();
      hg.wait();
      for (std::size_t i = 0; i < a.size(); ++i) {
        if (a[i] != 6.0f + 4 * (i % 5)) wrong[r] = fmt::format("a[{}]={}", i, a[i]);
      }
      for (std::size_t i = 0; i < b.size(); ++i) {
        if (b[i] != 6.0f * i) wrong[r] = fmt::format("b[{}]={}", i, b[i]);
      }
      if (av[6] != 3.0f) wrong[r] = fmt::format("avg={}", av[6]);
      const int64_t* out = static_cast<const int64_t*>(hg.output());
      for (int q = 0; q < n * 3; ++q) {
        if (out[q] != q / 3) wrong[r] = fmt::format("gather[{}]={}", q, out[q]);
      }
    });
    REQUIRE(errors.empty());
    for (int r = 0; r < n; ++r) {
      INFO("hierarchical " << on << " rank " << r);
      CHECK(wrong[r].empty());
      const uint64_t ops = ctx[r]->stats().hierarchical_ops;
      if (on) {
        CHECK(ops >= 3);  // the fused or separate allreduces and the gather
      } else {
        CHECK(ops == 0);
      }
    }
    for (auto& c : ctx) c.reset();
  }
}
