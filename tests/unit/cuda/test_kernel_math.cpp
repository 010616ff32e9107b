// The reduce kernel's arithmetic on the CPU: emulate_reduce_on_host() runs the
// kernel's own __host__ __device__ element code (vector body and scalar
// tail), so every dtype x op x input count x alignment is checked against
// the float64 reference without a GPU. tests/integration/cuda repeats this
// on a device.
#include "kernels.h"
#include "reference.h"

#include <catch2/catch.hpp>

#include <memory>

using namespace hvd::collective;
using namespace hvd::collective::testref;
using hvd::collective::cuda::detail::ReduceLaunch;

namespace {

/// 16-byte aligned host storage with room for a misalignment and the guard.
struct HostBuffer {
  explicit HostBuffer(std::size_t bytes) : storage(new uint8_t[bytes + 32]) {
    base = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(storage.get()) + 15) & ~uintptr_t{15});
  }
  std::unique_ptr<uint8_t[]> storage;
  uint8_t* base;
};

/// n random inputs of `count` elements at element offset `misalign`, in
/// buffers appended to `bufs`, set as l.inputs[0..n); returns their host
/// copies for the reference.
std::vector<Tensor> fill_inputs(ReduceLaunch& l, std::vector<std::unique_ptr<HostBuffer>>& bufs, DataType t,
                                ReduceOp op, int n, std::size_t count, int misalign, uint64_t seed) {
  const std::size_t es = ref_size(t);
  std::vector<Tensor> host;
  for (int j = 0; j < n; ++j) {
    host.push_back(random_tensor(t, op, count, seed + j));
    bufs.push_back(std::make_unique<HostBuffer>((count + kGuard + 1) * es));
    uint8_t* p = bufs.back()->base + misalign * es;
    std::memcpy(p, host.back().bytes.data(), count * es);
    l.inputs[j] = p;
  }
  return host;
}

std::string run_case(DataType t, ReduceOp op, int n, std::size_t count, int misalign, bool alias, double pre,
                     double post, uint64_t seed, int unroll = 1) {
  const std::size_t es = ref_size(t);
  std::vector<std::unique_ptr<HostBuffer>> bufs;
  ReduceLaunch l;
  std::vector<Tensor> host = fill_inputs(l, bufs, t, op, n, count, misalign, seed);
  HostBuffer out_buf((count + kGuard + 1) * es);
  uint8_t* out = alias ? static_cast<uint8_t*>(const_cast<void*>(l.inputs[0])) : out_buf.base + misalign * es;
  if (!alias) {
    const auto poison = poison_bytes(t, count * es);
    std::memcpy(out, poison.data(), poison.size());
  }
  const auto guard = poison_bytes(t, kGuard * es);
  std::memcpy(out + count * es, guard.data(), guard.size());
  l.num_inputs = n;
  l.out = out;
  l.count = count;
  l.dtype = t;
  l.op = op;
  l.prescale = pre;
  l.postscale = post;
  l.average_divisor = n;
  l.unroll = unroll;
  cuda::detail::emulate_reduce_on_host(l);
  std::vector<const Tensor*> refs;
  for (auto& h : host) refs.push_back(&h);
  return verify(t, op, refs, out, count, pre, post, n, guard);
}

}  // namespace

TEST_CASE("cuda: kernel arithmetic matches the float64 reference for every dtype and op", "[cuda][kernel]") {
  uint64_t seed = 1;
  int cases = 0;
  for (DataType t : kTypes) {
    for (ReduceOp op : kOps) {
      for (int n : {1, 2, 3, 4, 16}) {
        for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{33}, std::size_t{1000}}) {
          for (int misalign : {0, 1}) {
            for (bool alias : {false, true}) {
              const bool scaled = count == 1000 && !alias;
              // Integer scaling stays in range: prescale 2 on inputs <= 60.
              const double pre = scaled ? (is_float(t) ? 0.5 : 2.0) : 1.0;
              const double post = scaled && is_float(t) ? 0.25 : 1.0;
              const std::string err = run_case(t, op, n, count, misalign, alias, pre, post, seed);
              seed += 100;
              ++cases;
              INFO("misalign " << misalign << ", alias " << alias);
              REQUIRE(err == "");
            }
          }
        }
      }
    }
  }
  CHECK(cases == 9 * 5 * 5 * 4 * 4);
}

TEST_CASE("cuda: kernel arithmetic: integer wrap, truncating average and half rounding", "[cuda][kernel]") {
  ReduceLaunch l;
  SECTION("int8 sum wraps like two's complement") {
    int8_t a[3] = {100, -128, 7}, b[3] = {100, -1, 0}, out[3] = {};
    l.inputs[0] = a;
    l.inputs[1] = b;
    l.num_inputs = 2;
    l.out = out;
    l.count = 3;
    l.dtype = DataType::Int8;
    l.op = ReduceOp::Sum;
    cuda::detail::emulate_reduce_on_host(l);
    CHECK(out[0] == static_cast<int8_t>(200 - 256));
    CHECK(out[1] == 127);
    CHECK(out[2] == 7);
  }
  SECTION("int32 average truncates toward zero, by the job size") {
    int32_t a[2] = {7, -7}, out[2] = {};
    l.inputs[0] = a;
    l.num_inputs = 1;
    l.out = out;
    l.count = 2;
    l.dtype = DataType::Int32;
    l.op = ReduceOp::Average;
    l.average_divisor = 2;  // a later stage of a 2-rank job
    cuda::detail::emulate_reduce_on_host(l);
    CHECK(out[0] == 3);
    CHECK(out[1] == -3);
  }
  SECTION("float16 accumulates in float32 and rounds once") {
    // 2048 + 1 + 1 in half: pairwise rounding would give 2048 twice; one
    // rounding of the float32 sum 2050 is exact.
    uint16_t a = detail::float_to_half(2048.0f), b = detail::float_to_half(1.0f), c = b, out = 0;
    l.inputs[0] = &a;
    l.inputs[1] = &b;
    l.inputs[2] = &c;
    l.num_inputs = 3;
    l.out = &out;
    l.count = 1;
    l.dtype = DataType::Float16;
    l.op = ReduceOp::Sum;
    cuda::detail::emulate_reduce_on_host(l);
    CHECK(detail::half_to_float(out) == 2050.0f);
  }
}

TEST_CASE("cuda: kernel arithmetic: integer average by a job size beyond the dtype's range", "[cuda][kernel]") {
  // The NCCL path divides by the job size, which need not fit int8/uint8:
  // casting it to the element type gave a negative divisor (int8, >= 128) or
  // a division by zero (uint8, 256).
  ReduceLaunch l;
  l.num_inputs = 1;
  l.op = ReduceOp::Average;
  SECTION("int8") {
    int8_t a[4] = {-128, 127, -100, 100}, out[4] = {1, 1, 1, 1};
    l.inputs[0] = a;
    l.out = out;
    l.count = 4;
    l.dtype = DataType::Int8;
    l.average_divisor = 128;
    cuda::detail::emulate_reduce_on_host(l);
    CHECK(out[0] == -1);  // -128 / 128, not -128 / -128
    CHECK(out[1] == 0);
    CHECK(out[2] == 0);
    CHECK(out[3] == 0);
    l.average_divisor = 256;  // int8(256) == 0
    cuda::detail::emulate_reduce_on_host(l);
    CHECK(out[0] == 0);
  }
  SECTION("uint8") {
    uint8_t a[2] = {255, 200}, out[2] = {1, 1};
    l.inputs[0] = a;
    l.out = out;
    l.count = 2;
    l.dtype = DataType::UInt8;
    l.average_divisor = 256;  // uint8(256) == 0
    cuda::detail::emulate_reduce_on_host(l);
    CHECK(out[0] == 0);
    CHECK(out[1] == 0);
    l.average_divisor = 100;
    cuda::detail::emulate_reduce_on_host(l);
    CHECK(out[0] == 2);
    CHECK(out[1] == 2);
  }
  SECTION("the element code agrees with the reference for a 300-rank job") {
    const std::size_t count = 1000;
    for (DataType t : {DataType::UInt8, DataType::Int8, DataType::Int32, DataType::Int64}) {
      const Tensor x = random_tensor(t, ReduceOp::Sum, count, 42);
      std::vector<uint8_t> out(count * ref_size(t) + kGuard * ref_size(t));
      const auto guard = poison_bytes(t, kGuard * ref_size(t));
      std::memcpy(out.data() + count * ref_size(t), guard.data(), guard.size());
      l.inputs[0] = x.bytes.data();
      l.out = out.data();
      l.count = count;
      l.dtype = t;
      l.average_divisor = 300;
      // Scale first so that the division has something to truncate.
      l.prescale = 7.0;
      cuda::detail::emulate_reduce_on_host(l);
      INFO(ref_name(t));
      CHECK(verify(t, ReduceOp::Average, {&x}, out.data(), count, 7.0, 1.0, 300, guard) == "");
    }
  }
}

TEST_CASE("cuda: kernel arithmetic: integer scaling out of the dtype's range wraps like the reference",
          "[cuda][kernel]") {
  // double -> narrow integer conversion of an out-of-range value is
  // undefined (the GPU saturates, x86 gives INT_MIN): the kernel truncates
  // to int64 and wraps, as the float64 reference (reference.h) does.
  ReduceLaunch l;
  l.num_inputs = 1;
  l.op = ReduceOp::Sum;
  SECTION("int32 prescale") {
    int32_t a[2] = {2000000000, -2000000000}, out[2] = {};
    l.inputs[0] = a;
    l.out = out;
    l.count = 2;
    l.dtype = DataType::Int32;
    l.prescale = 2.0;
    cuda::detail::emulate_reduce_on_host(l);
    CHECK(out[0] == static_cast<int32_t>(static_cast<uint32_t>(4000000000u)));
    CHECK(out[1] == static_cast<int32_t>(static_cast<uint32_t>(uint64_t(0) - 4000000000u)));
  }
  SECTION("uint8 negative postscale") {
    uint8_t a[2] = {5, 0}, out[2] = {};
    l.inputs[0] = a;
    l.out = out;
    l.count = 2;
    l.dtype = DataType::UInt8;
    l.postscale = -1.0;
    cuda::detail::emulate_reduce_on_host(l);
    CHECK(out[0] == 251);
    CHECK(out[1] == 0);
  }
  SECTION("int8 postscale, against the reference") {
    const std::size_t count = 257;
    const Tensor x = random_tensor(DataType::Int8, ReduceOp::Sum, count, 7);
    std::vector<uint8_t> out((count + kGuard));
    const auto guard = poison_bytes(DataType::Int8, kGuard);
    std::memcpy(out.data() + count, guard.data(), guard.size());
    l.inputs[0] = x.bytes.data();
    l.out = out.data();
    l.count = count;
    l.dtype = DataType::Int8;
    l.prescale = 5.0;  // inputs up to 30: 150 is past int8
    l.postscale = 3.0;
    cuda::detail::emulate_reduce_on_host(l);
    CHECK(verify(DataType::Int8, ReduceOp::Sum, {&x}, out.data(), count, 5.0, 3.0, 1, guard) == "");
  }
}

namespace {

/// One reduce with further outputs: `in_place` writes the result into every
/// input (the shared-GPU leader's call: out is input 0, copy c is input
/// c + 1); otherwise into n separate poisoned buffers. Every output and its
/// guard are checked against the reference.
std::string run_copies_case(DataType t, ReduceOp op, int n, std::size_t count, int misalign, int misaligned_copy,
                            bool in_place, uint64_t seed, int unroll = 1) {
  const std::size_t es = ref_size(t);
  std::vector<std::unique_ptr<HostBuffer>> bufs;
  std::vector<uint8_t*> outs;
  ReduceLaunch l;
  const auto poison = poison_bytes(t, count * es);
  const auto guard = poison_bytes(t, kGuard * es);
  std::vector<Tensor> host = fill_inputs(l, bufs, t, op, n, count, misalign, seed);
  for (int j = 0; j < n; ++j) {
    uint8_t* o = static_cast<uint8_t*>(const_cast<void*>(l.inputs[j]));
    if (!in_place || j == misaligned_copy) {
      bufs.push_back(std::make_unique<HostBuffer>((count + kGuard + 1) * es));
      o = bufs.back()->base + (j == misaligned_copy ? 1 : misalign) * es;
      std::memcpy(o, poison.data(), poison.size());
    }
    std::memcpy(o + count * es, guard.data(), guard.size());
    outs.push_back(o);
  }
  l.num_inputs = n;
  l.out = outs[0];
  for (int c = 1; c < n; ++c) l.copies[c - 1] = outs[c];
  l.num_copies = n - 1;
  l.count = count;
  l.dtype = t;
  l.op = op;
  l.average_divisor = n;
  l.unroll = unroll;
  cuda::detail::emulate_reduce_on_host(l);
  std::vector<const Tensor*> refs;
  for (auto& h : host) refs.push_back(&h);
  for (int j = 0; j < n; ++j) {
    std::string err = verify(t, op, refs, outs[j], count, 1.0, 1.0, n, guard);
    if (!err.empty()) return "output " + std::to_string(j) + ": " + err;
  }
  return "";
}

}  // namespace

TEST_CASE("cuda: the reduce kernel writes every further output in the same pass", "[cuda][kernel]") {
  uint64_t seed = 500000;
  int cases = 0;
  for (DataType t : kTypes) {
    for (ReduceOp op : kOps) {
      for (int n : {2, 3, 16}) {
        for (std::size_t count : {std::size_t{1}, std::size_t{33}, std::size_t{1000}}) {
          // misaligned_copy: one output off by an element (the whole launch
          // takes the scalar path); -1: none.
          for (int misaligned_copy : {-1, 1}) {
            for (bool in_place : {true, false}) {
              const std::string err = run_copies_case(t, op, n, count, 0, misaligned_copy, in_place, seed);
              seed += 100;
              ++cases;
              INFO(ref_name(t) << " n " << n << " count " << count << " misaligned copy " << misaligned_copy
                               << " in place " << in_place);
              REQUIRE(err == "");
            }
          }
        }
      }
    }
  }
  CHECK(cases == 9 * 5 * 3 * 3 * 2 * 2);
}

TEST_CASE("cuda: the unrolled reduce (2 and 4 packs per thread) gives the same results", "[cuda][kernel]") {
  // ReduceLaunch::unroll: the packs one pass of a thread handles, the last
  // pass partly past the vector body when the pack count is not a multiple
  // (33 and 1003 elements), then the scalar tail; with further outputs in
  // place (the shared-GPU leader's call) and into separate buffers.
  uint64_t seed = 900000;
  int cases = 0;
  for (int unroll : {2, 4}) {
    for (DataType t : kTypes) {
      for (ReduceOp op : kOps) {
        for (int n : {1, 2, 3, 16}) {
          for (std::size_t count : {std::size_t{1}, std::size_t{33}, std::size_t{1003}}) {
            for (int misalign : {0, 1}) {
              const bool scaled = count == 1003 && misalign == 0;
              const double pre = scaled ? (is_float(t) ? 0.5 : 2.0) : 1.0;
              const double post = scaled && is_float(t) ? 0.25 : 1.0;
              const std::string err = run_case(t, op, n, count, misalign, false, pre, post, seed, unroll);
              seed += 100;
              ++cases;
              INFO(ref_name(t) << " unroll " << unroll << " n " << n << " count " << count << " misalign " << misalign);
              REQUIRE(err == "");
            }
            if (n == 1) continue;
            for (bool in_place : {true, false}) {
              const std::string err = run_copies_case(t, op, n, count, 0, -1, in_place, seed, unroll);
              seed += 100;
              ++cases;
              INFO(ref_name(t) << " unroll " << unroll << " n " << n << " count " << count << " copies, in place "
                               << in_place);
              REQUIRE(err == "");
            }
          }
        }
      }
    }
  }
  CHECK(cases == 2 * 9 * 5 * (4 * 3 * 2 + 3 * 3 * 2));
  float a[4] = {1, 2, 3, 4};
  ReduceLaunch l;
  l.inputs[0] = a;
  l.num_inputs = 1;
  l.out = a;
  l.count = 4;
  for (int bad : {0, 3, 8, -1}) {
    l.unroll = bad;
    CHECK_THROWS_WITH(cuda::detail::emulate_reduce_on_host(l), Catch::Contains("unroll must be 1, 2 or 4"));
  }
}

TEST_CASE("cuda: the reduce kernel refuses a bad number of further outputs or a null one", "[cuda][kernel]") {
  float a[2] = {1, 2}, b[2] = {3, 4};
  ReduceLaunch l;
  l.inputs[0] = a;
  l.num_inputs = 1;
  l.out = a;
  l.count = 2;
  l.dtype = DataType::Float32;
  l.num_copies = cuda::detail::kMaxReduceInputs;
  CHECK_THROWS_WITH(cuda::detail::emulate_reduce_on_host(l), Catch::Contains("takes 0 to 15 further outputs, got 16"));
  l.num_copies = -1;
  CHECK_THROWS_WITH(cuda::detail::emulate_reduce_on_host(l), Catch::Contains("further outputs, got -1"));
  l.num_copies = 2;
  l.copies[0] = b;
  CHECK_THROWS_WITH(cuda::detail::emulate_reduce_on_host(l), Catch::Contains("device reduce output 2 is null"));
  l.copies[1] = b;
  cuda::detail::emulate_reduce_on_host(l);  // the same buffer twice is allowed: it gets the result
  CHECK(b[0] == 1.0f);
  CHECK(b[1] == 2.0f);
}
