// Process sets (docs/collective.md, "Process sets"): Contexts as threads
// over one InMemoryStore; ops on a subset of ranks, its errors, the table's
// rules (ids, duplicates, dynamic switch), static sets and elastic worlds.
#include "engine/process_sets.h"

#include "hvd/collective/context.h"
#include "hvd/store/memory_store.h"
#include "thread_job.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

using namespace hvd::collective;
using namespace std::chrono_literals;

namespace {

/// A job whose contexts negotiate every 500 µs.
class Job : public hvd_test::ThreadJob {
 public:
  Job(int n, const Settings& base) : ThreadJob(n, hvd_test::fast_cycle(base)) {}
};

Settings dynamic() {
  Settings s;
  s.dynamic_process_sets = true;
  return s;
}

/// The message of the E that f throws; anything else is a failing text.
template <typename E, typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("another exception: ") + e.what();
  }
  return "no exception";
}

template <typename T>
std::vector<T> out_of(const Handle& h) {
  const T* p = static_cast<const T*>(h.output());
  return std::vector<T>(p, p + h.output_bytes() / sizeof(T));
}

AllreduceArgs sum_of(const std::string& name, std::vector<int32_t>& v, int32_t set) {
  AllreduceArgs a{name, v.data(), v.data(), DataType::Int32, {static_cast<int64_t>(v.size())}, ReduceOp::Sum};
  a.process_set = set;
  return a;
}

}  // namespace

TEST_CASE("process sets: every op on {0,2} of 3 gives the set's result, not the global one - rank 1 is refused") {
  Job job(3, dynamic());
  job.run([&](Context& c, int r) {
    const int32_t id = c.add_process_set({2, 0});
    CHECK(id == 1);
    CHECK(c.process_set_ids() == std::vector<int32_t>{0, 1});
    CHECK(c.process_set_ranks(id) == std::vector<int>{0, 2});
    CHECK(c.process_set_size(id) == 2);
    CHECK(c.process_set_included(id) == (r != 1));
    CHECK(c.process_set_rank(kGlobalProcessSet) == r);
    if (r == 1) {
      CHECK_THAT(error_of<hvd::InvalidArgument>([&] { c.process_set_rank(id); }),
                 Catch::Contains("rank 1 is not a member of process set 1 [0, 2]"));
      std::vector<int32_t> v{1};
      CHECK_THAT(error_of<hvd::InvalidArgument>([&] { c.allreduce_async(sum_of("x", v, id)); }),
                 Catch::Contains("allreduce of tensor 'x': rank 1 is not a member of process set 1"));
      BarrierArgs b;
      b.process_set = id;
      CHECK_THROWS_AS(c.barrier_async(b), hvd::InvalidArgument);
      // The global set still works for everyone meanwhile.
      std::vector<int32_t> g{r + 1};
      c.allreduce(sum_of("global", g, kGlobalProcessSet));
      CHECK(g[0] == 6);
      return;
    }
    CHECK(c.process_set_rank(id) == r / 2);
    // allreduce: 1 + 3 on the set (the global sum would be 6); average
    // divides by the set's size.
    std::vector<int32_t> v{r + 1, 10 * (r + 1)};
    c.allreduce(sum_of("x", v, id));
    CHECK(v == std::vector<int32_t>{4, 40});
    std::vector<float> f{float(r)}, favg(1);
    AllreduceArgs avg{"avg", f.data(), favg.data(), DataType::Float32, {1}, ReduceOp::Average};
    avg.process_set = id;
    c.allreduce(avg);
    CHECK(favg[0] == Approx(1.0));  // (0 + 2) / 2
    // allgather: rows in set order, r+1 rows of value r.
    std::vector<int32_t> g(static_cast<std::size_t>(r + 1), r);
    AllgatherArgs ga{"g", g.data(), DataType::Int32, {r + 1}, {}};
    ga.process_set = id;
    Handle gh = c.allgather(ga);
    CHECK(out_of<int32_t>(gh) == std::vector<int32_t>{0, 2, 2, 2});
    // broadcast: the root is a global rank.
    std::vector<int32_t> b{r, r};
    BroadcastArgs ba{"b", b.data(), b.data(), DataType::Int32, {2}, 2};
    ba.process_set = id;
    c.broadcast(ba);
    CHECK(b == std::vector<int32_t>{2, 2});
    ba.name = "b1";
    ba.root = 1;
    CHECK_THAT(error_of<hvd::InvalidArgument>([&] { c.broadcast_async(ba); }),
               Catch::Contains("root rank 1 is not a member of process set 1"));
    // alltoall: splits per member of the set.
    std::vector<int32_t> t{100 * r, 100 * r + 1, 100 * r + 2};
    AlltoallArgs ta{"t", t.data(), DataType::Int32, {3}, {1, 2}, {}};
    ta.process_set = id;
    Handle th = c.alltoall(ta);
    CHECK(th.recv_splits() == (r == 0 ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{2, 2}));
    CHECK(out_of<int32_t>(th) == (r == 0 ? std::vector<int32_t>{0, 200} : std::vector<int32_t>{1, 2, 201, 202}));
    // reducescatter: 3 rows over 2 members -> 2 rows and 1 row.
    std::vector<int32_t> rs{1 + r, 2 + r, 3 + r};
    ReducescatterArgs ra{"rs", rs.data(), DataType::Int32, {3}, ReduceOp::Sum, 1.0, 1.0, {}};
    ra.process_set = id;
    Handle rh = c.reducescatter(ra);
    CHECK(out_of<int32_t>(rh) == (r == 0 ? std::vector<int32_t>{4, 6} : std::vector<int32_t>{8}));
    BarrierArgs bar;
    bar.process_set = id;
    c.barrier(bar);
    std::vector<int32_t> gl{r + 1};
    c.allreduce(sum_of("global", gl, kGlobalProcessSet));
    CHECK(gl[0] == 6);
  });
}

TEST_CASE("process sets: two static sets run at once - a set's ops never wait for another set's pending ones") {
  Settings s;
  s.process_sets = {{0, 1}, {1, 2}};
  Job job(3, s);
  job.run([&](Context& c, int r) {
    CHECK(c.process_set_ids() == std::vector<int32_t>{0, 1, 2});
    CHECK(c.process_set_ranks(2) == std::vector<int>{1, 2});
    // Rank 0 submits "pair" on set 1 and waits; rank 1 submits it only after
    // 20 ops with rank 2 on set 2, which run while "pair" is pending.
    std::vector<int32_t> pair{r + 1};
    Handle h;
    if (r == 0) h = c.allreduce_async(sum_of("pair", pair, 1));
    if (r >= 1) {
      for (int i = 0; i < 20; ++i) {
        std::vector<int32_t> v{r * i};
        c.allreduce(sum_of("b." + std::to_string(i), v, 2));
        CHECK(v[0] == 3 * i);
      }
    }
    if (r == 1) h = c.allreduce_async(sum_of("pair", pair, 1));
    if (r <= 1) {
      h.wait();
      CHECK(pair[0] == 3);
    }
    std::vector<int32_t> g{r + 1};
    c.allreduce(sum_of("global", g, kGlobalProcessSet));
    CHECK(g[0] == 6);
  });
}

TEST_CASE("process sets: the table's rules - ids, duplicates, bad ranks, removal, the dynamic switch") {
  SECTION("without dynamic_process_sets add and remove are refused, naming the variable") {
    Job job(2, Settings{});
    job.run([&](Context& c, int) {
      CHECK_THAT(error_of<hvd::InvalidArgument>([&] { c.add_process_set({0}); }),
                 Catch::Contains("HOROVOD_DYNAMIC_PROCESS_SETS=1"));
      CHECK_THAT(error_of<hvd::InvalidArgument>([&] { c.remove_process_set(1); }),
                 Catch::Contains("HOROVOD_DYNAMIC_PROCESS_SETS=1"));
      CHECK(c.process_set_ids() == std::vector<int32_t>{0});
    });
  }
  SECTION("bad sets fail on every rank, and the job goes on") {
    Job job(3, dynamic());
    job.run([&](Context& c, int r) {
      CHECK_THAT(error_of<hvd::InvalidArgument>([&] {
                   c.add_process_set({0, 3});
                 }),
                 Catch::Contains("rank 3 is out of range for a job of size 3"));
      CHECK_THAT(error_of<hvd::InvalidArgument>([&] {
                   c.add_process_set({1, 1});
                 }),
                 Catch::Contains("rank 1 appears more than once"));
      CHECK_THAT(error_of<hvd::InvalidArgument>([&] { c.add_process_set({}); }),
                 Catch::Contains("needs at least one rank"));
      CHECK_THAT(error_of<hvd::InvalidArgument>([&] {
                   c.add_process_set({2, 1, 0});
                 }),
                 Catch::Contains("duplicate process set: process set 0"));
      CHECK(c.add_process_set({0, 1}) == 1);
      CHECK(c.add_process_set({1, 2}) == 2);
      CHECK_THAT(error_of<hvd::InvalidArgument>([&] {
                   c.add_process_set({1, 0});
                 }),
                 Catch::Contains("duplicate process set: process set 1"));
      // Ranks that call differently all fail, naming what each called.
      CHECK_THAT(error_of<hvd::InvalidArgument>(
                     [&] { c.add_process_set(r == 0 ? std::vector<int>{0} : std::vector<int>{2}); }),
                 Catch::Contains("rank 0 called add_process_set([0]), rank 1 called "
                                 "add_process_set([2])"));
      CHECK_THAT(error_of<hvd::InvalidArgument>([&] { c.remove_process_set(0); }),
                 Catch::Contains("global process set cannot be removed"));
      CHECK_THAT(error_of<hvd::InvalidArgument>([&] { c.remove_process_set(7); }),
                 Catch::Contains("no process set has id 7"));
      // Removal frees the id (Horovod's: freed ids are reused first).
      c.remove_process_set(1);
      CHECK(c.process_set_ids() == std::vector<int32_t>{0, 2});
      std::vector<int32_t> v{1};
      CHECK_THAT(error_of<hvd::InvalidArgument>([&] { c.allreduce_async(sum_of("gone", v, 1)); }),
                 Catch::Contains("process set 1 is not registered (registered: 0, 2)"));
      CHECK(c.add_process_set({0, 2}) == 1);
      CHECK(c.add_process_set({0}) == 3);
      if (r != 1) {
        std::vector<int32_t> w{r};
        c.allreduce(sum_of("reused", w, 1));
        CHECK(w[0] == 2);
      }
      c.barrier();
    });
  }
  SECTION("removing a set fails what is still pending on it with ShutdownError") {
    Job job(3, dynamic());
    job.run([&](Context& c, int r) {
      const int32_t id = c.add_process_set({0, 1});
      CHECK(id == 1);
      Handle h;
      std::vector<int32_t> v{1};
      if (r == 0) h = c.allreduce_async(sum_of("never", v, id));
      c.remove_process_set(id);
      if (r == 0) CHECK_THROWS_AS(h.wait(), ShutdownError);
    });
  }
}

TEST_CASE("process sets: static sets - duplicates are refused, an elastic world skips the sets it cannot hold") {
  SECTION("a duplicate static set fails creation on every rank") {
    Settings s;
    s.process_sets = {{0}, {0}};
    CHECK_THAT(error_of<hvd::InvalidArgument>([&] { Job(2, s); }), Catch::Contains("duplicate process set"));
  }
  SECTION("skip_unfit: a set naming a missing rank is unregistered, its id reserved") {
    Settings s;
    s.process_sets = {{0, 3}, {0, 1}, {1}};
    s.skip_unfit_process_sets = true;
    Job job(2, s);
    job.run([&](Context& c, int r) {
      CHECK(c.process_set_ids() == std::vector<int32_t>{0, 2, 3});
      std::vector<int32_t> v{r + 1};
      CHECK_THROWS_AS(c.allreduce_async(sum_of("x", v, 1)), hvd::InvalidArgument);
      c.allreduce(sum_of("y", v, 2));  // the set of every rank of this world
      CHECK(v[0] == 3);
    });
  }
}

TEST_CASE("process sets: local and cross ranks within a set follow Horovod's definitions") {
  // Global ranks 0..5 on hosts a a b b b c; the set {1, 2, 3, 5}.
  const std::vector<std::string> hosts{"a", "a", "b", "b", "b", "c"};
  const std::vector<int> ranks{1, 2, 3, 5};
  auto topo = [&](int me) {
    detail::SetTopology t = detail::set_topology(ranks, hosts, me);
    return std::vector<int>{t.local_rank, t.local_size, t.cross_rank, t.cross_size};
  };
  CHECK(topo(0) == std::vector<int>{0, 1, 0, 3});  // rank 1: alone on a; local rank 0 on a, b, c
  CHECK(topo(1) == std::vector<int>{0, 2, 1, 3});  // rank 2: first of two on b
  CHECK(topo(2) == std::vector<int>{1, 2, 0, 1});  // rank 3: second on b, the only local rank 1
  CHECK(topo(3) == std::vector<int>{0, 1, 2, 3});  // rank 5: alone on c
}
