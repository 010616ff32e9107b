// DataType::Bool (HVD_BOOL): one byte per element, moved byte for byte by
// allgather, broadcast and alltoall (fused with other tensors too); allreduce
// and reducescatter refuse it at submission, as Horovod's library does.
#include "engine/message.h"

#include "hvd/collective/c_api.h"
#include "hvd/collective/context.h"
#include "hvd/collective/errors.h"
#include "hvd/collective/types.h"
#include "hvd/store/memory_store.h"
#include "thread_job.h"

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

// bool buffers as bytes (std::vector<bool> is packed).
using Bools = std::vector<uint8_t>;

}  // namespace

TEST_CASE("bool dtype: its value, size and name are part of the ABI") {
  STATIC_REQUIRE(static_cast<int>(DataType::Bool) == HVD_BOOL);
  STATIC_REQUIRE(HVD_BOOL == 8);
  CHECK(dtype_size(DataType::Bool) == 1);
  CHECK(std::string(dtype_name(DataType::Bool)) == "bool");
}

TEST_CASE("bool dtype: allgather, broadcast and alltoall move bool tensors on 3 ranks - reductions refuse them") {
  auto ctx = hvd_test::make_job(3, hvd_test::fast_cycle());
  hvd_test::run_on_every_rank(ctx, [](Context& c, int r) {
    // allgather: rank r holds r+1 rows of 2 elements, row i = (r+i) odd, (r+i) even.
    Bools mine;
    for (int i = 0; i <= r; ++i) {
      mine.push_back(static_cast<uint8_t>((r + i) % 2));
      mine.push_back(static_cast<uint8_t>((r + i + 1) % 2));
    }
    Handle g = c.allgather({"bool.gather", mine.data(), DataType::Bool, {r + 1, 2}, {}});
    REQUIRE(g.output_shape() == std::vector<int64_t>{6, 2});
    Bools expect;
    for (int q = 0; q < 3; ++q) {
      for (int i = 0; i <= q; ++i) {
        expect.push_back(static_cast<uint8_t>((q + i) % 2));
        expect.push_back(static_cast<uint8_t>((q + i + 1) % 2));
      }
    }
    REQUIRE(g.output_bytes() == expect.size());
    CHECK(std::memcmp(g.output(), expect.data(), expect.size()) == 0);

    // broadcast from rank 2, in place.
    Bools b = r == 2 ? Bools{1, 0, 0, 1, 1} : Bools{0, 0, 0, 0, 0};
    c.broadcast({"bool.bcast", b.data(), b.data(), DataType::Bool, {5}, 2});
    CHECK(b == Bools{1, 0, 0, 1, 1});

    // alltoall with splits: rank r sends q+1 elements to rank q, each = (r == q).
    Bools send;
    for (int q = 0; q < 3; ++q) send.insert(send.end(), q + 1, static_cast<uint8_t>(r == q));
    Handle a = c.alltoall({"bool.a2a", send.data(), DataType::Bool, {6}, {1, 2, 3}, {}});
    CHECK(a.recv_splits() == std::vector<int64_t>(3, r + 1));
    Bools got(static_cast<const uint8_t*>(a.output()), static_cast<const uint8_t*>(a.output()) + a.output_bytes());
    Bools want;
    for (int q = 0; q < 3; ++q) want.insert(want.end(), r + 1, static_cast<uint8_t>(q == r));
    CHECK(got == want);

    // Fused with a float tensor in the same cycle: both come back intact.
    Bools fb(7, static_cast<uint8_t>(r == 1));
    std::vector<float> ff(3, static_cast<float>(r));
    Handle h1 = c.broadcast_async({"bool.fused.b", fb.data(), fb.data(), DataType::Bool, {7}, 1});
    Handle h2 = c.broadcast_async({"bool.fused.f", ff.data(), ff.data(), DataType::Float32, {3}, 1});
    h1.wait();
    h2.wait();
    CHECK(fb == Bools(7, 1));
    CHECK(ff == std::vector<float>(3, 1.0f));

    // Reductions refuse bool at submission, naming the tensor.
    Bools v{1, 0};
    CHECK_THROWS_WITH(c.allreduce_async({"bool.sum", v.data(), v.data(), DataType::Bool, {2}, ReduceOp::Sum}),
                      Catch::Contains("'bool.sum'") && Catch::Contains("bool tensors cannot be reduced"));
    CHECK_THROWS_AS(c.reducescatter_async({"bool.rs", v.data(), DataType::Bool, {3}, ReduceOp::Max, 1.0, 1.0, {}}),
                    hvd::InvalidArgument);
    // ... and the job goes on.
    std::vector<int32_t> after{r};
    c.allreduce({"bool.after", after.data(), after.data(), DataType::Int32, {1}, ReduceOp::Sum});
    CHECK(after[0] == 3);
  });
}

TEST_CASE("bool dtype: a tensor submitted as bool on one rank and uint8 on another is a mismatch on every rank") {
  auto ctx = hvd_test::make_job(2, hvd_test::fast_cycle());
  hvd_test::run_on_every_rank(ctx, [](Context& c, int r) {
    Bools v(4, 1);
    Handle h = c.broadcast_async({"bool.mix", v.data(), v.data(), r == 0 ? DataType::Bool : DataType::UInt8, {4}, 0});
    CHECK_THROWS_MATCHES(h.wait(), MismatchError,
                         Catch::Message("tensor 'bool.mix' mismatch: rank 0 has bool[4], rank 1 has uint8[4]"));
  });
}

TEST_CASE("bool dtype: travels in the negotiation message - the next value is still refused") {
  RankMessage m;
  Request q;
  q.name = "b";
  q.type = OpType::Broadcast;
  q.dtype = DataType::Bool;
  q.shape = {3};
  m.requests.push_back(q);
  auto bytes = encode(m);
  RankMessage d = decode(bytes.data(), bytes.size());
  REQUIRE(d.requests.size() == 1);
  CHECK(d.requests[0] == q);
  // The one byte that differs from the same message with float64 is the dtype.
  m.requests[0].dtype = DataType::Float64;
  auto f64 = encode(m);
  REQUIRE(f64.size() == bytes.size());
  std::vector<std::size_t> diff;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != f64[i]) diff.push_back(i);
  }
  REQUIRE(diff.size() == 1);
  CHECK(bytes[diff[0]] == 8);
  // 9 is int16 (issue 27: Horovod's torch.int16); the value after it is refused.
  bytes[diff[0]] = 9;
  CHECK(decode(bytes.data(), bytes.size()).requests[0].dtype == DataType::Int16);
  bytes[diff[0]] = 10;
  CHECK_THROWS_AS(decode(bytes.data(), bytes.size()), hvd::IoError);
}

TEST_CASE("int16 dtype: its value, size and name are part of the ABI") {
  STATIC_REQUIRE(static_cast<int>(DataType::Int16) == HVD_INT16);
  STATIC_REQUIRE(HVD_INT16 == 9);
  CHECK(dtype_size(DataType::Int16) == 2);
  CHECK(std::string(dtype_name(DataType::Int16)) == "int16");
}
