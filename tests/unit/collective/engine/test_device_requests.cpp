// Operations on device buffers, host side (docs/cuda.md, "Operations on
// device buffers"): the device travels in the negotiation message, host and
// device buffers for one tensor are a mismatch on every rank, a library
// without the CUDA component refuses device buffers on every rank, and
// fusion never mixes devices. No GPU: the mismatch and "not built" paths
// fail before any memory is touched, so host pointers stand in for device
// buffers.
#include "engine/controller.h"
#include "engine/fusion.h"
#include "engine/message.h"

#include "hvd/collective/context.h"
#include "hvd/collective/cuda.h"
#include "hvd/store/memory_store.h"
#include "thread_job.h"

#include <catch2/catch.hpp>

#include <future>
#include <string>
#include <thread>
#include <vector>

using namespace hvd::collective;
using namespace hvd::collective::detail;
using namespace std::chrono_literals;

namespace {

Request device_req(const std::string& name, int64_t elems, int32_t device, DataType dtype = DataType::Float32) {
  Request q;
  q.name = name;
  q.type = OpType::Allreduce;
  q.dtype = dtype;
  q.shape = {elems};
  q.device = device;
  return q;
}

std::vector<Controller> controllers(int n, bool device_buffers) {
  std::vector<Controller> ctl;
  for (int r = 0; r < n; ++r) ctl.emplace_back(ControllerOptions{r, n, 1024, 64u << 20, device_buffers});
  return ctl;
}

/// One negotiation cycle through the wire encoding; rank r announces fresh[r].
std::vector<Controller::Outcome> cycle(std::vector<Controller>& ctl, const std::vector<std::vector<Request>>& fresh) {
  std::vector<RankMessage> msgs;
  for (std::size_t r = 0; r < ctl.size(); ++r) {
    auto bytes = encode(ctl[r].make_message(fresh[r], false, {}));
    msgs.push_back(decode(bytes.data(), bytes.size()));
  }
  std::vector<Controller::Outcome> out;
  for (auto& c : ctl) out.push_back(c.process(msgs, hvd::Clock::now()));
  return out;
}

Response ready(std::vector<Request> per_rank) {
  Response r;
  r.type = OpType::Allreduce;
  r.tensors.push_back(std::move(per_rank));
  return r;
}

}  // namespace

TEST_CASE("device: the device travels in the negotiation message and counts in request equality") {
  RankMessage m;
  m.requests = {device_req("on.gpu3", 4, 3), device_req("on.host", 4, kHostDevice)};
  auto bytes = encode(m);
  RankMessage d = decode(bytes.data(), bytes.size());
  REQUIRE(d.requests.size() == 2);
  CHECK(d.requests[0].device == 3);
  CHECK(d.requests[1].device == -1);
  CHECK(d.requests[0] == m.requests[0]);
  CHECK(device_req("t", 4, 0) != device_req("t", 4, -1));
  CHECK(device_req("t", 4, 0) != device_req("t", 4, 1));
}

TEST_CASE("device: messages of another protocol version or with a bad device are refused") {
  RankMessage m;
  m.requests = {device_req("x", 4, 0)};
  auto bytes = encode(m);
  auto old = bytes;
  old[0] = 1;  // version 1 had no device field
  CHECK_THROWS_WITH(decode(old.data(), old.size()), Catch::Contains("protocol version 1 (expected 3)"));
  old[0] = 2;  // version 2 had no join
  CHECK_THROWS_WITH(decode(old.data(), old.size()), Catch::Contains("protocol version 2 (expected 3)"));
  // The device is the request's last field: the 4 bytes before the
  // cache-hit bitset length and the stalled count (two empty u32s).
  auto bad = bytes;
  const std::size_t at = bad.size() - 8 - 4;
  bad[at] = 0xfe;  // -2 as little-endian int32
  bad[at + 1] = bad[at + 2] = bad[at + 3] = 0xff;
  CHECK_THROWS_WITH(decode(bad.data(), bad.size()), Catch::Contains("bad device -2"));
}

TEST_CASE("device: host and device buffers for one tensor are a mismatch naming the ranks, on every rank") {
  auto ctl = controllers(3, true);
  auto out = cycle(ctl, {{device_req("g", 8, 0)}, {device_req("g", 8, kHostDevice)}, {device_req("g", 8, 1)}});
  for (auto& o : out) {
    REQUIRE(o.responses.size() == 1);
    CHECK(o.responses[0].error == ResponseError::Mismatch);
    CHECK(o.responses[0].message == "tensor 'g' mismatch: ranks 0,2 passed device buffers, rank 1 passed host buffers");
  }
  // Different devices per rank are fine (each rank its own GPU).
  out = cycle(ctl, {{device_req("h", 8, 0)}, {device_req("h", 8, 1)}, {device_req("h", 8, 2)}});
  for (auto& o : out) {
    REQUIRE(o.responses.size() == 1);
    CHECK(o.responses[0].ok());
  }
  // Other mismatches are still reported first.
  out = cycle(ctl, {{device_req("k", 8, 0)}, {device_req("k", 9, kHostDevice)}, {device_req("k", 8, 0)}});
  CHECK(out[1].responses[0].message == "tensor 'k' mismatch: ranks 0,2 have float32[8], rank 1 has float32[9]");
}

TEST_CASE("device: without the CUDA component device buffers fail on every rank as unsupported") {
  auto ctl = controllers(2, false);
  auto out = cycle(ctl, {{device_req("g", 8, 0), device_req("host", 8, kHostDevice)},
                         {device_req("g", 8, 0), device_req("host", 8, kHostDevice)}});
  for (auto& o : out) {
    REQUIRE(o.responses.size() == 2);
    CHECK(o.responses[0].error == ResponseError::Unsupported);
    CHECK_THAT(o.responses[0].message, Catch::StartsWith("tensor 'g': every rank passed CUDA device buffers, but "
                                                         "this hvd_collective was built without the CUDA component"));
    CHECK(o.responses[1].ok());
  }
  // A mixed tensor is a mismatch first (the ranks disagree whatever was built).
  out = cycle(ctl, {{device_req("m", 8, 0)}, {device_req("m", 8, kHostDevice)}});
  CHECK(out[0].responses[0].error == ResponseError::Mismatch);
}

TEST_CASE("device: the response cache keeps host and device submissions of one name apart") {
  auto ctl = controllers(2, true);
  cycle(ctl, {{device_req("w", 8, kHostDevice)}, {device_req("w", 8, kHostDevice)}});
  // Same name, now on device 0 on rank 0: must be announced in full, and
  // then it is a mismatch (rank 1 still host).
  RankMessage m = ctl[0].make_message({device_req("w", 8, 0)}, false, {});
  CHECK(m.cache_hits.empty());
  CHECK(m.requests.size() == 1);
  auto out = cycle(ctl, {{device_req("w", 8, 0)}, {device_req("w", 8, kHostDevice)}});
  CHECK(out[0].responses[0].error == ResponseError::Mismatch);
}

TEST_CASE("device: fusion groups only tensors on the same memory of every rank, counting device padding") {
  std::vector<Response> list;
  list.push_back(ready({device_req("a", 3, 0), device_req("a", 3, 1)}));  // 12 B -> 16
  list.push_back(ready({device_req("b", 4, kHostDevice), device_req("b", 4, kHostDevice)}));  // host
  list.push_back(ready({device_req("c", 3, 0), device_req("c", 3, 0)}));  // rank 1 differs
  list.push_back(ready({device_req("d", 1, 0), device_req("d", 1, 1)}));  // 4 B -> 16
  list.push_back(ready({device_req("e", 3, 1), device_req("e", 3, 1)}));  // rank 0 differs
  list.push_back(ready({device_req("f", 4, kHostDevice), device_req("f", 4, kHostDevice)}));  // host
  list.push_back(ready({device_req("g", 1, 0), device_req("g", 1, 1)}));  // 16 B more: over 40
  auto groups = plan_fusion(list, 40);
  REQUIRE(groups.size() == 5);
  REQUIRE(groups[0].tensors.size() == 2);  // a + d: 32 of 40 bytes after padding (raw: 16)
  CHECK(groups[0].name(1) == "d");
  REQUIRE(groups[1].tensors.size() == 2);  // b + f: host with host
  CHECK(groups[1].name(1) == "f");
  CHECK(groups[2].name() == "c");  // alone: no later tensor is on device 0 of both ranks
  CHECK(groups[2].tensors.size() == 1);
  CHECK(groups[3].name() == "e");
  CHECK(groups[4].name() == "g");  // a's devices, but no room left in a's group
  CHECK(fusion_bytes(device_req("x", 3, 0)) == 16);
  CHECK(fusion_bytes(device_req("x", 3, kHostDevice)) == 12);
  CHECK(fusion_bytes(device_req("x", 0, 0)) == 0);
}

TEST_CASE("device: ranks passing device and host buffers fail alike on every rank, nothing is touched") {
  auto ctx = hvd_test::make_job(3, hvd_test::fast_cycle());
  hvd_test::run_on_every_rank(ctx, [&](Context& c, int r) {
    // Rank 1 claims device 0; its "device buffer" is host memory that must
    // never be touched: the mismatch is found in negotiation.
    std::vector<float> v(6, 1.0f);
    AllreduceArgs a{"grad", v.data(), v.data(), DataType::Float32, {6}};
    if (r == 1) a.device = 0;
    CHECK_THROWS_MATCHES(c.allreduce(a), MismatchError,
                         Catch::Message("tensor 'grad' mismatch: ranks 0,2 passed host buffers, rank 1 passed device "
                                        "buffers"));
    CHECK(v[0] == 1.0f);
    BroadcastArgs b{"bcast", v.data(), v.data(), DataType::Float32, {6}, 0};
    if (r != 0) b.device = r;
    CHECK_THROWS_AS(c.broadcast(b), MismatchError);
    // The job goes on; kAutoDevice on host memory is host memory.
    std::vector<float> ok(4, float(r));
    c.allreduce({"grad", ok.data(), ok.data(), DataType::Float32, {4}, ReduceOp::Sum, 1.0, 1.0, kAutoDevice});
    CHECK(ok[3] == 3.0f);
    CHECK_FALSE(c.failed());
  });
}

TEST_CASE("device: allgather, alltoall and reducescatter with device buffers on some ranks only fail on every rank") {
  auto ctx = hvd_test::make_job(3, hvd_test::fast_cycle());
  hvd_test::run_on_every_rank(ctx, [&](Context& c, int r) {
    // Rank 2's "device buffer" is host memory that must never be touched,
    // and its allocator must never be called: the mismatch is found in
    // negotiation.
    std::vector<float> v(6, float(r));
    int allocations = 0;
    Allocator alloc = [&](const std::vector<int64_t>&, std::size_t) -> void* {
      ++allocations;
      return nullptr;
    };
    const int32_t dev = r == 2 ? 0 : kHostDevice;
    AllgatherArgs g{"gather", v.data(), DataType::Float32, {2, 3}, alloc};
    g.device = dev;
    CHECK_THROWS_MATCHES(c.allgather(g), MismatchError,
                         Catch::Message("tensor 'gather' mismatch: ranks 0,1 passed host buffers, rank 2 passed device "
                                        "buffers"));
    AlltoallArgs t{"a2a", v.data(), DataType::Float32, {6}, {}, alloc};
    t.device = dev;
    CHECK_THROWS_AS(c.alltoall(t), MismatchError);
    ReducescatterArgs s{"rs", v.data(), DataType::Float32, {6}, ReduceOp::Sum, 1.0, 1.0, alloc};
    s.device = dev;
    CHECK_THROWS_AS(c.reducescatter(s), MismatchError);
    CHECK(allocations == 0);
    CHECK(v[5] == float(r));
    // The job goes on: the same operations on host memory (kAutoDevice on
    // host memory is host memory).
    g.device = kAutoDevice;
    g.allocator = nullptr;
    Handle h = c.allgather(g);
    CHECK(h.output_device() == -1);
    CHECK(h.output_shape() == std::vector<int64_t>{6, 3});
    CHECK(static_cast<const float*>(h.output())[17] == 2.0f);
    CHECK_FALSE(c.failed());
  });
}

TEST_CASE("device: argument errors about devices are reported at submission") {
  auto ctx = hvd_test::make_job(1, hvd_test::fast_cycle());
  std::vector<float> v(4);
  AllreduceArgs a{"x", v.data(), v.data(), DataType::Float32, {4}};
  a.device = -3;
  CHECK_THROWS_WITH(ctx[0]->allreduce_async(a), Catch::Contains("device -3 is not valid"));
  AllgatherArgs g{"g", v.data(), DataType::Float32, {4}, {}};
  g.device = -5;
  CHECK_THROWS_WITH(ctx[0]->allgather_async(g), Catch::Contains("device -5 is not valid"));
  ReducescatterArgs s{"s", v.data(), DataType::Float32, {4}, ReduceOp::Sum, 1.0, 1.0, {}};
  s.device = -4;
  CHECK_THROWS_WITH(ctx[0]->reducescatter_async(s), Catch::Contains("device -4 is not valid"));
  // kAutoDevice with no pointer (an empty tensor on this rank): refused
  // where the library could probe (a guess could mismatch the other
  // ranks); host memory where it cannot (no CUDA component).
  AllgatherArgs empty{"empty", nullptr, DataType::Float32, {0}, {}};
  empty.device = kAutoDevice;
  if (cuda::cuda_built()) {
    CHECK_THROWS_WITH(ctx[0]->allgather_async(empty),
                      Catch::Contains("kAutoDevice cannot tell where a null buffer is"));
  } else {
    Handle h = ctx[0]->allgather(empty);
    CHECK(h.output_device() == -1);
  }
}

TEST_CASE("device: a library built without CUDA refuses device buffers on every rank - the job goes on") {
  if (cuda::cuda_built()) {
    WARN("built with the CUDA component: the refusal is covered by the Controller test above");
    return;
  }
  auto ctx = hvd_test::make_job(2, hvd_test::fast_cycle());
  hvd_test::run_on_every_rank(ctx, [&](Context& c, int r) {
    std::vector<float> v(4, 1.0f);
    AllreduceArgs a{"dev", v.data(), v.data(), DataType::Float32, {4}};
    a.device = r;
    CHECK_THROWS_MATCHES(c.allreduce(a), hvd::InvalidArgument,
                         Catch::Predicate<hvd::InvalidArgument>([](const hvd::InvalidArgument& e) {
                           return std::string(e.what()).find("built without the CUDA component") != std::string::npos &&
                                  dynamic_cast<const MismatchError*>(&e) == nullptr;
                         }));
    CHECK(v[0] == 1.0f);
    AllgatherArgs g{"dev.gather", v.data(), DataType::Float32, {4}, {}};
    g.device = r;
    CHECK_THROWS_WITH(c.allgather(g), Catch::Contains("built without the CUDA component"));
    AlltoallArgs t{"dev.a2a", v.data(), DataType::Float32, {4}, {}, {}};
    t.device = 0;
    CHECK_THROWS_WITH(c.alltoall(t), Catch::Contains("built without the CUDA component"));
    ReducescatterArgs s{"dev.rs", v.data(), DataType::Float32, {4}, ReduceOp::Sum, 1.0, 1.0, {}};
    s.device = 0;
    CHECK_THROWS_WITH(c.reducescatter(s), Catch::Contains("built without the CUDA component"));
    c.allreduce({"host", v.data(), v.data(), DataType::Float32, {4}});
    CHECK(v[0] == 2.0f);
  });
}

TEST_CASE("device: CUDA built but no device - every rank fails with a clear error, no crash or hang") {
  if (!cuda::cuda_built() || cuda::device_count() > 0) {
    WARN("needs a CUDA build on a machine without a GPU (the gpu tests cover the other case)");
    return;
  }
  auto ctx = hvd_test::make_job(2, hvd_test::fast_cycle());
  hvd_test::run_on_every_rank(ctx, [&](Context& c, int r) {
    std::vector<float> v(4, 1.0f);
    AllreduceArgs a{"dev", v.data(), v.data(), DataType::Float32, {4}};
    a.device = 0;
    CHECK_THROWS_AS(c.allreduce(a), hvd::Error);
    CHECK(c.failed());
  });
}

TEST_CASE("device: CUDA built but no device - a device allgather fails every rank, the allocator is never called") {
  if (!cuda::cuda_built() || cuda::device_count() > 0) {
    WARN("needs a CUDA build on a machine without a GPU (the gpu tests cover the other case)");
    return;
  }
  for (OpType type : {OpType::Allgather, OpType::Alltoall, OpType::Reducescatter}) {
    auto ctx = hvd_test::make_job(2, hvd_test::fast_cycle());
    hvd_test::run_on_every_rank(ctx, [&](Context& c, int r) {
      std::vector<float> v(4, 1.0f);
      bool allocated = false;
      Allocator alloc = [&](const std::vector<int64_t>&, std::size_t) -> void* {
        allocated = true;
        return nullptr;
      };
      const auto start = std::chrono::steady_clock::now();
      if (type == OpType::Allgather) {
        AllgatherArgs g{"g", v.data(), DataType::Float32, {4}, alloc};
        g.device = 0;
        CHECK_THROWS_AS(c.allgather(g), hvd::Error);
      } else if (type == OpType::Alltoall) {
        AlltoallArgs t{"t", v.data(), DataType::Float32, {4}, {}, alloc};
        t.device = 0;
        CHECK_THROWS_AS(c.alltoall(t), hvd::Error);
      } else {
        ReducescatterArgs s{"s", v.data(), DataType::Float32, {4}, ReduceOp::Sum, 1.0, 1.0, alloc};
        s.device = 0;
        CHECK_THROWS_AS(c.reducescatter(s), hvd::Error);
      }
      CHECK(std::chrono::steady_clock::now() - start < 8s);  // the peer's failure, not its timeout
      CHECK_FALSE(allocated);
      CHECK(c.failed());
      (void)r;
    });
  }
}
