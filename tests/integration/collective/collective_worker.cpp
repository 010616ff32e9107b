// A worker for the multi-process collective tests, started by hvdrun or by
// collective_launch with HOROVOD_* set. argv[1] selects the mode:
//   ops       every op x dtypes with closed-form expected values
//   order     named allreduces submitted in a rank-dependent order
//   fusion    200 small allreduces in flight at once; checks fusion happened
//   mismatch  rank 1 submits a different shape; every rank checks the message
//   kill      allreduces in a loop; the last rank (HVD_TEST_KILL_RANK, when
//             set) SIGKILLs itself mid-way and every survivor reports how
//             fast it failed and its error ("FAILED_AT <ns> ... IoError: ...")
//   noshutdown  returns from main without hvd::shutdown() (exit stays clean)
//   cut       allreduces in a loop until the test cuts a host's network:
//             prints "LOOPING" once running, then every rank that notices
//             reports how fast it failed ("FAILED_AT <ns>"); nobody dies, so
//             only silent-peer detection can end the loop
//   cutidle   as cut, but after "LOOPING" every rank starts an allgather
//             whose output allocator on the last rank prints "STALLING" and
//             blocks its background thread for 8 s: the others wait on
//             links with nothing in flight (the keepalive path) when cut
//   latency   not a test: per-call time of the C++ API for a few sizes
//   settings  prints the CPUs the library's background thread may run on
//             ("rank R: background cpus LIST", HOROVOD_THREAD_AFFINITY's
//             effect), then one allreduce; with HVD_TEST_INIT_DELAY_MS every
//             rank but 0 waits that long before hvd::init (rendezvous
//             timeouts)
// Prints "rank R: <mode> ok" and exits 0 on success; exit 1 on a failed check.
// Any further argv (e.g. a unique tag) is ignored: tests use it to find
// leftover processes.
#include "hvd/collective/hvd.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <dirent.h>
#include <unistd.h>

using hvd::collective::DataType;
using hvd::collective::Handle;
using hvd::collective::ReduceOp;

namespace {

int g_failures = 0;

#define EXPECT(cond, ...)                                                                           \
  do {                                                                                              \
    if (!(cond)) {                                                                                  \
      std::fprintf(stderr, "rank %d: check failed at line %d: %s: ", hvd::rank(), __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                                            \
      std::fprintf(stderr, "\n");                                                                   \
      ++g_failures;                                                                                 \
    }                                                                                               \
  } while (0)

int64_t monotonic_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// ---- element access for every dtype (values are small integers) ----------

uint16_t float_to_half(float f) {
  if (f == 0.0f) return 0;
  uint16_t sign = f < 0 ? 0x8000 : 0;
  f = std::fabs(f);
  int e;
  float m = std::frexp(f, &e);  // f = m * 2^e, m in [0.5, 1)
  int exp = e - 1 + 15;
  uint16_t mant = static_cast<uint16_t>(std::lround((m * 2.0f - 1.0f) * 1024.0f));
  return static_cast<uint16_t>(sign | (exp << 10) | mant);
}

float half_to_float(uint16_t h) {
  int exp = (h >> 10) & 31, mant = h & 1023;
  float v = exp == 0 ? std::ldexp(static_cast<float>(mant), -24) : std::ldexp(1.0f + mant / 1024.0f, exp - 15);
  return (h & 0x8000) ? -v : v;
}

void put(DataType t, void* p, std::size_t i, double v) {
  switch (t) {
    case DataType::UInt8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DataType::Int8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DataType::Bool: static_cast<uint8_t*>(p)[i] = v != 0 ? 1 : 0; break;
    case DataType::Int16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v); break;
    case DataType::Int32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DataType::Int64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DataType::Float16: static_cast<uint16_t*>(p)[i] = float_to_half(static_cast<float>(v)); break;
    case DataType::BFloat16: {
      float f = static_cast<float>(v);
      uint32_t bits;
      std::memcpy(&bits, &f, 4);
      static_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(bits >> 16);
      break;
    }
    case DataType::Float32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::Float64: static_cast<double*>(p)[i] = v; break;
  }
}

double get(DataType t, const void* p, std::size_t i) {
  switch (t) {
    case DataType::UInt8:
    case DataType::Bool: return static_cast<const uint8_t*>(p)[i];
    case DataType::Int8: return static_cast<const int8_t*>(p)[i];
    case DataType::Int16: return static_cast<const int16_t*>(p)[i];
    case DataType::Int32: return static_cast<const int32_t*>(p)[i];
    case DataType::Int64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DataType::Float16: return half_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::BFloat16: {
      uint32_t bits = static_cast<uint32_t>(static_cast<const uint16_t*>(p)[i]) << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    }
    case DataType::Float32: return static_cast<const float*>(p)[i];
    case DataType::Float64: return static_cast<const double*>(p)[i];
  }
  return 0;
}

struct Buffer {
  DataType dtype;
  std::vector<uint8_t> bytes;
  Buffer(DataType t, std::size_t n) : dtype(t), bytes(n * hvd::collective::dtype_size(t)) {}
  void* data() { return bytes.data(); }
  std::size_t count() const { return bytes.size() / hvd::collective::dtype_size(dtype); }
  void fill(double v) {
    for (std::size_t i = 0; i < count(); ++i) put(dtype, data(), i, v);
  }
};

// ---- modes ------------------------------------------------------------------

void mode_ops() {
  const int rank = hvd::rank(), size = hvd::size();
  const DataType dtypes[] = {DataType::UInt8,   DataType::Int8,     DataType::Int16,   DataType::Int32,
                             DataType::Int64,   DataType::Float16,  DataType::BFloat16, DataType::Float32,
                             DataType::Float64};
  for (DataType t : dtypes) {
    const std::string tn = hvd::collective::dtype_name(t);
    for (std::size_t count : {std::size_t(0), std::size_t(1), std::size_t(1000), std::size_t(100000)}) {
      const std::string suffix = tn + "." + std::to_string(count);
      // allreduce sum of rank+1.
      Buffer a(t, count);
      a.fill(rank + 1);
      hvd::allreduce({"sum." + suffix, a.data(), a.data(), t, {static_cast<int64_t>(count)}, ReduceOp::Sum});
      for (std::size_t i = 0; i < count; ++i) {
        EXPECT(get(t, a.data(), i) == size * (size + 1) / 2, "%s sum[%zu]=%g", suffix.c_str(), i, get(t, a.data(), i));
        if (get(t, a.data(), i) != size * (size + 1) / 2) break;
      }
      // allreduce max of rank, out of place.
      Buffer m(t, count), mo(t, count);
      m.fill(rank);
      hvd::allreduce({"max." + suffix, m.data(), mo.data(), t, {static_cast<int64_t>(count)}, ReduceOp::Max});
      if (count > 0) EXPECT(get(t, mo.data(), count - 1) == size - 1, "%s max", suffix.c_str());
      // broadcast from the last rank.
      Buffer b(t, count);
      b.fill(rank == size - 1 ? 7 : 1);
      hvd::broadcast({"bcast." + suffix, b.data(), b.data(), t, {static_cast<int64_t>(count)}, size - 1});
      if (count > 0) EXPECT(get(t, b.data(), 0) == 7 && get(t, b.data(), count - 1) == 7, "%s bcast", suffix.c_str());
    }
    // allgather: rank r sends r+1 rows of 3 values r.
    Buffer g(t, static_cast<std::size_t>(3 * (rank + 1)));
    g.fill(rank);
    Handle h = hvd::allgather({"gather." + tn, g.data(), t, {rank + 1, 3}, {}});
    EXPECT(h.output_shape() == (std::vector<int64_t>{size * (size + 1) / 2, 3}), "%s gather shape", tn.c_str());
    std::size_t k = 0;
    for (int q = 0; q < size; ++q) {
      for (int i = 0; i < 3 * (q + 1); ++i, ++k) {
        if (get(t, h.output(), k) != q) {
          EXPECT(false, "%s gather[%zu]=%g want %d", tn.c_str(), k, get(t, h.output(), k), q);
          q = size;
          break;
        }
      }
    }
    // alltoall: rank r sends q+1 rows of (r*10+q) to rank q.
    std::vector<int64_t> splits;
    Buffer s(t, static_cast<std::size_t>(size * (size + 1) / 2));
    std::size_t off = 0;
    for (int q = 0; q < size; ++q) {
      splits.push_back(q + 1);
      for (int i = 0; i <= q; ++i) put(t, s.data(), off++, rank * 10 + q);
    }
    Handle a2a = hvd::alltoall({"a2a." + tn, s.data(), t, {static_cast<int64_t>(off)}, splits, {}});
    EXPECT(a2a.recv_splits() == std::vector<int64_t>(size, rank + 1), "%s a2a splits", tn.c_str());
    for (int q = 0; q < size; ++q) {
      for (int i = 0; i <= rank; ++i) {
        double v = get(t, a2a.output(), static_cast<std::size_t>(q * (rank + 1) + i));
        EXPECT(v == q * 10 + rank, "%s a2a from %d = %g", tn.c_str(), q, v);
      }
    }
    // reducescatter of (2*size+1) rows of 2 values 1 -> every kept value is size.
    Buffer r(t, static_cast<std::size_t>((2 * size + 1) * 2));
    r.fill(1);
    Handle rs = hvd::reducescatter({"rs." + tn, r.data(), t, {2 * size + 1, 2}, ReduceOp::Sum, 1.0, 1.0, {}});
    EXPECT(rs.output_shape()[0] == hvd::collective::reducescatter_rows(2 * size + 1, rank, size), "%s rs shape",
           tn.c_str());
    for (std::size_t i = 0; i < rs.output_bytes() / hvd::collective::dtype_size(t); ++i) {
      EXPECT(get(t, rs.output(), i) == size, "%s rs[%zu]", tn.c_str(), i);
    }
  }
  // Average with scale factors on float32.
  std::vector<float> avg(10, static_cast<float>(rank));
  hvd::allreduce({"avg", avg.data(), avg.data(), DataType::Float32, {10}, ReduceOp::Average, 2.0, 0.5});
  EXPECT(std::fabs(avg[9] - (size - 1) / 2.0f) < 1e-5, "avg %g", avg[9]);
  hvd::barrier();
}

void mode_order() {
  const int rank = hvd::rank(), size = hvd::size();
  constexpr int kTensors = 40;
  std::vector<int> order(kTensors);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(977 * (rank + 1)));
  std::vector<std::vector<int64_t>> data(kTensors);
  std::vector<Handle> hs(kTensors);
  for (int i : order) {
    data[i].assign(static_cast<std::size_t>(i * 100 + 1), i + rank);
    hs[i] = hvd::allreduce_async({"layer" + std::to_string(i),
                                  data[i].data(),
                                  data[i].data(),
                                  DataType::Int64,
                                  {static_cast<int64_t>(data[i].size())}});
  }
  for (int i = 0; i < kTensors; ++i) {
    hs[i].wait();
    EXPECT(data[i].back() == int64_t(size) * i + size * (size - 1) / 2, "layer%d = %lld", i,
           static_cast<long long>(data[i].back()));
  }
}

void mode_fusion() {
  const int rank = hvd::rank(), size = hvd::size();
  for (int round = 0; round < 3; ++round) {
    std::vector<std::vector<float>> data(200);
    std::vector<Handle> hs;
    for (int i = 0; i < 200; ++i) {
      data[i].assign(static_cast<std::size_t>(1 + i % 50), static_cast<float>(rank + i));
      hs.push_back(hvd::allreduce_async({"small" + std::to_string(i),
                                         data[i].data(),
                                         data[i].data(),
                                         DataType::Float32,
                                         {static_cast<int64_t>(data[i].size())}}));
    }
    for (int i = 0; i < 200; ++i) {
      hs[i].wait();
      EXPECT(data[i][0] == static_cast<float>(size * i + size * (size - 1) / 2), "small%d", i);
    }
  }
  auto st = hvd::context().stats();
  std::printf("rank %d: fused %llu tensors in %llu responses; cache hits %llu\n", rank,
              static_cast<unsigned long long>(st.fused_tensors), static_cast<unsigned long long>(st.fused_responses),
              static_cast<unsigned long long>(st.cache_hits));
  EXPECT(st.fused_tensors >= 100, "fused_tensors=%llu", static_cast<unsigned long long>(st.fused_tensors));
  EXPECT(st.cache_hits >= 200, "cache_hits=%llu", static_cast<unsigned long long>(st.cache_hits));
}

void mode_mismatch() {
  const int rank = hvd::rank(), size = hvd::size();
  std::vector<float> w(20, 1.0f);
  int64_t cols = rank == 1 ? 5 : 4;
  std::string want = size == 2 ? "tensor 'grad.w' mismatch: rank 0 has float32[4,4], rank 1 has float32[4,5]"
                               : "tensor 'grad.w' mismatch: ranks 0," +
                                     [&] {
                                       std::string s;
                                       for (int r = 2; r < size; ++r) s += (r > 2 ? "," : "") + std::to_string(r);
                                       return s;
                                     }() +
                                     " have float32[4,4], rank 1 has float32[4,5]";
  try {
    hvd::allreduce({"grad.w", w.data(), w.data(), DataType::Float32, {4, cols}});
    EXPECT(false, "no mismatch error");
  } catch (const hvd::collective::MismatchError& e) {
    EXPECT(want == e.what(), "message '%s' want '%s'", e.what(), want.c_str());
  }
  std::vector<float> ok(4, 1.0f);
  hvd::allreduce({"after", ok.data(), ok.data(), DataType::Float32, {4}});
  EXPECT(ok[0] == size, "after mismatch %g", ok[0]);
}

volatile std::sig_atomic_t g_got_sigterm = 0;
void on_sigterm(int) { g_got_sigterm = 1; }

/// A survivor's report after a peer failure: when it failed, that later
/// operations fail the same way, and that shutdown is clean. Returns the
/// worker's exit code (3; 1 if a later operation wrongly succeeded).
int report_peer_failure(int rank, int iter, const hvd::IoError& e) {
  std::printf("rank %d: FAILED_AT %lld iter %d IoError: %s\n", rank, static_cast<long long>(monotonic_ns()), iter,
              e.what());
  std::fflush(stdout);
  try {
    hvd::barrier();
    std::printf("rank %d: barrier after failure succeeded?!\n", rank);
    return 1;
  } catch (const hvd::IoError&) {
  }
  hvd::shutdown();
  return 3;
}

int mode_kill() {
  const int rank = hvd::rank(), size = hvd::size();
  // hvdrun SIGTERMs the survivors as soon as it sees the victim die; a
  // survivor keeps going just long enough to report its own IoError (hvdrun
  // SIGKILLs it after its grace period if the library were to hang).
  std::signal(SIGTERM, on_sigterm);
  std::vector<float> x(1 << 18, 1.0f);
  const char* victim_text = std::getenv("HVD_TEST_KILL_RANK");  // default: the last rank
  const int victim = victim_text ? std::atoi(victim_text) : size - 1;
  if (rank == victim) {
    // Dies at an arbitrary point, most likely inside an allreduce.
    std::thread([rank] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      std::printf("rank %d: KILLING_AT %lld\n", rank, static_cast<long long>(monotonic_ns()));
      std::fflush(stdout);
      raise(SIGKILL);
    }).detach();
  }
  for (int iter = 0; iter < 100000; ++iter) {
    try {
      hvd::allreduce(
          {"grad", x.data(), x.data(), DataType::Float32, {static_cast<int64_t>(x.size())}, ReduceOp::Average});
    } catch (const hvd::IoError& e) {
      return report_peer_failure(rank, iter, e);
    }
  }
  std::printf("rank %d: never saw a failure\n", rank);
  return 1;
}

int mode_cut(bool idle) {
  const int rank = hvd::rank(), size = hvd::size();
  std::signal(SIGTERM, on_sigterm);  // report our own failure even if hvdrun gives up first
  std::vector<float> x(1 << 16, 1.0f);
  std::vector<float> gathered;
  const int64_t give_up = monotonic_ns() + int64_t(60) * 1000000000;
  for (int iter = 0; monotonic_ns() < give_up; ++iter) {
    try {
      if (idle && iter > 50) {
        hvd::collective::AllgatherArgs a{"stall", x.data(), DataType::Float32, {16}, {}};
        a.allocator = [&](const std::vector<int64_t>&, std::size_t bytes) -> void* {
          if (rank == size - 1) {
            std::printf("rank %d: STALLING\n", rank);
            std::fflush(stdout);
            std::this_thread::sleep_for(std::chrono::seconds(8));
          }
          gathered.resize(bytes / sizeof(float) + 1);
          return gathered.data();
        };
        hvd::allgather(a);
      } else {
        hvd::allreduce(
            {"grad", x.data(), x.data(), DataType::Float32, {static_cast<int64_t>(x.size())}, ReduceOp::Average});
      }
    } catch (const hvd::IoError& e) {
      return report_peer_failure(rank, iter, e);
    }
    if (iter == 50) std::printf("rank %d: LOOPING\n", rank);
  }
  std::printf("rank %d: never saw a failure\n", rank);
  return 1;
}

/// Not a test: prints the API's per-call time for a few sizes (float32 sum,
/// in place), to compare with hvdbench's algorithm-only numbers.
void mode_latency() {
  for (std::size_t bytes : {std::size_t(4) << 10, std::size_t(1) << 20, std::size_t(16) << 20}) {
    std::vector<float> x(bytes / 4, 1.0f);
    const int iters = bytes >= (std::size_t(16) << 20) ? 10 : 200;
    for (int i = 0; i < 5; ++i) hvd::allreduce("lat", x);
    hvd::barrier();
    int64_t t0 = monotonic_ns();
    for (int i = 0; i < iters; ++i) hvd::allreduce("lat", x);
    double us = (monotonic_ns() - t0) / 1e3 / iters;
    std::printf("rank %d: allreduce %zu bytes: %.1f us per call\n", hvd::rank(), bytes, us);
  }
}

/// The CPUs the thread named "hvd-background" may run on
/// (/proc/self/task/<tid>/status, Cpus_allowed_list), or "" if none.
std::string background_cpus() {
  DIR* tasks = opendir("/proc/self/task");
  if (tasks == nullptr) return "";
  std::string found;
  while (dirent* e = readdir(tasks)) {
    const std::string dir = std::string("/proc/self/task/") + e->d_name;
    std::ifstream comm(dir + "/comm");
    std::string name;
    if (!std::getline(comm, name) || name != "hvd-background") continue;
    std::ifstream status(dir + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("Cpus_allowed_list:", 0) == 0) found = line.substr(line.find_first_not_of(" \t", 18));
    }
  }
  closedir(tasks);
  return found;
}

int mode_settings() {
  std::printf("rank %d: background cpus %s\n", hvd::rank(), background_cpus().c_str());
  std::vector<float> x(4, 1.0f);
  hvd::allreduce("settings", x);
  EXPECT(x[0] == hvd::size(), "x=%g", x[0]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc < 2) {
    std::fprintf(stderr, "usage: collective_worker ops|order|fusion|mismatch|kill|cut|cutidle|settings [tag]\n");
    return 2;
  }
  const std::string mode = argv[1];
  try {
    const char* delay = std::getenv("HVD_TEST_INIT_DELAY_MS");
    const char* my_rank = std::getenv("HOROVOD_RANK");
    if (mode == "settings" && delay != nullptr && my_rank != nullptr && std::string(my_rank) != "0") {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(delay)));
    }
    hvd::init();
    int rc = 0;
    if (mode == "ops") {
      mode_ops();
    } else if (mode == "order") {
      mode_order();
    } else if (mode == "fusion") {
      mode_fusion();
    } else if (mode == "mismatch") {
      mode_mismatch();
    } else if (mode == "noshutdown") {
      // Returns from main without hvd::shutdown(): exit must still be clean.
      std::vector<float> x(16, 1.0f);
      hvd::allreduce("x", x);
      EXPECT(x[0] == hvd::size(), "x=%g", x[0]);
      std::printf("rank %d: noshutdown ok\n", hvd::rank());
      return g_failures == 0 ? 0 : 1;
    } else if (mode == "latency") {
      mode_latency();
    } else if (mode == "settings") {
      mode_settings();
    } else if (mode == "kill") {
      return mode_kill();
    } else if (mode == "cut" || mode == "cutidle") {
      return mode_cut(mode == "cutidle");
    } else {
      std::fprintf(stderr, "collective_worker: unknown mode '%s'\n", mode.c_str());
      return 2;
    }
    const int rank = hvd::rank();
    hvd::shutdown();
    if (g_failures > 0) return 1;
    std::printf("rank %d: %s ok\n", rank, mode.c_str());
    return rc;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collective_worker: %s\n", e.what());
    return 1;
  }
}
