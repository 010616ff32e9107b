// NCCL without a GPU (cuda/nccl.h): the run-time loader against a fake
// libnccl with the same entry points (fake_nccl.cpp, its path compiled in
// as HVD_FAKE_NCCL_PATH), the job-wide choice, the rank records, and the
// communicator set-up through a Store with ranks as threads.
#include "nccl.h"

#include "hvd/collective/cuda.h"
#include "hvd/common/error.h"
#include "hvd/store/memory_store.h"

#include <catch2/catch.hpp>

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
  CHECK(NcclRankInfo::decode(ok("G", 21803, DevicePathSetting::Staged).encode()).setting ==
        DevicePathSetting::Staged);

  NcclRankInfo c;
  c.reason = "libnccl.so.2: cannot open shared object file: No such file or directory";
  NcclRankInfo d = NcclRankInfo::decode(c.encode());
  CHECK_FALSE(d.available);
  CHECK(d.gpu.empty());
  CHECK(d.reason == c.reason);

  for (const char* bad : {"", "v2 x 1 0 0", "v1", "v1 gpu 7 0 0", "v1 gpu 1 notanumber 0", "v1 gpu 1 0", "v1 gpu 1 0 9",
                          "\x01\x02\x03"}) {
    CHECK_THROWS_AS(NcclRankInfo::decode(bad), hvd::IoError);
  }
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
  CHECK_THROWS_WITH(parse_device_path_setting("fast"),
                    Catch::Contains("HVD_CUDA_ALLREDUCE_PATH='fast': expected auto, nccl, intra-host or staged"));
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
          seen[r] = exchange_nccl_info(store, prefix, r, n, ok("GPU-" + std::to_string(r)),
                                       std::chrono::seconds(10));
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
  std::vector<std::exception_ptr> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      try {
        NcclComm comm(*lib, store, "async/", r, 2, std::chrono::seconds(10));
        if (r == 0) {
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

#ifdef HVD_REAL_NCCL_PATH
// The libnccl found at build time (CUDA 13 ships one): our declarations of
// its entry points against the real library. Without a GPU, forming a
// communicator must fail with NCCL's own message, never crash (this checks
// ncclGetUniqueId, the by-value ncclUniqueId of ncclCommInitRank and
// ncclGetErrorString across the ABI). Bootstrap stays on loopback.
TEST_CASE("cuda: nccl: the real libnccl loads through our declarations") {
  auto lib = NcclLibrary::load(HVD_REAL_NCCL_PATH);
  REQUIRE(lib->available());
  CHECK(lib->version_code() >= 21000);
  CHECK_THAT(lib->version(), Catch::Matches("2\\.[0-9]+\\.[0-9]+"));
  if (hvd::collective::cuda::device_count() == 0) {
    EnvGuard lo("NCCL_SOCKET_IFNAME", "lo");
    hvd::store::InMemoryStore store;
    try {
      NcclComm comm(*lib, store, "real/", 0, 1, std::chrono::seconds(5));
      FAIL("a communicator formed without a GPU");
    } catch (const NcclError& e) {
      CHECK_THAT(e.what(), Catch::StartsWith("ncclCommInitRank failed: "));
      CHECK(e.code() != 0);
    }
    CHECK(store.try_get("real/id").has_value());  // rank 0 published the unique id
  }
}
#endif
