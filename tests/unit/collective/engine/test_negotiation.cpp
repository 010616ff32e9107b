// Pure negotiation logic: wire encoding, message table, validation messages,
// response cache and fusion planning -- no sockets, no threads.
#include "engine/controller.h"
#include "engine/fusion.h"
#include "engine/message.h"
#include "engine/response_cache.h"
#include "engine/stall_inspector.h"

#include "hvd/common/error.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace hvd::collective;
using namespace hvd::collective::detail;

namespace {

Request allreduce_req(const std::string& name, std::vector<int64_t> shape, DataType dtype = DataType::Float32) {
  Request q;
  q.name = name;
  q.type = OpType::Allreduce;
  q.dtype = dtype;
  q.shape = std::move(shape);
  return q;
}

/// Runs one cycle on `n` controllers whose ranks announce `fresh[r]`.
std::vector<Controller::Outcome> cycle(std::vector<Controller>& ctl, const std::vector<std::vector<Request>>& fresh,
                                       std::vector<std::string> stalled = {}) {
  std::vector<RankMessage> msgs;
  for (std::size_t r = 0; r < ctl.size(); ++r) {
    RankMessage m = ctl[r].make_message(fresh[r], false, r == 0 ? stalled : std::vector<std::string>{});
    auto bytes = encode(m);
    msgs.push_back(decode(bytes.data(), bytes.size()));
  }
  std::vector<Controller::Outcome> out;
  for (auto& c : ctl) out.push_back(c.process(msgs, hvd::Clock::now()));
  return out;
}

std::vector<Controller> make_controllers(int n, std::size_t cache = 1024, std::size_t fusion = 64u << 20) {
  std::vector<Controller> ctl;
  for (int r = 0; r < n; ++r) ctl.emplace_back(ControllerOptions{r, n, cache, fusion});
  return ctl;
}

}  // namespace

TEST_CASE("message: encode/decode round trip keeps every field") {
  RankMessage m;
  m.shutdown = true;
  Request q = allreduce_req("grad/w", {3, 4}, DataType::BFloat16);
  q.op = ReduceOp::Max;
  q.prescale = 0.5;
  q.postscale = 2.0;
  q.root = 3;
  q.splits = {1, 2};
  m.requests.push_back(q);
  m.cache_hits = {0, 7, 8, 1000};
  m.stalled = {"a", "b"};
  auto bytes = encode(m);
  RankMessage d = decode(bytes.data(), bytes.size());
  CHECK(d.shutdown);
  REQUIRE(d.requests.size() == 1);
  CHECK(d.requests[0] == q);
  CHECK(d.cache_hits == std::vector<uint32_t>{0, 7, 8, 1000});
  CHECK(d.stalled == std::vector<std::string>{"a", "b"});
}

TEST_CASE("message: garbage and truncated messages raise IoError, never crash") {
  RankMessage m;
  m.requests.push_back(allreduce_req("x", {5}));
  auto bytes = encode(m);
  for (std::size_t cut = 0; cut < bytes.size(); ++cut) {
    CHECK_THROWS_AS(decode(bytes.data(), cut), hvd::IoError);
  }
  std::vector<uint8_t> junk(64, 0xff);
  CHECK_THROWS_AS(decode(junk.data(), junk.size()), hvd::IoError);
  auto extra = bytes;
  extra.push_back(0);
  CHECK_THROWS_AS(decode(extra.data(), extra.size()), hvd::IoError);
}

TEST_CASE("controller: a tensor is ready only once every rank announced it, in one order everywhere") {
  auto ctl = make_controllers(3);
  auto a = allreduce_req("a", {4});
  auto b = allreduce_req("b", {4}, DataType::Int32);
  auto out = cycle(ctl, {{a, b}, {b}, {}});
  for (auto& o : out) CHECK(o.responses.empty());
  CHECK(ctl[0].pending().size() == 2);
  out = cycle(ctl, {{}, {a}, {b, a}});
  for (auto& o : out) {
    REQUIRE(o.responses.size() == 2);
    // b completed (rank 2 announced b first) before a.
    CHECK(o.responses[0].name() == "b");
    CHECK(o.responses[1].name() == "a");
  }
  CHECK(ctl[1].pending().empty());
}

TEST_CASE("controller: mismatches name the tensor and the disagreeing ranks") {
  auto ctl = make_controllers(3);
  SECTION("shape") {
    auto out = cycle(
        ctl, {{allreduce_req("grad.w", {4, 4})}, {allreduce_req("grad.w", {4, 5})}, {allreduce_req("grad.w", {4, 4})}});
    for (auto& o : out) {
      REQUIRE(o.responses.size() == 1);
      CHECK(o.responses[0].error == ResponseError::Mismatch);
      CHECK(o.responses[0].message == "tensor 'grad.w' mismatch: ranks 0,2 have float32[4,4], rank 1 has float32[4,5]");
    }
  }
  SECTION("dtype") {
    auto out = cycle(
        ctl, {{allreduce_req("t", {2}, DataType::Float64)}, {allreduce_req("t", {2})}, {allreduce_req("t", {2})}});
    CHECK(out[2].responses[0].message == "tensor 't' mismatch: rank 0 has float64[2], ranks 1,2 have float32[2]");
  }
  SECTION("reduce op") {
    auto q = allreduce_req("t", {2});
    auto m = q;
    m.op = ReduceOp::Max;
    auto out = cycle(ctl, {{q}, {q}, {m}});
    CHECK(out[0].responses[0].message == "tensor 't' mismatch: ranks 0,1 use op sum, rank 2 uses op max");
  }
  SECTION("op type") {
    auto q = allreduce_req("t", {2});
    auto g = q;
    g.type = OpType::Allgather;
    auto out = cycle(ctl, {{q}, {g}, {q}});
    CHECK(out[1].responses[0].message == "tensor 't' mismatch: ranks 0,2 submit allreduce, rank 1 submits allgather");
  }
  SECTION("allgather may differ in the first dimension only") {
    auto g = allreduce_req("g", {2, 3});
    g.type = OpType::Allgather;
    auto g1 = g;
    g1.shape = {7, 3};
    auto out = cycle(ctl, {{g}, {g1}, {g}});
    CHECK(out[0].responses[0].ok());
    auto g2 = g;
    g2.shape = {2, 4};
    out = cycle(ctl, {{g}, {g}, {g2}});
    CHECK(out[0].responses[0].message == "tensor 'g' mismatch: ranks 0,1 have float32[2,3], rank 2 has float32[2,4]");
  }
}

TEST_CASE("response cache: repeats travel as bits and decode to the same requests") {
  auto ctl = make_controllers(2);
  auto q = allreduce_req("w", {8});
  auto out = cycle(ctl, {{q}, {q}});
  REQUIRE(out[0].responses.size() == 1);
  CHECK(ctl[0].stats().cache_misses == 1);
  // Second time: a cache bit instead of the full request.
  RankMessage m = ctl[0].make_message({q}, false, {});
  CHECK(m.requests.empty());
  CHECK(m.cache_hits.size() == 1);
  RankMessage m1 = ctl[1].make_message({q}, false, {});
  for (auto& c : ctl) {
    auto o = c.process({m, m1}, hvd::Clock::now());
    REQUIRE(o.responses.size() == 1);
    CHECK(o.responses[0].tensors[0][1] == q);
  }
  // A changed request for the same name is sent in full and replaces the entry.
  auto q2 = allreduce_req("w", {9});
  RankMessage full = ctl[0].make_message({q2}, false, {});
  CHECK(full.requests.size() == 1);
}

TEST_CASE("response cache: capacity bounds entries and evicts the least recently used") {
  ResponseCache cache(2);
  auto t = [](const std::string& n) { return TensorRequests{allreduce_req(n, {1})}; };
  cache.put(t("a"));
  cache.put(t("b"));
  cache.put(t("a"));  // a is now most recent
  cache.put(t("c"));  // evicts b
  CHECK(cache.size() == 2);
  CHECK(cache.lookup(allreduce_req("a", {1}), 0).has_value());
  CHECK_FALSE(cache.lookup(allreduce_req("b", {1}), 0).has_value());
  CHECK(cache.lookup(allreduce_req("c", {1}), 0).has_value());
  CHECK_THROWS_AS(cache.get(99), hvd::IoError);
  ResponseCache off(0);
  off.put(t("a"));
  CHECK_FALSE(off.lookup(allreduce_req("a", {1}), 0).has_value());
}

TEST_CASE("fusion: compatible allreduces are grouped up to the threshold") {
  std::vector<Response> ready;
  auto add = [&](const std::string& n, int64_t elems, DataType dt) {
    Response r;
    r.type = OpType::Allreduce;
    r.tensors.push_back({allreduce_req(n, {elems}, dt)});
    ready.push_back(r);
  };
  add("a", 10, DataType::Float32);  // 40 B
  add("b", 10, DataType::Float64);  // 80 B, other dtype
  add("c", 10, DataType::Float32);  // 40 B
  add("d", 100, DataType::Float32);  // 400 B: over the threshold with a+c
  add("e", 5, DataType::Float32);  // 20 B
  auto groups = plan_fusion(ready, 100);
  REQUIRE(groups.size() == 3);
  CHECK(groups[0].tensors.size() == 3);  // a, c, e
  CHECK(groups[0].name(1) == "c");
  CHECK(groups[0].name(2) == "e");
  CHECK(groups[1].name() == "b");
  CHECK(groups[2].name() == "d");
}

TEST_CASE("stall inspector: warns naming missing ranks, then fails past the shutdown time") {
  StallInspector si(StallOptions{true, std::chrono::milliseconds(100), std::chrono::milliseconds(1000)});
  auto t0 = hvd::Clock::now();
  std::vector<PendingTensor> pending{{"lonely", {0, 1}, {2, 3}, t0}};
  CHECK(si.check(pending, t0 + std::chrono::milliseconds(50)).warnings.empty());
  auto r = si.check(pending, t0 + std::chrono::milliseconds(150));
  REQUIRE(r.warnings.size() == 1);
  CHECK_THAT(r.warnings[0],
             Catch::Contains("'lonely'") && Catch::Contains("ranks 0,1") && Catch::Contains("ranks 2,3"));
  CHECK(si.check(pending, t0 + std::chrono::milliseconds(160)).warnings.empty());  // rate-limited
  CHECK(si.check(pending, t0 + std::chrono::milliseconds(1100)).to_fail == std::vector<std::string>{"lonely"});
}

TEST_CASE("controller: join - joined ranks complete the others' allreduces with made-up requests") {
  auto ctl = make_controllers(3);
  Request join;
  join.name = kJoinName;
  join.type = OpType::Join;
  join.dtype = DataType::UInt8;
  join.shape = {0};
  auto g = allreduce_req("g", {5});
  // Rank 2 joins; ranks 0 and 1 submit g in different cycles.
  auto out = cycle(ctl, {{}, {g}, {join}});
  for (auto& o : out) CHECK(o.responses.empty());
  out = cycle(ctl, {{g}, {}, {}});
  for (auto& o : out) {
    REQUIRE(o.responses.size() == 1);
    const Response& r = o.responses[0];
    REQUIRE(r.ok());
    CHECK(r.name() == "g");
    CHECK_FALSE(r.tensors[0][0].joined);
    CHECK_FALSE(r.tensors[0][1].joined);
    CHECK(r.tensors[0][2].joined);
    CHECK(r.tensors[0][2].shape == std::vector<int64_t>{5});
  }
  // A made-up response is never cached: the next g travels in full again.
  CHECK(ctl[0].cache().size() == 0);
  // A barrier completes too, with a made-up request for the joined rank
  // (which takes part from inside its join), as in Horovod.
  Request bar;
  bar.name = "barrier.1";
  bar.type = OpType::Barrier;
  bar.dtype = DataType::UInt8;
  bar.shape = {0};
  out = cycle(ctl, {{bar}, {bar}, {}});
  for (auto& o : out) {
    REQUIRE(o.responses.size() == 1);
    REQUIRE(o.responses[0].ok());
    CHECK(o.responses[0].type == OpType::Barrier);
    CHECK(o.responses[0].tensors[0][2].joined);
  }
  // Anything else but an allreduce of host buffers fails on every rank while
  // a rank has joined.
  Request b;
  b.name = "bcast";
  b.type = OpType::Broadcast;
  b.shape = {3};
  out = cycle(ctl, {{b}, {b}, {}});
  for (auto& o : out) {
    REQUIRE(o.responses.size() == 1);
    CHECK(o.responses[0].error == ResponseError::Joined);
    CHECK(o.responses[0].message ==
          "tensor 'bcast': rank 2 has joined (join()); until every rank joins, only allreduce of host buffers and barrier can run");
  }
  // Rank 0 joins, then rank 1: the join completes last in its cycle, after
  // rank 1's own allreduce, and names rank 1 as the last to join.
  out = cycle(ctl, {{join}, {}, {}});
  for (auto& o : out) CHECK(o.responses.empty());
  auto h = allreduce_req("h", {2});
  out = cycle(ctl, {{}, {h, join}, {}});
  for (auto& o : out) {
    REQUIRE(o.responses.size() == 2);
    CHECK(o.responses[0].name() == "h");
    CHECK(o.responses[0].tensors[0][0].joined);
    CHECK_FALSE(o.responses[0].tensors[0][1].joined);
    CHECK(o.responses[1].type == OpType::Join);
    CHECK(o.responses[1].last_joined == 1);
  }
  CHECK(ctl[0].pending().empty());
  // After the join every rank must submit again.
  out = cycle(ctl, {{g}, {g}, {}});
  for (auto& o : out) CHECK(o.responses.empty());
}
