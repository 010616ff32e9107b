#include "ipc_record.h"

#include "hvd/common/error.h"
#include "hvd/store/memory_store.h"

#include <catch2/catch.hpp>

#include <thread>

using namespace hvd::collective::cuda::detail;
using namespace std::chrono_literals;

namespace {
IpcRecord sample(int rank, int slots = 3) {
  IpcRecord r;
  r.local_rank = rank;
  r.device = rank % 2;
  r.pid = 1000 + rank;
  for (std::size_t i = 0; i < r.device_uuid.size(); ++i) r.device_uuid[i] = static_cast<uint8_t>(i * 7 + rank);
  for (std::size_t i = 0; i < r.buffer.size(); ++i) r.buffer[i] = static_cast<uint8_t>(255 - i - rank);
  r.slot_bytes = 1u << 20;
  r.slots = slots;
  for (int s = 0; s < slots; ++s) {
    IpcHandle a{}, b{};
    a.fill(static_cast<uint8_t>(s + 1));
    b.fill(static_cast<uint8_t>(100 + s));
    a[0] = static_cast<uint8_t>(rank);
    r.ready_events.push_back(a);
    r.done_events.push_back(b);
  }
  r.control_name = rank == 0 ? "/hvd-cuda-42-abcdef" : "";
  return r;
}

void require_equal(const IpcRecord& a, const IpcRecord& b) {
  CHECK(a.local_rank == b.local_rank);
  CHECK(a.device == b.device);
  CHECK(a.pid == b.pid);
  CHECK(a.device_uuid == b.device_uuid);
  CHECK(a.buffer == b.buffer);
  CHECK(a.slot_bytes == b.slot_bytes);
  CHECK(a.slots == b.slots);
  CHECK(a.ready_events == b.ready_events);
  CHECK(a.done_events == b.done_events);
  CHECK(a.control_name == b.control_name);
}
}  // namespace

TEST_CASE("cuda: IPC records round-trip every field", "[cuda][ipc]") {
  for (int slots : {0, 1, 4}) {
    const IpcRecord r = sample(0, slots);
    require_equal(parse_ipc_record(serialize(r), "k"), r);
  }
}

TEST_CASE("cuda: malformed IPC records are IoErrors, never wild values", "[cuda][ipc]") {
  const auto good = serialize(sample(0));
  // Every truncation.
  for (std::size_t n = 0; n < good.size(); ++n) {
    hvd::store::Bytes cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    CHECK_THROWS_AS(parse_ipc_record(cut, "key"), hvd::IoError);
  }
  auto bad = good;
  bad[0] ^= 0xff;
  CHECK_THROWS_WITH(parse_ipc_record(bad, "the/key"), Catch::Contains("the/key") && Catch::Contains("magic"));
  bad = good;
  bad[4] = 9;  // version
  CHECK_THROWS_WITH(parse_ipc_record(bad, "k"), Catch::Contains("version 9"));
  bad = good;
  bad.push_back(0);
  CHECK_THROWS_WITH(parse_ipc_record(bad, "k"), Catch::Contains("trailing"));
  // A huge slot count is refused before anything is allocated.
  auto r = sample(0, 1);
  bad = serialize(r);
  const std::size_t slots_at = 4 + 4 + 4 + 4 + 4 + 16 + 64 + 8;
  bad[slots_at + 3] = 0x7f;
  CHECK_THROWS_WITH(parse_ipc_record(bad, "k"), Catch::Contains("slots"));
  // Garbage of every small length.
  for (int n = 0; n < 300; n += 7) {
    hvd::store::Bytes junk(static_cast<std::size_t>(n), static_cast<uint8_t>(n));
    CHECK_THROWS_AS(parse_ipc_record(junk, "k"), hvd::IoError);
  }
}

TEST_CASE("cuda: IPC records are exchanged through the store under per-rank keys", "[cuda][ipc]") {
  hvd::store::InMemoryStore store;
  const std::string prefix = "gen3/cuda/host_1/";
  CHECK(ipc_record_key(prefix, 2) == "gen3/cuda/host_1/ipc/rank_2");
  const int n = 4;
  std::vector<std::vector<IpcRecord>> got(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5 * r));
      publish_ipc_record(store, prefix, sample(r));
      got[r] = gather_ipc_records(store, prefix, sample(r), n, 5s);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    REQUIRE(got[r].size() == static_cast<std::size_t>(n));
    for (int p = 0; p < n; ++p) require_equal(got[r][p], sample(p));
  }
}

TEST_CASE("cuda: IPC record exchange reports missing, misplaced and inconsistent ranks", "[cuda][ipc]") {
  hvd::store::InMemoryStore store;
  const std::string prefix = "p/";
  publish_ipc_record(store, prefix, sample(0));
  CHECK_THROWS_WITH(gather_ipc_records(store, prefix, sample(0), 2, 100ms), Catch::Contains("p/ipc/rank_1"));
  // rank 1's key holding rank 0's record
  store.set(ipc_record_key(prefix, 1), serialize(sample(0)));
  CHECK_THROWS_WITH(gather_ipc_records(store, prefix, sample(0), 2, 1s), Catch::Contains("claims local rank 0"));
  // Different slot layouts.
  publish_ipc_record(store, prefix, sample(1, 5));
  CHECK_THROWS_AS(gather_ipc_records(store, prefix, sample(0), 2, 1s), hvd::InvalidArgument);
  // Garbage under a key.
  store.set(ipc_record_key(prefix, 1), hvd::store::Bytes{1, 2, 3});
  CHECK_THROWS_AS(gather_ipc_records(store, prefix, sample(0), 2, 1s), hvd::IoError);
}
