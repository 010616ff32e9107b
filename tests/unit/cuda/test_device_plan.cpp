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
