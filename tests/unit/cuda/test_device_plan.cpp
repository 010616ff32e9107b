// The Context's decisions for device operations (device_plan.h): which
// allreduce path, the store prefix of each intra-host allreducer, the checks
// on an agreed response's devices. Identical inputs on every rank must give
// identical answers, so these are pure functions.
#include "device_plan.h"

#include "hvd/collective/cuda.h"
#include "hvd/common/error.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using namespace hvd::collective::cuda::detail;

namespace {
JobShape job(int rank, int size, int local_rank, int local_size, int cross_rank, int cross_size) {
  return JobShape{rank, size, local_rank, local_size, cross_rank, cross_size};
}
}  // namespace

TEST_CASE("cuda: device allreduce path - one host uses IPC, several hosts (or > 16 local ranks) stage") {
  CHECK(choose_allreduce_path(job(0, 1, 0, 1, 0, 1)) == AllreducePath::IntraHost);
  CHECK(choose_allreduce_path(job(3, 4, 3, 4, 0, 1)) == AllreducePath::IntraHost);
  CHECK(choose_allreduce_path(job(5, 16, 5, 16, 0, 1)) == AllreducePath::IntraHost);
  CHECK(choose_allreduce_path(job(5, 17, 5, 17, 0, 1)) == AllreducePath::Staged);
  CHECK(choose_allreduce_path(job(3, 4, 1, 2, 1, 2)) == AllreducePath::Staged);
  // Uneven hosts (local_size != size although this host's cross_size says 1
  // would be inconsistent): never the IPC path across ranks it cannot reach.
  CHECK(choose_allreduce_path(job(0, 3, 0, 2, 0, 1)) == AllreducePath::Staged);
  CHECK(std::string(path_name(AllreducePath::IntraHost)) == "intra-host");
  CHECK(std::string(path_name(AllreducePath::Staged)) == "staged");
}

TEST_CASE("cuda: intra-host allreducer prefixes are unique per generation, host and creation") {
  CHECK(intra_host_prefix("gen0/", 0, 0) == "gen0/cuda/host_0/0/");
  CHECK(intra_host_prefix("gen0/", 2, 7) == "gen0/cuda/host_2/7/");
  CHECK(intra_host_prefix("elastic/w3/", 1, 1) != intra_host_prefix("elastic/w4/", 1, 1));
}

TEST_CASE("cuda: an agreed device response lists one device >= 0 per rank") {
  CHECK_NOTHROW(check_devices({0, 1, 0}, job(0, 3, 0, 3, 0, 1)));
  CHECK_THROWS_WITH(check_devices({0, 1}, job(0, 3, 0, 3, 0, 1)),
                    Catch::Contains("lists 2 devices for a job of size 3"));
  CHECK_THROWS_AS(check_devices({0, -1, 0}, job(0, 3, 0, 3, 0, 1)), hvd::InvalidArgument);
  CHECK_THROWS_WITH(check_devices({0, -1, 0}, job(0, 3, 0, 3, 0, 1)), Catch::Contains("rank 1 passed host buffers"));
}

TEST_CASE("cuda: pointer_device says host memory is on no device (without a GPU or CUDA alike)") {
  std::vector<float> host(16);
  CHECK(hvd::collective::cuda::pointer_device(host.data()) == -1);
  CHECK(hvd::collective::cuda::pointer_device(nullptr) == -1);
}

TEST_CASE("cuda: hierarchical path groups - the ranks of one local rank, by cross rank, on alike hosts only") {
  // Two hosts of 2 ranks, host-major rank order.
  std::vector<RankPlace> two_by_two = {{0, 2, 0}, {1, 2, 0}, {0, 2, 1}, {1, 2, 1}};
  std::string why = "stale";
  CHECK(cross_group(two_by_two, 0, &why) == std::vector<int>{0, 2});
  CHECK(why.empty());
  CHECK(cross_group(two_by_two, 3, nullptr) == std::vector<int>{1, 3});
  // Any rank order: hosts interleaved, the group still follows cross ranks.
  std::vector<RankPlace> mixed = {
      {0, 2, 1},
      {0, 2, 0},
      {1, 2, 1},
      {1, 2, 0},
  };
  CHECK(cross_group(mixed, 0, nullptr) == std::vector<int>{1, 0});
  CHECK(cross_group(mixed, 2, nullptr) == std::vector<int>{3, 2});
  // Three hosts of one rank each: one group of every rank.
  CHECK(cross_group({{0, 1, 0}, {0, 1, 1}, {0, 1, 2}}, 1, nullptr) == std::vector<int>{0, 1, 2});

  CHECK(cross_group({{0, 2, 0}, {1, 2, 0}}, 0, &why).empty());  // one host
  CHECK(why.find("not several hosts") != std::string::npos);
  CHECK(cross_group({{0, 2, 0}, {1, 2, 0}, {0, 1, 1}}, 0, &why).empty());  // uneven hosts
  CHECK(why.find("not several hosts") != std::string::npos);
  CHECK(cross_group({{0, 2, 0}, {1, 2, 0}, {0, 2, 1}, {0, 2, 1}}, 0, &why).empty());  // local rank twice
  CHECK(why.find("rank 3 (local rank 0, cross rank 1) does not fit 2 hosts of 2 ranks") != std::string::npos);
  CHECK(cross_group({{0, 2, 0}, {1, 2, 0}, {0, 4, 1}, {1, 2, 1}}, 0, &why).empty());
  CHECK(why.find("different local sizes") != std::string::npos);
  std::vector<RankPlace> wide(34);
  for (int r = 0; r < 34; ++r) wide[r] = {r % 17, 17, r / 17};
  CHECK(cross_group(wide, 0, &why).empty());
  CHECK(why.find("17 ranks per host") != std::string::npos);
  CHECK(cross_group(two_by_two, 4, &why).empty());
}

TEST_CASE("cuda: hierarchical path slices - contiguous, aligned, covering every element once") {
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{3}, std::size_t{17}, std::size_t{1000},
                            std::size_t{1u << 20}, std::size_t{(1u << 20) + 5}}) {
    for (int local_size : {1, 2, 3, 4, 8, 16}) {
      for (std::size_t align : {std::size_t{1}, std::size_t{4}, std::size_t{8}}) {
        std::size_t next = 0;
        for (int l = 0; l < local_size; ++l) {
          const auto [first, last] = hierarchical_slice(count, l, local_size, align);
          INFO("count " << count << " local " << l << "/" << local_size << " align " << align);
          CHECK(first == next);
          CHECK(last >= first);
          CHECK(last <= count);
          if (last > first && first < count) CHECK(first % align == 0);
          next = last;
        }
        CHECK(next == count);
      }
    }
  }
  CHECK(hierarchical_slice(10, 0, 2, 4) == std::pair<std::size_t, std::size_t>{0, 8});
  CHECK(hierarchical_slice(10, 1, 2, 4) == std::pair<std::size_t, std::size_t>{8, 10});
  CHECK(hierarchical_slice(3, 3, 4, 1) == std::pair<std::size_t, std::size_t>{3, 3});  // nothing left
  CHECK(hierarchical_slice(10, 2, 2, 1) == std::pair<std::size_t, std::size_t>{0, 0});  // bad local rank
}
