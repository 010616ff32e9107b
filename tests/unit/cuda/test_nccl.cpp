// NCCL without a GPU (cuda/nccl.h): the run-time loader against a fake
// libnccl with the same entry points (fake_nccl.cpp, its path compiled in
// as HVD_FAKE_NCCL_PATH; HVD_FAKE_NCCL_LEGACY_PATH is a build without
// ncclCommInitRankConfig), the job-wide choice, the rank records, and the
// communicator set-up through a Store with ranks as threads: non-blocking
// and bounded by the timeout, or blocking with an old NCCL.
#include "nccl.h"

#include "hvd/collective/cuda.h"
#include "hvd/common/error.h"
#include "hvd/store/memory_store.h"

#include <catch2/catch.hpp>

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

using namespace hvd::collective;
using namespace hvd::collective::cuda::detail;

namespace {

std::string fake_path() { return HVD_FAKE_NCCL_PATH; }

NcclRankInfo ok(const std::string& gpu, int version = 21803, DevicePathSetting setting = DevicePathSetting::Auto) {
  NcclRankInfo i;
  i.gpu = gpu;
  i.available = true;
  i.version = version;
  i.setting = setting;
  return i;
}

std::vector<NcclRankInfo> with_setting(std::vector<NcclRankInfo> ranks, DevicePathSetting s) {
  for (auto& r : ranks) r.setting = s;
  return ranks;
}

struct EnvGuard {
  std::string name;
  EnvGuard(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~EnvGuard() { unsetenv(name.c_str()); }
};

/// A counter the fake library at `path` (already loaded) exports beside
/// NCCL's API: fake_nccl_aborts, fake_nccl_nonblocking_inits.
int fake_counter(const std::string& path, const char* name) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  auto fn = reinterpret_cast<int (*)()>(dlsym(handle, name));
  REQUIRE(fn != nullptr);
  const int value = fn();
  dlclose(handle);
  return value;
}

/// Runs `body(rank)` for ranks [0, n) on a thread each; what each threw.
template <typename Body>
std::vector<std::exception_ptr> run_ranks(int n, Body body) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

void rethrow_any(const std::vector<std::exception_ptr>& errors) {
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

}  // namespace

TEST_CASE("cuda: nccl: dtype and op values follow NCCL's ABI") {
  CHECK(nccl_dtype(DataType::Int8) == 0);
  CHECK(nccl_dtype(DataType::UInt8) == 1);
  CHECK(nccl_dtype(DataType::Int32) == 2);
  CHECK(nccl_dtype(DataType::Int64) == 4);
  CHECK(nccl_dtype(DataType::Float16) == 6);
  CHECK(nccl_dtype(DataType::Float32) == 7);
  CHECK(nccl_dtype(DataType::Float64) == 8);
  CHECK(nccl_dtype(DataType::BFloat16) == 9);
  // bool is never reduced (check_request refuses it); broadcast moves bytes
  CHECK_THROWS_AS(nccl_dtype(DataType::Bool), hvd::InvalidArgument);
  // NCCL has no int16: such an allreduce takes the library's own path
  CHECK_THROWS_AS(nccl_dtype(DataType::Int16), hvd::InvalidArgument);
  for (DataType t : {DataType::Int8, DataType::UInt8, DataType::Int32, DataType::Int64, DataType::Float16,
                     DataType::Float32, DataType::Float64, DataType::BFloat16}) {
    CHECK(nccl_reduces(t));
    CHECK_NOTHROW(nccl_dtype(t));
  }
  CHECK_FALSE(nccl_reduces(DataType::Int16));
  CHECK_FALSE(nccl_reduces(DataType::Bool));
  CHECK(nccl_op(ReduceOp::Sum) == 0);
  CHECK(nccl_op(ReduceOp::Average) == 0);  // divided afterwards by our kernel
  CHECK(nccl_op(ReduceOp::Product) == 1);
  CHECK(nccl_op(ReduceOp::Max) == 2);
  CHECK(nccl_op(ReduceOp::Min) == 3);
}

TEST_CASE("cuda: nccl: a missing or incomplete library is unavailable with the reason, never a crash") {
  auto missing = NcclLibrary::load("/nonexistent/libnccl.so.2");
  CHECK_FALSE(missing->available());
  CHECK(missing->unavailable().find("/nonexistent/libnccl.so.2") != std::string::npos);
  CHECK(missing->version_code() == 0);
  CHECK(missing->version().empty());

  auto libc = NcclLibrary::load("libc.so.6");  // loads, but has none of NCCL's functions
  CHECK_FALSE(libc->available());
  CHECK(libc->unavailable() == "libc.so.6: ncclGetVersion missing");
}

TEST_CASE("cuda: nccl: the fake library loads, reports its version, and old versions are refused") {
  auto lib = NcclLibrary::load(fake_path());
  REQUIRE(lib->available());
  CHECK(lib->version_code() == 21803);
  CHECK(lib->version() == "2.18.3");
  {
    EnvGuard old("FAKE_NCCL_VERSION", "20804");
    auto lib_old = NcclLibrary::load(fake_path());
    CHECK_FALSE(lib_old->available());
    CHECK(lib_old->unavailable().find("NCCL 2.8.4 is older than 2.10") != std::string::npos);
  }
}

TEST_CASE("cuda: nccl: rank records round-trip and garbage is refused") {
  NcclRankInfo a = ok("GPU-0a1b2c3d");
  NcclRankInfo b = NcclRankInfo::decode(a.encode());
  CHECK(b.gpu == a.gpu);
  CHECK(b.available);
  CHECK(b.version == 21803);
  CHECK(b.reason.empty());
  CHECK(b.setting == DevicePathSetting::Auto);
  CHECK(NcclRankInfo::decode(ok("G", 21803, DevicePathSetting::Staged).encode()).setting == DevicePathSetting::Staged);

  NcclRankInfo c;
  c.reason = "libnccl.so.2: cannot open shared object file: No such file or directory";
  NcclRankInfo d = NcclRankInfo::decode(c.encode());
  CHECK_FALSE(d.available);
  CHECK(d.gpu.empty());
  CHECK(d.reason == c.reason);

  CHECK(d.reachable.empty());
  c.reachable = {"GPU-aa", "GPU-bb"};
  c.place = {3, 4, 2};
  c.setting = DevicePathSetting::Hierarchical;
  const NcclRankInfo e = NcclRankInfo::decode(c.encode());
  CHECK(e.reachable == std::vector<std::string>{"GPU-aa", "GPU-bb"});
  CHECK(e.setting == DevicePathSetting::Hierarchical);
  CHECK((e.place.local_rank == 3 && e.place.local_size == 4 && e.place.cross_rank == 2));
  CHECK(e.reason == c.reason);

  for (const char* bad : {"", "v1 x 1 0 0 - 0 1 0", "v1 gpu 1 0 0", "v2", "v2 gpu 7 0 0 - 0 1 0",
                          "v2 gpu 1 notanumber 0 - 0 1 0", "v2 gpu 1 0", "v2 gpu 1 0 9 - 0 1 0", "v2 gpu 1 0 0",
                          "v2 gpu 1 0 0 A,B", "v2 gpu 1 0 0 - 0 x 0", "\x01\x02\x03"}) {
    CHECK_THROWS_AS(NcclRankInfo::decode(bad), hvd::IoError);
  }
}

TEST_CASE("cuda: nccl: the intra-host path needs every rank to reach its host's other GPUs, by UUID") {
  auto at = [](NcclRankInfo i, int cross_rank, std::vector<std::string> reach) {
    i.place.cross_rank = cross_rank;
    i.reachable = std::move(reach);
    return i;
  };
  std::string why;
  // One host, three GPUs with peer access all round.
  std::vector<NcclRankInfo> ranks = {at(ok("A"), 0, {"A", "B", "C"}), at(ok("B"), 0, {"A", "B", "C"}),
                                     at(ok("C"), 0, {"A", "B", "C"})};
  CHECK(all_peer_access(ranks, &why));
  // Rank 1 cannot reach C.
  ranks[1].reachable = {"A", "B"};
  CHECK_FALSE(all_peer_access(ranks, &why));
  CHECK(why.find("rank 1's GPU cannot access rank 2's GPU directly") != std::string::npos);
  // Each process sees only its own GPU (CUDA_VISIBLE_DEVICES per rank):
  // every rank says device 0, but the UUIDs differ and nobody reaches the
  // others.
  CHECK_FALSE(all_peer_access({at(ok("A"), 0, {"A"}), at(ok("B"), 0, {"B"})}, &why));
  // Ranks sharing one GPU need nothing more.
  CHECK(all_peer_access({at(ok("A"), 0, {"A"}), at(ok("A"), 0, {"A"})}, &why));
  // Ranks on other hosts are not this host's peers.
  CHECK(all_peer_access({at(ok("A"), 0, {"A"}), at(ok("B"), 1, {"B"})}, &why));
  CHECK(all_peer_access({}, nullptr));
}

TEST_CASE("cuda: nccl: the job uses NCCL only when every rank can and no GPU is shared") {
  std::string why;
  CHECK(choose_nccl({ok("A"), ok("B")}, &why));
  CHECK(choose_nccl(with_setting({ok("A"), ok("B"), ok("C"), ok("D")}, DevicePathSetting::Nccl), &why));

  CHECK_FALSE(choose_nccl({ok("A")}, &why));
  CHECK(why == "a job of one rank");

  CHECK_FALSE(choose_nccl({ok("A"), ok("A")}, &why));
  CHECK(why.find("rank 1 shares a GPU") != std::string::npos);

  NcclRankInfo none;
  none.reason = "libnccl.so.2: cannot open shared object file";
  CHECK_FALSE(choose_nccl({ok("A"), none}, &why));
  CHECK(why == "rank 1 cannot load NCCL (libnccl.so.2: cannot open shared object file)");

  CHECK_FALSE(choose_nccl({ok("A"), ok("B", 21903)}, &why));
  CHECK(why.find("different NCCL versions") != std::string::npos);

  CHECK_FALSE(choose_nccl({ok("A"), ok("")}, &why));
  CHECK(why.find("rank 1 did not identify its GPU") != std::string::npos);

  CHECK_FALSE(choose_nccl(with_setting({ok("A"), ok("B")}, DevicePathSetting::Staged), &why));
  CHECK_FALSE(choose_nccl(with_setting({ok("A"), ok("B")}, DevicePathSetting::IntraHost), &why));
  // Ranks that disagree never diverge: nobody uses NCCL.
  CHECK_FALSE(choose_nccl({ok("A"), ok("B", 21803, DevicePathSetting::Staged)}, &why));
  CHECK(why.find("ranks 0 and 1 set HVD_CUDA_ALLREDUCE_PATH differently") != std::string::npos);

  // Required but impossible: every rank throws the same message.
  CHECK_THROWS_WITH(choose_nccl(with_setting({ok("A"), ok("A")}, DevicePathSetting::Nccl), nullptr),
                    Catch::Contains("HVD_CUDA_ALLREDUCE_PATH=nccl, but NCCL cannot be used: rank 1 shares a GPU"));
}

TEST_CASE("cuda: nccl: HVD_CUDA_ALLREDUCE_PATH values") {
  CHECK(parse_device_path_setting("auto") == DevicePathSetting::Auto);
  CHECK(parse_device_path_setting("") == DevicePathSetting::Auto);
  CHECK(parse_device_path_setting("nccl") == DevicePathSetting::Nccl);
  CHECK(parse_device_path_setting("intra-host") == DevicePathSetting::IntraHost);
  CHECK(parse_device_path_setting("staged") == DevicePathSetting::Staged);
  CHECK(parse_device_path_setting("hierarchical") == DevicePathSetting::Hierarchical);
  CHECK_THROWS_WITH(parse_device_path_setting("fast"),
                    Catch::Contains("HVD_CUDA_ALLREDUCE_PATH='fast': expected auto, nccl, intra-host, staged or "
                                    "hierarchical"));
  // hierarchical never uses NCCL.
  std::string why;
  CHECK_FALSE(choose_nccl(with_setting({ok("A"), ok("B")}, DevicePathSetting::Hierarchical), &why));
  CHECK(why == "HVD_CUDA_ALLREDUCE_PATH chooses another path");
}

TEST_CASE("cuda: nccl: records exchanged through the store, communicator formed, collectives run (fake NCCL)") {
  auto lib = NcclLibrary::load(fake_path());
  REQUIRE(lib->available());
  for (int n : {2, 3, 4}) {
    hvd::store::InMemoryStore store;
    const std::string prefix = "gen0/cuda/nccl/" + std::to_string(n) + "/";
    std::vector<std::vector<NcclRankInfo>> seen(n);
    std::vector<std::vector<float>> sums(n), maxes(n);
    std::vector<std::vector<int64_t>> bcast(n);
    std::vector<std::exception_ptr> errors(n);
    std::vector<std::thread> ranks;
    for (int r = 0; r < n; ++r) {
      ranks.emplace_back([&, r] {
        try {
          seen[r] = exchange_nccl_info(store, prefix, r, n, ok("GPU-" + std::to_string(r)), std::chrono::seconds(10));
          if (!choose_nccl(seen[r], nullptr)) return;
          NcclComm comm(*lib, store, prefix, r, n, std::chrono::seconds(10));
          std::vector<float> in(5);
          for (int i = 0; i < 5; ++i) in[i] = static_cast<float>(r * 10 + i);
          sums[r].assign(5, -1.0f);
          comm.allreduce(in.data(), sums[r].data(), 5, DataType::Float32, ReduceOp::Sum, nullptr);
          maxes[r] = in;  // in place
          comm.allreduce(maxes[r].data(), maxes[r].data(), 5, DataType::Float32, ReduceOp::Max, nullptr);
          bcast[r].assign(3, r == n - 1 ? 77 : -1);
          comm.broadcast(bcast[r].data(), bcast[r].data(), 3 * sizeof(int64_t), n - 1, nullptr);
          comm.check_async();
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    }
    for (auto& t : ranks) t.join();
    for (int r = 0; r < n; ++r) {
      INFO("n=" << n << " rank " << r);
      if (errors[r]) std::rethrow_exception(errors[r]);
      REQUIRE(seen[r].size() == static_cast<std::size_t>(n));
      for (int q = 0; q < n; ++q) CHECK(seen[r][q].gpu == "GPU-" + std::to_string(q));
      for (int i = 0; i < 5; ++i) {
        float want = 0;
        for (int q = 0; q < n; ++q) want += static_cast<float>(q * 10 + i);
        CHECK(sums[r][i] == want);
        CHECK(maxes[r][i] == static_cast<float>((n - 1) * 10 + i));
      }
      CHECK(bcast[r] == std::vector<int64_t>(3, 77));
    }
  }
}

TEST_CASE("cuda: nccl: an asynchronous communicator error becomes NcclError with NCCL's text") {
  auto lib = NcclLibrary::load(fake_path());
  REQUIRE(lib->available());
  hvd::store::InMemoryStore store;
  std::atomic<int> formed{0};
  std::vector<std::exception_ptr> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        NcclComm comm(*lib, store, "async/", r, 2, std::chrono::seconds(10));
        ++formed;
        if (r == 0) {
          // Rank 1 polls its set-up's state until it formed: only then may
          // the knob say that the communicator failed.
          while (formed.load() < 2) std::this_thread::yield();
          EnvGuard err("FAKE_NCCL_ASYNC_ERROR", "6");
          try {
            comm.check_async();
            FAIL("no error reported");
          } catch (const NcclError& e) {
            CHECK(e.code() == 6);
            CHECK(std::string(e.what()) ==
                  "NCCL communicator failed: remote process exited or there was a network error (fake) (6)");
          }
          comm.abort();
        }
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

TEST_CASE("cuda: nccl: a rank whose peers never publish times out, and a bad unique id is refused") {
  auto lib = NcclLibrary::load(fake_path());
  REQUIRE(lib->available());
  hvd::store::InMemoryStore store;
  CHECK_THROWS_AS(exchange_nccl_info(store, "lonely/", 1, 3, ok("B"), std::chrono::milliseconds(100)),
                  hvd::TimeoutError);
  store.set_string("badid/id", "short");
  CHECK_THROWS_WITH(NcclComm(*lib, store, "badid/", 1, 2, std::chrono::milliseconds(100)),
                    Catch::Contains("NCCL unique id at 'badid/id' has 5 bytes, expected 128"));
}

TEST_CASE("cuda: nccl: a non-blocking set-up forms the communicator and back-to-back collectives settle (fake NCCL)") {
  auto lib = NcclLibrary::load(fake_path());
  REQUIRE(lib->available());
  REQUIRE(lib->bounded_setup());
  constexpr int kSteps = 20;
  for (int n : {2, 3, 4}) {
    INFO("n=" << n);
    hvd::store::InMemoryStore store;
    const int inits = fake_counter(fake_path(), "fake_nccl_nonblocking_inits");
    std::vector<std::vector<int32_t>> sums(n);
    std::vector<std::vector<uint8_t>> bcast(n);
    rethrow_any(run_ranks(n, [&](int r) {
      NcclComm comm(*lib, store, "nonblocking/", r, n, std::chrono::seconds(10));
      // The fake refuses a call before the previous one finished, as NCCL
      // does on a non-blocking communicator: each step must settle first.
      sums[r].assign(3, 0);
      for (int step = 0; step < kSteps; ++step) {
        std::vector<int32_t> in{r + 1, step, 1};
        std::vector<int32_t> out(3, -1);
        comm.allreduce(in.data(), out.data(), 3, DataType::Int32, ReduceOp::Sum, nullptr);
        for (int i = 0; i < 3; ++i) sums[r][i] += out[i];
      }
      bcast[r].assign(4, static_cast<uint8_t>(r == 1 ? 9 : 0));
      comm.broadcast(bcast[r].data(), bcast[r].data(), 4, 1, nullptr);
      comm.check_async();
    }));
    CHECK(fake_counter(fake_path(), "fake_nccl_nonblocking_inits") - inits == n);
    const int32_t ranks_sum = n * (n + 1) / 2;
    for (int r = 0; r < n; ++r) {
      INFO("rank " << r);
      CHECK(sums[r] == std::vector<int32_t>{kSteps * ranks_sum, n * kSteps * (kSteps - 1) / 2, kSteps * n});
      CHECK(bcast[r] == std::vector<uint8_t>(4, 9));
    }
  }
}

TEST_CASE("cuda: nccl: a rank that never joins the set-up times the others out within the bound and they abort") {
  auto lib = NcclLibrary::load(fake_path());
  REQUIRE(lib->bounded_setup());
  hvd::store::InMemoryStore store;
  constexpr int kRanks = 3;  // rank 2 publishes its record, then dies before the set-up
  const milliseconds timeout(300);
  const int aborts = fake_counter(fake_path(), "fake_nccl_aborts");
  std::vector<milliseconds> took(kRanks);
  auto errors = run_ranks(kRanks, [&](int r) {
    if (r == kRanks - 1) return;
    const auto t0 = Clock::now();
    try {
      NcclComm comm(*lib, store, "dead/", r, kRanks, timeout);
    } catch (...) {
      took[r] = std::chrono::duration_cast<milliseconds>(Clock::now() - t0);
      throw;
    }
  });
  for (int r = 0; r < kRanks - 1; ++r) {
    INFO("rank " << r);
    REQUIRE(errors[r]);
    CHECK_THROWS_AS(std::rethrow_exception(errors[r]), hvd::TimeoutError);
    CHECK_THROWS_WITH(std::rethrow_exception(errors[r]),
                      "rank " + std::to_string(r) +
                          ": the NCCL communicator of 3 ranks did not form within 300 ms (HOROVOD_START_TIMEOUT): a "
                          "peer may have died before joining the NCCL communicator; see the other ranks' logs");
    CHECK(took[r] >= timeout);
    CHECK(took[r] < timeout + milliseconds(1700));  // polled, not stuck: generous for a loaded machine
  }
  CHECK_FALSE(errors[kRanks - 1]);
  // Each waiting rank aborted its half-made communicator.
  CHECK(fake_counter(fake_path(), "fake_nccl_aborts") - aborts == kRanks - 1);
}

TEST_CASE("cuda: nccl: a non-blocking set-up that NCCL fails becomes NcclError with NCCL's text and is aborted") {
  auto lib = NcclLibrary::load(fake_path());
  REQUIRE(lib->bounded_setup());
  hvd::store::InMemoryStore store;
  const int aborts = fake_counter(fake_path(), "fake_nccl_aborts");
  EnvGuard fail("FAKE_NCCL_INIT_ERROR", "6");
  auto errors = run_ranks(2, [&](int r) { NcclComm comm(*lib, store, "initfail/", r, 2, std::chrono::seconds(10)); });
  for (const auto& e : errors) {
    REQUIRE(e);
    try {
      std::rethrow_exception(e);
    } catch (const NcclError& x) {
      CHECK(x.code() == 6);
      CHECK(std::string(x.what()) ==
            "ncclCommInitRankConfig failed: remote process exited or there was a network error (fake) (6)");
    }
  }
  CHECK(fake_counter(fake_path(), "fake_nccl_aborts") - aborts == 2);
}

TEST_CASE("cuda: nccl: without ncclCommInitRankConfig (NCCL before 2.14) the set-up falls back to ncclCommInitRank") {
  const std::string legacy = HVD_FAKE_NCCL_LEGACY_PATH;
  auto lib = NcclLibrary::load(legacy);
  REQUIRE(lib->available());
  CHECK(lib->version() == "2.13.4");
  CHECK_FALSE(lib->bounded_setup());
  for (int n : {2, 3}) {
    INFO("n=" << n);
    hvd::store::InMemoryStore store;
    std::vector<std::vector<double>> out(n);
    rethrow_any(run_ranks(n, [&](int r) {
      NcclComm comm(*lib, store, "legacy/", r, n, std::chrono::seconds(10));
      out[r].assign(2, static_cast<double>(r));
      comm.allreduce(out[r].data(), out[r].data(), 2, DataType::Float64, ReduceOp::Max, nullptr);
      comm.check_async();
    }));
    for (int r = 0; r < n; ++r) CHECK(out[r] == std::vector<double>(2, n - 1.0));
  }
  CHECK(fake_counter(legacy, "fake_nccl_nonblocking_inits") == 0);
}

// The libnccl found at build time (CUDA 13 ships 2.28) has the entry point
// of the bounded set-up, and our loader resolves it.
TEST_CASE("cuda: nccl: the real libnccl exports ncclCommInitRankConfig and the loader finds it") {
#ifdef HVD_REAL_NCCL_PATH
  const std::string path = HVD_REAL_NCCL_PATH;
#else
  const std::string path;
#endif
  if (path.empty() || access(path.c_str(), R_OK) != 0) {
    WARN("SKIPPED: no libnccl was found at build time (or it is gone: '" << path << "')");
    return;
  }
  auto lib = NcclLibrary::load(path);
  REQUIRE(lib->available());
  CHECK(lib->version_code() >= 21400);
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  REQUIRE(handle != nullptr);
  CHECK(dlsym(handle, "ncclCommInitRankConfig") != nullptr);
  dlclose(handle);
  CHECK(lib->bounded_setup());
}

#ifdef HVD_REAL_NCCL_PATH
// The libnccl found at build time (CUDA 13 ships one): our declarations of
// its entry points against the real library. Without a GPU, forming a
// communicator must fail with NCCL's own message, never crash (this checks
// ncclGetUniqueId, the by-value ncclUniqueId of the set-up call and
// ncclGetErrorString across the ABI; NCCL fails on the missing device
// before it reads our ncclConfig_t). With a GPU, a communicator of one rank
// forms through the non-blocking set-up, which NCCL accepts only with a
// well-formed ncclConfig_t. Bootstrap stays on loopback.
TEST_CASE("cuda: nccl: the real libnccl loads through our declarations") {
  auto lib = NcclLibrary::load(HVD_REAL_NCCL_PATH);
  REQUIRE(lib->available());
  CHECK(lib->version_code() >= 21000);
  CHECK_THAT(lib->version(), Catch::Matches("2\\.[0-9]+\\.[0-9]+"));
  const std::string setup = lib->bounded_setup() ? "ncclCommInitRankConfig" : "ncclCommInitRank";
  EnvGuard lo("NCCL_SOCKET_IFNAME", "lo");
  hvd::store::InMemoryStore store;
  if (hvd::collective::cuda::device_count() == 0) {
    try {
      NcclComm comm(*lib, store, "real/", 0, 1, std::chrono::seconds(5));
      FAIL("a communicator formed without a GPU");
    } catch (const NcclError& e) {
      CHECK_THAT(e.what(), Catch::StartsWith(setup + " failed: "));
      CHECK(e.code() != 0);
    }
  } else {
    NcclComm comm(*lib, store, "real/", 0, 1, std::chrono::seconds(30));
    comm.check_async();
  }
  CHECK(store.try_get("real/id").has_value());  // rank 0 published the unique id
}
#endif
