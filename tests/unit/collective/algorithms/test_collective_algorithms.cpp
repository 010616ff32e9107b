// Thread-per-rank grids over loopback TCP: every collective x dtype x world
// size 1..8 x element count, with expected values in closed form, plus the
// failure semantics (abort cascade, vanished rank, wrong secret, timeouts).
//
// Catch2 assertions are not thread-safe, so rank threads record failures as
// strings and the main thread asserts on them.
#include "hvd/collective/algorithms.h"
#include "hvd/collective/comm.h"
#include "hvd/collective/types.h"
#include "hvd/common/error.h"
#include "hvd/store/memory_store.h"

#include "comm_world.h"
#include "algorithms/half.h"

#include "hvd/transport/link.h"
#include "hvd/transport/shm.h"

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

using namespace hvd;
using namespace hvd::collective;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

using hvd_test::Comms;
using hvd_test::make_world;

const DataType kAllTypes[] = {DataType::UInt8,   DataType::Int8,     DataType::Int16,   DataType::Int32,
                              DataType::Int64,   DataType::Float16,  DataType::BFloat16, DataType::Float32,
                              DataType::Float64};
const ReduceOp kAllOps[] = {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product};
// 1000 elements take the small (direct) paths, 70001 the ring paths for every dtype.
// Allgather, broadcast and alltoall move bytes at this layer (the Context
// multiplies elements by the dtype's size), so their grids vary bytes only.
const std::size_t kCounts[] = {0, 1, 7, 1000, 70001};
constexpr std::size_t kBig = 1u << 20;

CommOptions options(int rank, int size, const std::string& prefix, const std::string& secret = "job-secret",
                    std::chrono::milliseconds timeout = 10s) {
  CommOptions o;
  o.rank = rank;
  o.size = size;
  o.prefix = prefix;
  o.secret = secret;
  o.timeout = timeout;
  return o;
}

/// Failures recorded by one rank (bounded so a broken kernel cannot flood).
struct Failures {
  std::vector<std::string> items;
  template <class... A>
  void add(const char* fmt_str, A&&... a) {
    if (items.size() < 8) items.push_back(fmt::format(fmt_str, std::forward<A>(a)...));
  }
};

using Body = std::function<void(int rank, Comm& comm, Failures& f)>;

/// Runs body on one thread per rank; exceptions become failures.
std::vector<std::string> run_ranks(Comms& comms, const Body& body) {
  const int n = static_cast<int>(comms.size());
  std::vector<Failures> fails(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      try {
        body(r, *comms[r], fails[r]);
      } catch (const std::exception& e) {
        fails[r].add("exception: {}", e.what());
      }
    });
  }
  for (auto& t : ts) t.join();
  std::vector<std::string> all;
  for (int r = 0; r < n; ++r) {
    for (auto& s : fails[r].items) all.push_back(fmt::format("n={} rank {}: {}", n, r, s));
  }
  return all;
}

void expect_no_failures(const std::vector<std::string>& fails) {
  if (!fails.empty()) {
    std::string text;
    for (std::size_t i = 0; i < fails.size() && i < 20; ++i) text += fails[i] + "\n";
    FAIL(text);
  }
}

/// Worlds of size 1..8 on one shared store, formed once per test case.
struct Worlds {
  store::InMemoryStore store;
  std::map<int, Comms> worlds;
  Comms& get(int n) {
    auto it = worlds.find(n);
    if (it == worlds.end()) it = worlds.emplace(n, make_world(store, n, fmt::format("w{}/", n))).first;
    return it->second;
  }
};

bool floating(DataType t) {
  return t == DataType::Float16 || t == DataType::BFloat16 || t == DataType::Float32 || t == DataType::Float64;
}

double load(DataType t, const void* p, std::size_t i) {
  switch (t) {
    case DataType::UInt8: return static_cast<const uint8_t*>(p)[i];
    case DataType::Int8: return static_cast<const int8_t*>(p)[i];
    case DataType::Int16: return static_cast<const int16_t*>(p)[i];
    case DataType::Int32: return static_cast<const int32_t*>(p)[i];
    case DataType::Int64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DataType::Float16: return detail::half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::BFloat16: return detail::bfloat16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::Float32: return static_cast<const float*>(p)[i];
    case DataType::Float64: return static_cast<const double*>(p)[i];
    case DataType::Bool: return static_cast<const uint8_t*>(p)[i];  // one byte (not in these grids)
  }
  return 0;
}

void put(DataType t, void* p, std::size_t i, double v) {
  switch (t) {
    case DataType::UInt8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DataType::Int8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DataType::Int16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v); break;
    case DataType::Int32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DataType::Int64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DataType::Float16: static_cast<uint16_t*>(p)[i] = detail::float_to_half(static_cast<float>(v)); break;
    case DataType::BFloat16: static_cast<uint16_t*>(p)[i] = detail::float_to_bfloat16(static_cast<float>(v)); break;
    case DataType::Float32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::Float64: static_cast<double*>(p)[i] = v; break;
    case DataType::Bool: static_cast<uint8_t*>(p)[i] = v != 0; break;  // one byte (not in these grids)
  }
}

/// The value a type can actually hold for v.
double quantize(DataType t, double v) {
  char tmp[8];
  put(t, tmp, 0, v);
  return load(t, tmp, 0);
}

/// Rank r's input element i: small values so sums/products stay in range of
/// every type; fractional for floating sums so half rounding is exercised.
double input(DataType t, ReduceOp op, int r, std::size_t i) {
  const bool uns = t == DataType::UInt8;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average:
      if (floating(t)) return (static_cast<int>((r * 5 + i) % 17) - 8) * 0.37 + 0.01 * r;
      return uns ? static_cast<double>((r * 3 + i) % 17) : static_cast<double>((r * 3 + i) % 17) - 8;
    case ReduceOp::Min:
    case ReduceOp::Max: {
      double v = static_cast<double>((r * 7 + i * 3) % 13);
      return uns ? v : v - 6;
    }
    case ReduceOp::Product: {
      double v = (i + r) % 3 == 0 ? 2 : 1;
      if (!uns && (i + 2 * r) % 5 == 0) v = -v;
      return v;
    }
    case ReduceOp::Adasum: break;  // not in this grid (test_adasum.cpp)
  }
  return 0;
}

/// Unit roundoff of the type (floating) for tolerances.
double eps(DataType t) {
  switch (t) {
    case DataType::Float16: return std::ldexp(1.0, -11);
    case DataType::BFloat16: return std::ldexp(1.0, -8);
    case DataType::Float32: return std::ldexp(1.0, -24);
    case DataType::Float64: return std::ldexp(1.0, -53);
    default: return 0;
  }
}

/// Closed-form expectation for element i over n ranks (before scaling), plus
/// the sum of magnitudes that bounds the rounding error.
struct Expect {
  double value;
  double magnitude;
};

Expect expected(DataType t, ReduceOp op, int n, std::size_t i, double prescale = 1.0, double postscale = 1.0) {
  double acc = 0, mag = 0;
  for (int r = 0; r < n; ++r) {
    double q = quantize(t, input(t, op, r, i));
    if (prescale != 1.0) q = floating(t) ? q * prescale : std::trunc(q * prescale);
    mag += std::fabs(q);
    if (r == 0) {
      acc = q;
      continue;
    }
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Average: acc += q; break;
      case ReduceOp::Min: acc = std::min(acc, q); break;
      case ReduceOp::Max: acc = std::max(acc, q); break;
      case ReduceOp::Product: acc *= q; break;
      case ReduceOp::Adasum: break;  // not in this grid (test_adasum.cpp)
    }
  }
  if (op == ReduceOp::Average) acc = floating(t) ? acc / n : std::trunc(acc / n);
  if (postscale != 1.0) acc = floating(t) ? acc * postscale : std::trunc(acc * postscale);
  return {acc, mag * std::max(1.0, std::fabs(postscale))};
}

/// Checks one reduced element; float16/bfloat16/float32 get a tolerance of
/// (n + 2) unit roundoffs of the magnitude sum: each of the n-1 pairwise
/// reductions rounds once, plus prescale/average/postscale roundings.
/// input() depends on i only modulo 17 (sums), 13 (min/max) and 15
/// (products), so expectations repeat with this period.
constexpr std::size_t kPeriod = 17 * 13 * 15;

/// expected() for i in [0, kPeriod), computed once per (dtype, op, n).
std::vector<Expect> expected_table(DataType t, ReduceOp op, int n, double prescale = 1.0, double postscale = 1.0) {
  std::vector<Expect> table(kPeriod);
  for (std::size_t i = 0; i < kPeriod; ++i) table[i] = expected(t, op, n, i, prescale, postscale);
  return table;
}

bool close_enough(DataType t, int n, double got, const Expect& e) {
  if (!floating(t)) return got == e.value;
  const double tol = (n + 2) * eps(t) * (e.magnitude + std::fabs(e.value)) + 1e-300;
  return std::fabs(got - e.value) <= tol;
}

uint64_t fnv(const void* p, std::size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}

/// One in-place allreduce of `count` elements of this rank's inputs, checked
/// element by element against `table` (the first bad element of each call
/// is recorded) and for writes past the end (a guard byte after the data).
/// Returns the hash of the result, to compare across ranks.
uint64_t allreduce_and_check(Comm& comm, Failures& f, std::vector<char>& buf, DataType t, ReduceOp op,
                             std::size_t count, const std::vector<Expect>& table) {
  const int n = comm.size();
  buf.assign(count * dtype_size(t) + 1, 0);
  buf.back() = 0x5a;  // guard byte: must survive
  for (std::size_t i = 0; i < count; ++i) put(t, buf.data(), i, input(t, op, comm.rank(), i));
  allreduce(comm, buf.data(), count, t, op);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < count; ++i) {
    const Expect& e = table[i % kPeriod];
    double got = load(t, buf.data(), i);
    if (!close_enough(t, n, got, e) && bad++ == 0) {
      f.add("{} {} count {} element {}: got {} expected {}", dtype_name(t), reduce_op_name(op), count, i, got, e.value);
    }
  }
  if (buf.back() != 0x5a) f.add("{} {} count {}: wrote past the end", dtype_name(t), reduce_op_name(op), count);
  return fnv(buf.data(), buf.size());
}

}  // namespace

TEST_CASE("allreduce grid: every dtype x op x world 1..8 x count", "[collective][allreduce]") {
  Worlds worlds;
  for (int n = 1; n <= 8; ++n) {
    Comms& comms = worlds.get(n);
    std::vector<std::vector<uint64_t>> hashes(n);
    auto fails = run_ranks(comms, [&](int r, Comm& comm, Failures& f) {
      std::vector<char> buf;
      for (DataType t : kAllTypes) {
        for (ReduceOp op : kAllOps) {
          std::vector<std::size_t> counts(std::begin(kCounts), std::end(kCounts));
          counts.push_back(kBig);  // the 1<<20 for every dtype x op x world
          const std::vector<Expect> table = expected_table(t, op, n);
          for (std::size_t count : counts) {
            hashes[r].push_back(allreduce_and_check(comm, f, buf, t, op, count, table));
          }
        }
      }
    });
    expect_no_failures(fails);
    for (int r = 1; r < n; ++r) CHECK(hashes[r] == hashes[0]);  // bit-identical on every rank
  }
}

TEST_CASE("allreduce between the shared-memory direct-exchange limit and 64 KiB", "[collective][allreduce]") {
  // With more than 2 ranks on shared memory, messages above 64 KiB/(n-1)
  // take the ring instead of the direct exchange (under tcp: direct).
  Worlds worlds;
  for (int n : {3, 4, 8}) {
    Comms& comms = worlds.get(n);
    std::vector<std::vector<uint64_t>> hashes(n);
    auto fails = run_ranks(comms, [&](int r, Comm& comm, Failures& f) {
      // The in-process ranks pair over shared memory unless HVD_TRANSPORT=tcp.
      const bool shm = comm.link((r + 1) % n).shared_memory() != nullptr;
      if (shm != hvd::transport::shm_enabled_from_env()) f.add("link kind: shared memory {}", shm);
      std::vector<char> buf;
      for (DataType t : {DataType::Float32, DataType::Float64, DataType::Float16}) {
        for (ReduceOp op : kAllOps) {
          const std::vector<Expect> table = expected_table(t, op, n);
          for (std::size_t bytes : {std::size_t{24} << 10, std::size_t{48} << 10, std::size_t{64} << 10}) {
            const std::size_t count = bytes / dtype_size(t) - 1;  // uneven chunks
            hashes[r].push_back(allreduce_and_check(comm, f, buf, t, op, count, table));
          }
        }
      }
    });
    expect_no_failures(fails);
    for (int r = 1; r < n; ++r) CHECK(hashes[r] == hashes[0]);
  }
}

TEST_CASE("allreduce prescale and postscale", "[collective][allreduce]") {
  Worlds worlds;
  const DataType types[] = {DataType::Float16, DataType::BFloat16, DataType::Float32, DataType::Float64,
                            DataType::Int32};
  for (int n : {1, 2, 3, 5, 8}) {
    auto fails = run_ranks(worlds.get(n), [&](int r, Comm& comm, Failures& f) {
      for (DataType t : types) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average}) {
          const double pre = 0.5, post = 3.0;
          const std::vector<Expect> table = expected_table(t, op, n, pre, post);
          for (std::size_t count : {std::size_t(7), std::size_t(1000), std::size_t(70001)}) {
            std::vector<char> buf(count * dtype_size(t));
            for (std::size_t i = 0; i < count; ++i) put(t, buf.data(), i, input(t, op, r, i));
            allreduce(comm, buf.data(), count, t, op, pre, post);
            for (std::size_t i = 0; i < count; ++i) {
              const Expect& e = table[i % kPeriod];
              double got = load(t, buf.data(), i);
              if (!close_enough(t, n, got, e)) {
                f.add("{} {} count {} element {}: got {} expected {}", dtype_name(t), reduce_op_name(op), count, i, got,
                      e.value);
                break;
              }
            }
          }
        }
      }
    });
    expect_no_failures(fails);
  }
}

TEST_CASE("half-precision sums are rounded, not bit-summed", "[collective][allreduce][half]") {
  // 1 + 2^-11 (float16) rounds; bit-summing 0x3c00 + 0x3c00 would give 0x7800 (32768).
  store::InMemoryStore st;
  Comms comms = make_world(st, 2, "h/");
  auto fails = run_ranks(comms, [&](int r, Comm& comm, Failures& f) {
    uint16_t h[3] = {detail::float_to_half(1.0f), detail::float_to_half(0.1f), detail::float_to_half(-3.5f)};
    allreduce(comm, h, 3, DataType::Float16, ReduceOp::Sum);
    if (detail::half_to_float(h[0]) != 2.0f) f.add("1+1 = {}", detail::half_to_float(h[0]));
    if (h[1] != detail::float_to_half(0.2f)) f.add("0.1+0.1 = {}", detail::half_to_float(h[1]));
    if (detail::half_to_float(h[2]) != -7.0f) f.add("-3.5-3.5 = {}", detail::half_to_float(h[2]));
    uint16_t b[2] = {detail::float_to_bfloat16(1.5f), detail::float_to_bfloat16(-0.25f)};
    allreduce(comm, b, 2, DataType::BFloat16, ReduceOp::Sum);
    if (detail::bfloat16_to_float(b[0]) != 3.0f) f.add("bf16 1.5+1.5 = {}", detail::bfloat16_to_float(b[0]));
    if (detail::bfloat16_to_float(b[1]) != -0.5f) f.add("bf16 -0.25-0.25 = {}", detail::bfloat16_to_float(b[1]));
  });
  expect_no_failures(fails);
}

TEST_CASE("allgatherv grid with uneven and empty contributions", "[collective][allgather]") {
  Worlds worlds;
  for (int n = 1; n <= 8; ++n) {
    auto fails = run_ranks(worlds.get(n), [&](int r, Comm& comm, Failures& f) {
      for (std::size_t base :
           {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(1000), std::size_t(70001), kBig}) {
        for (int pattern = 0; pattern < 2; ++pattern) {
          // pattern 0: everyone sends base + small skew; 1: odd ranks send nothing.
          auto bytes_of = [&](int q) -> std::size_t {
            if (base == 0) return 0;
            if (pattern == 1) return q % 2 ? 0 : base;
            return base + static_cast<std::size_t>((q * 3) % 5);
          };
          std::vector<std::size_t> recv_bytes(n);
          std::size_t total = 0;
          for (int q = 0; q < n; ++q) total += recv_bytes[q] = bytes_of(q);
          std::vector<unsigned char> send(recv_bytes[r]);
          for (std::size_t j = 0; j < send.size(); ++j) send[j] = static_cast<unsigned char>(r * 31 + j * 7 + 1);
          std::vector<unsigned char> recv(total + 1, 0xa5);  // poisoned, plus a guard byte
          allgatherv(comm, send.data(), send.size(), recv.data(), recv_bytes);
          std::size_t off = 0;
          for (int q = 0; q < n; ++q) {
            for (std::size_t j = 0; j < recv_bytes[q]; ++j) {
              if (recv[off + j] != static_cast<unsigned char>(q * 31 + j * 7 + 1)) {
                f.add("base {} pattern {}: block {} byte {} wrong", base, pattern, q, j);
                break;
              }
            }
            off += recv_bytes[q];
          }
          if (recv[total] != 0xa5) f.add("base {}: wrote past the end", base);
        }
      }
    });
    expect_no_failures(fails);
  }
}

TEST_CASE("broadcast grid from every root", "[collective][broadcast]") {
  Worlds worlds;
  for (int n = 1; n <= 8; ++n) {
    auto fails = run_ranks(worlds.get(n), [&](int r, Comm& comm, Failures& f) {
      for (int root = 0; root < n; ++root) {
        for (std::size_t bytes : {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(1000), std::size_t(70001),
                                  std::size_t(300001), kBig + 3}) {
          std::vector<unsigned char> buf(bytes + 1, 0xa5);
          if (r == root) {
            for (std::size_t j = 0; j < bytes; ++j) buf[j] = static_cast<unsigned char>(root * 13 + j);
          }
          broadcast(comm, buf.data(), bytes, root);
          for (std::size_t j = 0; j < bytes; ++j) {
            if (buf[j] != static_cast<unsigned char>(root * 13 + j)) {
              f.add("root {} bytes {}: byte {} wrong", root, bytes, j);
              break;
            }
          }
          if (buf[bytes] != 0xa5) f.add("root {} bytes {}: wrote past the end", root, bytes);
        }
      }
    });
    expect_no_failures(fails);
  }
}

TEST_CASE("alltoallv grid with uneven splits", "[collective][alltoall]") {
  Worlds worlds;
  for (int n = 1; n <= 8; ++n) {
    auto fails = run_ranks(worlds.get(n), [&](int r, Comm& comm, Failures& f) {
      for (std::size_t base :
           {std::size_t(0), std::size_t(1), std::size_t(7), std::size_t(1000), std::size_t(70001), kBig}) {
        // Rank a sends split(a, b) bytes to rank b; some pairs send nothing.
        auto split = [&](int a, int b) -> std::size_t {
          if (base == 0 || (a + b) % 4 == 3) return 0;
          return base + static_cast<std::size_t>((a + 2 * b) % 4) * 3;
        };
        std::vector<std::size_t> sb(n), rb(n);
        std::size_t stot = 0, rtot = 0;
        for (int p = 0; p < n; ++p) {
          stot += sb[p] = split(r, p);
          rtot += rb[p] = split(p, r);
        }
        std::vector<unsigned char> send(stot), recv(rtot + 1, 0xa5);
        std::size_t off = 0;
        for (int p = 0; p < n; ++p) {
          for (std::size_t j = 0; j < sb[p]; ++j) send[off + j] = static_cast<unsigned char>(r * 17 + p * 29 + j);
          off += sb[p];
        }
        alltoallv(comm, send.data(), sb, recv.data(), rb);
        off = 0;
        for (int q = 0; q < n; ++q) {
          for (std::size_t j = 0; j < rb[q]; ++j) {
            if (recv[off + j] != static_cast<unsigned char>(q * 17 + r * 29 + j)) {
              f.add("base {}: block from {} byte {} wrong", base, q, j);
              break;
            }
          }
          off += rb[q];
        }
        if (recv[rtot] != 0xa5) f.add("base {}: wrote past the end", base);
      }
    });
    expect_no_failures(fails);
  }
}

TEST_CASE("reducescatter grid with uneven counts", "[collective][reducescatter]") {
  Worlds worlds;
  for (int n = 1; n <= 8; ++n) {
    auto fails = run_ranks(worlds.get(n), [&](int r, Comm& comm, Failures& f) {
      for (DataType t : kAllTypes) {
        for (ReduceOp op : kAllOps) {
          const std::vector<Expect> table = expected_table(t, op, n);
          std::vector<std::size_t> bases(std::begin(kCounts), std::end(kCounts));
          // The big case: about 1<<20 elements in total (each rank owns 1/n).
          bases.push_back(kBig / static_cast<std::size_t>(n));
          for (std::size_t base : bases) {
            // pattern 1 (odd ranks own nothing) for two types only, to keep the grid fast.
            const int patterns = (base < kBig / 8 && (t == DataType::Float32 || t == DataType::Int8)) ? 2 : 1;
            for (int pattern = 0; pattern < patterns; ++pattern) {
              std::vector<std::size_t> counts(n);
              std::size_t total = 0;
              for (int p = 0; p < n; ++p) {
                counts[p] = base == 0 ? 0 : (pattern == 1 && p % 2 ? 0 : base + static_cast<std::size_t>(p % 3));
                total += counts[p];
              }
              const std::size_t es = dtype_size(t);
              std::vector<char> send(total * es);
              for (std::size_t g = 0; g < total; ++g) put(t, send.data(), g, input(t, op, r, g));
              std::vector<char> recv(counts[r] * es + 1, static_cast<char>(0xa5));
              reducescatter(comm, send.data(), recv.data(), counts, t, op);
              std::size_t first = 0;
              for (int p = 0; p < r; ++p) first += counts[p];
              for (std::size_t i = 0; i < counts[r]; ++i) {
                const Expect& e = table[(first + i) % kPeriod];
                double got = load(t, recv.data(), i);
                if (!close_enough(t, n, got, e)) {
                  f.add("{} {} base {} pattern {} element {}: got {} expected {}", dtype_name(t), reduce_op_name(op),
                        base, pattern, i, got, e.value);
                  break;
                }
              }
              if (recv.back() != static_cast<char>(0xa5)) f.add("{} base {}: wrote past the end", dtype_name(t), base);
            }
          }
        }
      }
      // Prescale/postscale once.
      std::vector<float> send(3 * n), recv(3);
      for (int i = 0; i < 3 * n; ++i) send[i] = static_cast<float>(r + 1);
      reducescatter(comm, send.data(), recv.data(), std::vector<std::size_t>(n, 3), DataType::Float32, ReduceOp::Sum,
                    2.0, 0.25);
      const float want = 0.5f * n * (n + 1) / 2.0f;
      if (recv[0] != want || recv[2] != want) f.add("scaled reducescatter: got {} expected {}", recv[0], want);
    });
    expect_no_failures(fails);
  }
}

TEST_CASE("barrier holds every rank until all arrived", "[collective][barrier]") {
  Worlds worlds;
  for (int n : {1, 2, 3, 5, 8}) {
    std::vector<Clock::time_point> entered(n), left(n);
    auto fails = run_ranks(worlds.get(n), [&](int r, Comm& comm, Failures&) {
      barrier(comm);  // align
      std::this_thread::sleep_for(std::chrono::milliseconds(15 * r));
      entered[r] = Clock::now();
      barrier(comm);
      left[r] = Clock::now();
    });
    expect_no_failures(fails);
    auto last_in = *std::max_element(entered.begin(), entered.end());
    for (int r = 0; r < n; ++r) CHECK(left[r] >= last_in);
  }
}

TEST_CASE("bad arguments are refused before any traffic", "[collective]") {
  store::InMemoryStore st;
  CHECK_THROWS_AS(connect_comm(st, options(2, 2, "x/")), InvalidArgument);
  CHECK_THROWS_AS(connect_comm(st, options(0, 0, "x/")), InvalidArgument);
  Comms comms = make_world(st, 2, "args/");
  auto fails = run_ranks(comms, [&](int r, Comm& comm, Failures& f) {
    char buf[8] = {};
    try {
      broadcast(comm, buf, 8, 5);
      f.add("broadcast root 5 accepted");
    } catch (const InvalidArgument&) {
    }
    try {
      allgatherv(comm, buf, 4, buf, {4});
      f.add("allgatherv with one size for two ranks accepted");
    } catch (const InvalidArgument&) {
    }
    try {
      alltoallv(comm, buf, {1, 1, 1}, buf, {1, 1});
      f.add("alltoallv with three splits accepted");
    } catch (const InvalidArgument&) {
    }
    // The communicator still works after refused calls.
    int v = r + 1;
    allreduce(comm, &v, 1, DataType::Int32, ReduceOp::Sum);
    if (v != 3) f.add("allreduce after refused calls: {}", v);
  });
  expect_no_failures(fails);
}

TEST_CASE("binding the wildcard address advertises a dialable one", "[collective]") {
  store::InMemoryStore st;
  Comms comms(2);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      CommOptions o = options(r, 2, "wild/");
      o.bind_address = "0.0.0.0";
      o.route_hint = "127.0.0.1";
      try {
        comms[r] = connect_comm(st, o);
      } catch (const std::exception&) {
      }
    });
  }
  for (auto& t : ts) t.join();
  REQUIRE(comms[0]);
  REQUIRE(comms[1]);
  CHECK(st.get_string("wild/rank_0", 1s).rfind("127.0.0.1:", 0) == 0);
  auto fails = run_ranks(comms, [&](int r, Comm& comm, Failures& f) {
    int64_t v = r + 10;
    allreduce(comm, &v, 1, DataType::Int64, ReduceOp::Sum);
    if (v != 21) f.add("sum {}", v);
  });
  expect_no_failures(fails);
}

TEST_CASE("a peer with the wrong secret is refused", "[collective][security]") {
  store::InMemoryStore st;
  std::exception_ptr e0, e1;
  std::thread t0([&] {
    try {
      connect_comm(st, options(0, 2, "sec/", "right", 1500ms));
    } catch (...) {
      e0 = std::current_exception();
    }
  });
  std::thread t1([&] {
    try {
      connect_comm(st, options(1, 2, "sec/", "wrong", 1500ms));
    } catch (...) {
      e1 = std::current_exception();
    }
  });
  t0.join();
  t1.join();
  REQUIRE(e0);
  REQUIRE(e1);
  try {
    std::rethrow_exception(e0);
  } catch (const TimeoutError& e) {
    CHECK(std::string(e.what()).find("[1]") != std::string::npos);
  }
  CHECK_THROWS_AS(std::rethrow_exception(e1), IoError);
}

TEST_CASE("a rank that never shows up is named in the timeout", "[collective]") {
  store::InMemoryStore st;
  std::vector<std::string> msgs(2);
  std::vector<std::thread> ts;
  for (int r = 0; r < 2; ++r) {
    ts.emplace_back([&, r] {
      try {
        connect_comm(st, options(r, 3, "miss/", "s", 500ms));
      } catch (const TimeoutError& e) {
        msgs[r] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (auto& m : msgs) {
    INFO(m);
    CHECK(m.find("[2]") != std::string::npos);
  }
}

TEST_CASE("ranks waiting at init stop soon after another rank records the rendezvous's first failure",
          "[collective][failure]") {
  // Rank 2 never shows up; rank 0 waits for rank 1 and 2 to connect, rank 1
  // waits for rank 2 to connect, and a rank 3 waits for rank 2's address.
  // Once a rank records a failure on the board (as Context::create does when
  // its connect fails), they stop within a fraction of their 20 s timeout.
  store::InMemoryStore st;
  std::vector<std::string> msgs(4);
  std::vector<double> took(4, -1);
  std::vector<std::thread> ts;
  const auto t0 = Clock::now();
  for (int r : {0, 1, 3}) {
    ts.emplace_back([&, r] {
      try {
        connect_comm(st, options(r, 4, "early/", "s", 20s));
      } catch (const IoError& e) {
        msgs[r] = e.what();
        took[r] = std::chrono::duration<double>(Clock::now() - t0).count();
      }
    });
  }
  std::this_thread::sleep_for(300ms);
  CHECK(msgs == std::vector<std::string>(4));  // still waiting
  st.set_string("early/failure/first", "rank 2: could not connect to rank 0 (No route to host)");
  for (auto& t : ts) t.join();
  for (int r : {0, 1, 3}) {
    INFO("rank " << r << ": " << msgs[r]);
    // Each stops on the board, or on a peer that stopped on it first.
    const bool board = msgs[r].find("another rank recorded this communicator's first failure") != std::string::npos;
    const bool peer = msgs[r].find("closed by peer") != std::string::npos;
    CHECK((board || peer));
    CHECK(took[r] > 0.29);
    CHECK(took[r] < 2.0);
  }
  CHECK(msgs[3].find("waiting for rank 2's address") != std::string::npos);
}

namespace {

/// Every rank loops allreduce until it fails; `kill` runs on the main thread
/// once they are busy. Returns, per surviving rank, seconds from the kill to
/// its IoError (negative: no IoError). `what`: each rank's error; `board`:
/// the ranks share their first failure through the store (as a Context's
/// communicator does).
std::vector<double> failure_latencies(int n, std::size_t count, int victim, bool vanish,
                                      std::vector<std::string>* what_out = nullptr, bool board = false) {
  auto store = std::make_shared<store::InMemoryStore>();
  store::InMemoryStore& st = *store;
  Comms comms = make_world(st, n, "fail/");
  if (board) {
    for (auto& c : comms) c->set_failure_board(std::make_shared<FailureBoard>(store, "fail/"));
  }
  std::atomic<int> started{0};
  std::atomic<bool> victim_stop{false};
  std::atomic<int64_t> kill_ns{0};
  std::vector<double> latency(n, -1);
  std::vector<std::string> what(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      std::vector<float> buf(count, 1.0f);
      const auto limit = Clock::now() + 20s;
      try {
        while (Clock::now() < limit) {
          if (r == victim && vanish && victim_stop.load()) {
            kill_ns = Clock::now().time_since_epoch().count();
            comms[r].reset();  // like a process dying: the kernel closes its sockets
            return;
          }
          allreduce(*comms[r], buf.data(), count, DataType::Float32, ReduceOp::Sum);
          std::fill(buf.begin(), buf.end(), 1.0f);
          started.fetch_add(1);
        }
      } catch (const IoError& e) {
        latency[r] = (Clock::now().time_since_epoch().count() - kill_ns.load()) / 1e9;
        what[r] = e.what();
      } catch (const std::exception& e) {
        what[r] = e.what();
      }
    });
  }
  while (started.load() < 3 * n) std::this_thread::sleep_for(1ms);
  if (vanish) {
    victim_stop = true;
  } else {
    kill_ns = Clock::now().time_since_epoch().count();
    comms[victim]->abort("test abort");
  }
  for (auto& t : ts) t.join();
  for (int r = 0; r < n; ++r) {
    if (r != victim) INFO("rank " << r << ": " << what[r]);
  }
  if (what_out) *what_out = what;
  return latency;
}

}  // namespace

TEST_CASE("aborting one rank mid-allreduce fails every other rank within 2 s", "[collective][failure]") {
  const std::size_t count = GENERATE(std::size_t(100), std::size_t(1) << 21);
  const int n = 4, victim = 1;
  auto lat = failure_latencies(n, count, victim, false);
  for (int r = 0; r < n; ++r) {
    INFO("count " << count << " rank " << r << " latency " << lat[r] << " s");
    if (r == victim) continue;
    CHECK(lat[r] >= 0);
    CHECK(lat[r] < 2.0);
  }
}

TEST_CASE("every survivor names the rank that vanished, not the peer that aborted after it", "[collective][failure]") {
  // Without the shared record most survivors learn from a live neighbour
  // that aborted and would name that neighbour (issue 29).
  const std::size_t count = GENERATE(std::size_t(100), std::size_t(1) << 21);
  const int n = 5, victim = 2;
  std::vector<std::string> what;
  auto lat = failure_latencies(n, count, victim, true, &what, /*board=*/true);
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    INFO("count " << count << " rank " << r << ": " << what[r]);
    CHECK(lat[r] >= 0);
    CHECK(lat[r] < 2.0);
    CHECK(what[r].rfind("rank 2 failed (seen first by rank ", 0) == 0);
  }
}

TEST_CASE("FailureBoard: the first report wins and a store that does not answer costs at most the budget",
          "[failure_board]") {
  auto st = std::make_shared<store::InMemoryStore>();
  FailureBoard a(st, "gen3/"), b(st, "gen3/");
  CHECK(a.report("rank 2 failed (seen first by rank 3: x)") == "rank 2 failed (seen first by rank 3: x)");
  CHECK(b.report("rank 0 failed (seen first by rank 1: y)") == "rank 2 failed (seen first by rank 3: x)");
  CHECK(a.report("rank 9 failed") == "rank 2 failed (seen first by rank 3: x)");
  FailureBoard other(st, "gen4/");  // another communicator: its own record
  CHECK(other.report("rank 1 timed out (z)") == "rank 1 timed out (z)");

  // A store that hangs (busy, or its server gone silent): the rank reports
  // what it saw itself once the budget has passed.
  struct HangingStore : store::InMemoryStore {
    std::mutex mu;
    std::condition_variable cv;
    bool release = false;
    int64_t add(const std::string& key, int64_t delta) override {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return release; });
      return InMemoryStore::add(key, delta);
    }
  };
  auto hanging = std::make_shared<HangingStore>();
  FailureBoard slow(hanging, "gen0/", 100ms);
  const auto t0 = Clock::now();
  CHECK(slow.report("rank 1 failed (mine)") == "rank 1 failed (mine)");
  CHECK(Clock::now() - t0 < 1s);
  {
    std::lock_guard<std::mutex> lock(hanging->mu);
    hanging->release = true;
  }
  hanging->cv.notify_all();  // the abandoned call finishes on its own thread, holding the store
}

TEST_CASE("a rank that vanishes mid-job fails every survivor within 2 s", "[collective][failure]") {
  const std::size_t count = GENERATE(std::size_t(100), std::size_t(1) << 21);
  const int n = 5, victim = 3;
  auto lat = failure_latencies(n, count, victim, true);
  for (int r = 0; r < n; ++r) {
    INFO("count " << count << " rank " << r << " latency " << lat[r] << " s");
    if (r == victim) continue;
    CHECK(lat[r] >= 0);
    CHECK(lat[r] < 2.0);
  }
}

TEST_CASE("an aborted communicator refuses further collectives", "[collective][failure]") {
  store::InMemoryStore st;
  Comms comms = make_world(st, 2, "ab/");
  comms[0]->abort("done");
  CHECK(comms[0]->aborted());
  CHECK(comms[0]->abort_reason() == "done");
  int v = 1;
  CHECK_THROWS_AS(allreduce(*comms[0], &v, 1, DataType::Int32, ReduceOp::Sum), IoError);
  // The peer learns on its next operation.
  CHECK_THROWS_AS(barrier(*comms[1]), IoError);
  CHECK(comms[1]->aborted());
}

TEST_CASE("group comms: disjoint groups of one world run collectives at once over the parent's links",
          "[collective][group]") {
  store::InMemoryStore st;
  Comms comms = make_world(st, 4, "grp/");
  // Groups {0,2} and {3,1} (members in a chosen order: group rank 0 of the
  // second group is world rank 3), as the ranks of one local rank on two
  // hosts would be.
  auto fails = run_ranks(comms, [&](int r, Comm& comm, Failures& f) {
    const std::vector<int> members = r % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{3, 1};
    GroupComm g(comm, members);
    const int want_rank = r % 2 == 0 ? r / 2 : (r == 3 ? 0 : 1);
    if (g.rank() != want_rank || g.size() != 2) f.add("group rank {} size {}", g.rank(), g.size());
    for (int round = 0; round < 3; ++round) {
      std::vector<float> v(70001, float(r + 1));
      allreduce(g, v.data(), v.size(), DataType::Float32, ReduceOp::Sum);
      const float want = r % 2 == 0 ? 1 + 3 : 2 + 4;
      if (v.front() != want || v.back() != want) f.add("round {}: group sum {} want {}", round, v.back(), want);
      // Order of members decides the gather order.
      int32_t mine = r;
      std::vector<int32_t> all(2, -1);
      allgatherv(g, &mine, sizeof mine, all.data(), {sizeof mine, sizeof mine});
      if (all != std::vector<int32_t>(members.begin(), members.end())) f.add("group gather {},{}", all[0], all[1]);
    }
    // The world's own collectives still line up afterwards.
    std::vector<int64_t> w(5, r);
    allreduce(comm, w.data(), w.size(), DataType::Int64, ReduceOp::Sum);
    if (w[4] != 6) f.add("world sum after group collectives {}", w[4]);
  });
  expect_no_failures(fails);
}

TEST_CASE("group comms: members must be distinct ranks of the job including the caller", "[collective][group]") {
  store::InMemoryStore st;
  Comms comms = make_world(st, 1, "grp1/");
  Comm& c = *comms[0];
  CHECK_THROWS_WITH(GroupComm(c, {}), Catch::Contains("at least one member"));
  CHECK_THROWS_WITH(GroupComm(c, {0, 0}), Catch::Contains("not a set of distinct ranks"));
  CHECK_THROWS_WITH(GroupComm(c, {0, 1}), Catch::Contains("job of size 1"));
  GroupComm one(c, {0});
  CHECK(one.rank() == 0);
  CHECK(one.size() == 1);
  CHECK_THROWS_AS(one.link(0), InvalidArgument);
  std::vector<double> v = {2.5};
  allreduce(one, v.data(), 1, DataType::Float64, ReduceOp::Sum);
  CHECK(v[0] == 2.5);
}

// ---- Links formed at first use (src/bootstrap/comm.cpp, mesh_plan.h) -------
// Beyond 8 ranks, init links only the ring neighbours; the trees and the
// pairwise exchanges form their other links when they first need them.

TEST_CASE("beyond the eager mesh every algorithm forms its links at first use", "[collective][lazy]") {
  store::InMemoryStore st;
  const int n = 12;
  Comms comms = make_world(st, n, "lazy/");
  auto fails = run_ranks(comms, [&](int r, Comm& comm, Failures& f) {
    // Broadcast from every root: binomial trees over links init did not form.
    for (int root = 0; root < n; ++root) {
      std::vector<int32_t> b(100, r == root ? root + 1000 : -1);
      broadcast(comm, b.data(), b.size() * sizeof(int32_t), root);
      if (b[0] != root + 1000 || b[99] != root + 1000) f.add("broadcast from {}: {}", root, b[0]);
    }
    // Pairwise exchange with every rank.
    std::vector<std::size_t> bytes(n, sizeof(int32_t));
    std::vector<int32_t> out(n), in(n, -1);
    for (int p = 0; p < n; ++p) out[p] = r * 100 + p;
    alltoallv(comm, out.data(), bytes, in.data(), bytes);
    for (int p = 0; p < n; ++p) {
      if (in[p] != p * 100 + r) f.add("alltoall from {}: {}", p, in[p]);
    }
    int64_t v = r + 1;
    allreduce(comm, &v, 1, DataType::Int64, ReduceOp::Sum);
    if (v != n * (n + 1) / 2) f.add("allreduce: {}", v);
    barrier(comm);
  });
  expect_no_failures(fails);
}

TEST_CASE("beyond the eager mesh a missing rank is named by its ring neighbours", "[collective][lazy]") {
  store::InMemoryStore st;
  const int n = 10;
  std::vector<std::string> msgs(n);
  Comms comms(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n - 1; ++r) {  // rank 9 never comes
    ts.emplace_back([&, r] {
      try {
        comms[r] = connect_comm(st, options(r, n, "gone/", "s", 1500ms));
      } catch (const TimeoutError& e) {
        msgs[r] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  for (int r : {0, 8}) {
    INFO(msgs[r]);
    CHECK(msgs[r].find("[9]") != std::string::npos);
  }
  for (int r = 1; r < 8; ++r) {
    INFO("rank " << r << ": " << msgs[r]);
    CHECK(comms[r] != nullptr);  // O(1) work per rank: the others do not wait for rank 9
  }
}

TEST_CASE("a rank waiting for a new link fails fast when another link hangs up", "[collective][lazy]") {
  store::InMemoryStore st;
  const int n = 10;
  Comms comms = make_world(st, n, "hang/");
  std::string what;
  int blamed = -1;
  double seconds = -1;
  std::thread waiter([&] {
    const auto t0 = Clock::now();
    try {
      comms[0]->link(5);  // rank 5 never asks for the link to rank 0
    } catch (const transport::LinkError& e) {
      what = e.what();
      blamed = e.peer();
    } catch (const std::exception& e) {
      what = e.what();
    }
    seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  });
  std::this_thread::sleep_for(200ms);
  comms[1].reset();  // rank 1 (a ring neighbour of rank 0) dies
  waiter.join();
  INFO(what);
  CHECK(blamed == 1);
  CHECK(seconds < 5);
}

TEST_CASE("a link formed at first use carries data both ways", "[collective][lazy]") {
  store::InMemoryStore st;
  const int n = 10;
  Comms comms = make_world(st, n, "pair/");
  std::string got0(5, '?'), got6(5, '?');
  std::thread a([&] {
    transport::Link& l = comms[0]->link(6);
    transport::sendrecv(l, "hello", 5, l, got0.data(), 5);
  });
  std::thread b([&] {
    transport::Link& l = comms[6]->link(0);
    transport::sendrecv(l, "world", 5, l, got6.data(), 5);
  });
  a.join();
  b.join();
  CHECK(got0 == "world");
  CHECK(got6 == "hello");
  CHECK(&comms[0]->link(6) == &comms[0]->link(6));  // formed once
}
