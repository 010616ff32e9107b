#include "staging_pool.h"

#include "hvd/common/error.h"

#include <catch2/catch.hpp>

#include <cstdlib>
#include <set>
#include <thread>

using namespace hvd::collective::cuda::detail;

namespace {
/// Counts calls and checks every release matches an allocation.
struct CountingAllocator final : HostAllocator {
  struct Counts {
    int allocs = 0;
    int frees = 0;
    std::set<void*> live;
  };
  explicit CountingAllocator(Counts& c) : c(c) {}
  void* allocate(std::size_t bytes) override {
    void* p = std::malloc(bytes);
    REQUIRE(p != nullptr);
    ++c.allocs;
    c.live.insert(p);
    return p;
  }
  void release(void* p) noexcept override {
    ++c.frees;
    c.live.erase(p);
    std::free(p);
  }
  Counts& c;
};
}  // namespace

TEST_CASE("cuda: staging pool reuses buffers: a warm loop never allocates", "[cuda][staging]") {
  CountingAllocator::Counts counts;
  {
    StagingPool pool(std::make_unique<CountingAllocator>(counts), 64u << 20, 1u << 20);
    for (int i = 0; i < 100; ++i) {
      auto a = pool.acquire(3u << 20);
      auto b = pool.acquire(1000);
      REQUIRE(a.size() >= (3u << 20));
      REQUIRE(b.size() >= 1000);
      CHECK(a.data() != b.data());
      a.data()[0] = 1;
      b.data()[b.size() - 1] = 2;
    }
    CHECK(counts.allocs == 2);
    const auto s = pool.stats();
    CHECK(s.allocations == 2);
    CHECK(s.reuses == 198);
    CHECK(s.bytes_held == (4u << 20) + (1u << 20));
  }
  CHECK(counts.frees == 2);
  CHECK(counts.live.empty());
}

TEST_CASE("cuda: staging pool hands out the smallest buffer that fits", "[cuda][staging]") {
  CountingAllocator::Counts counts;
  StagingPool pool(std::make_unique<CountingAllocator>(counts), 64u << 20, 1u << 20);
  uint8_t* small;
  uint8_t* big;
  {
    auto a = pool.acquire(8u << 20);
    auto b = pool.acquire(1u << 20);
    big = a.data();
    small = b.data();
  }
  CHECK(pool.acquire(100).data() == small);
  CHECK(pool.acquire(2u << 20).data() == big);
  CHECK(counts.allocs == 2);
  // Sizes round up to powers of two, so slowly growing requests share one.
  auto c = pool.acquire((8u << 20) + 1);
  CHECK(c.size() == (16u << 20));
}

TEST_CASE("cuda: staging pool stays under its cap and fails clearly when leases fill it", "[cuda][staging]") {
  CountingAllocator::Counts counts;
  StagingPool pool(std::make_unique<CountingAllocator>(counts), 4u << 20, 1u << 20);
  CHECK_THROWS_AS(pool.acquire((4u << 20) + 1), hvd::InvalidArgument);
  {
    auto a = pool.acquire(1u << 20);
    auto b = pool.acquire(1u << 20);
  }
  // Two idle 1 MiB buffers; a 4 MiB request evicts them.
  auto big = pool.acquire(4u << 20);
  CHECK(pool.stats().releases == 2);
  CHECK(pool.stats().bytes_held == (4u << 20));
  CHECK_THROWS_WITH(pool.acquire(1), Catch::Contains("exhausted"));
  // Moving a lease keeps exactly one owner.
  StagingPool::Lease moved = std::move(big);
  CHECK_FALSE(big);
  CHECK(moved);
  moved = StagingPool::Lease();
  CHECK(pool.acquire(1).size() == (4u << 20));
}

TEST_CASE("cuda: staging pool is safe to share between threads", "[cuda][staging]") {
  CountingAllocator::Counts counts;
  StagingPool pool(std::make_unique<CountingAllocator>(counts), 64u << 20, 1u << 20);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        auto l = pool.acquire(static_cast<std::size_t>(1 + t) << 20);
        l.data()[0] = static_cast<uint8_t>(t);
      }
    });
  }
  for (auto& th : threads) th.join();
  CHECK(counts.allocs <= 8);
}
