// Static process sets across elastic worlds (docs/elastic.md, "Process
// sets"): every world's Context registers them again with the same ids; a
// set naming a rank the world lacks stays unregistered until a world has it.
#include "elastic_fixture.h"
#include "hvd/collective/context.h"
#include "hvd/collective/elastic_member.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <future>
#include <thread>

using namespace hvd;
using namespace hvd::elastic;
using namespace hvd::elastic::testing;
using namespace std::chrono_literals;

namespace {

int64_t sum_on(collective::Context& ctx, int32_t set, int64_t value) {
  collective::AllreduceArgs a{"sum", &value, &value, collective::DataType::Int64, {1}, collective::ReduceOp::Sum};
  a.process_set = set;
  ctx.allreduce(a);
  return value;
}

MemberOptions with_sets(MemberOptions o) {
  // What hvd::init(process_sets) gives an elastic job.
  o.settings.process_sets = {{1}, {0, 1}};
  o.settings.skip_unfit_process_sets = true;
  return o;
}

}  // namespace

TEST_CASE("elastic static process sets are registered again in every world, with the same ids", "[elastic][psets]") {
  FakeDriver driver;
  driver.publish(1, {"a"});
  ElasticMember ma(with_sets(driver.options("a"))), mb(with_sets(driver.options("b")));
  ma.join();
  // World 1 has one rank: neither set fits ({0,1} names rank 1 too).
  CHECK(ma.context().process_set_ids() == std::vector<int32_t>{0});
  CHECK_THROWS_AS(sum_on(ma.context(), 2, 1), InvalidArgument);

  auto jb = std::async(std::launch::async, [&] { mb.join(); });
  const auto end = std::chrono::steady_clock::now() + 5s;
  while (!driver.store().try_get(store::elastic::ready_key("b")) && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(5ms);
  }
  driver.publish(2, {"a", "b"});
  while (!ma.hosts_updated() && std::chrono::steady_clock::now() < end) std::this_thread::sleep_for(5ms);
  ma.reset();
  REQUIRE(jb.wait_for(10s) == std::future_status::ready);
  jb.get();
  // World 2: both sets, ids 1 and 2 as given; {0,1} is every rank now.
  for (ElasticMember* m : {&ma, &mb}) {
    CHECK(m->context().process_set_ids() == std::vector<int32_t>{0, 1, 2});
    CHECK(m->context().process_set_ranks(1) == std::vector<int>{1});
  }
  auto sb = std::async(std::launch::async,
                       [&] { return std::make_pair(sum_on(mb.context(), 1, 5), sum_on(mb.context(), 2, 20)); });
  CHECK_THROWS_AS(sum_on(ma.context(), 1, 1), InvalidArgument);  // rank 0 is not in {1}
  CHECK(sum_on(ma.context(), 2, 10) == 30);
  const auto b = sb.get();
  CHECK(b.first == 5);
  CHECK(b.second == 30);
  ma.close();
  mb.close();
}
