// Build information and error reporting of the CUDA component, on a machine
// that may have no GPU at all.
#include "hvd/collective/cuda.h"
#include "hvd/store/memory_store.h"
#include "kernels.h"
#include "staging_pool.h"

#ifdef HVD_WITH_CUDA
#include "check.h"
#endif

#include <catch2/catch.hpp>

using namespace hvd::collective;

TEST_CASE("cuda: cuda build info is truthful", "[cuda][info]") {
#ifdef HVD_WITH_CUDA
  CHECK(cuda::cuda_built());
#else
  CHECK_FALSE(cuda::cuda_built());
  CHECK_FALSE(cuda::nccl_built());
#endif
  // A version is only reported when built with NCCL (and it loads).
  if (!cuda::nccl_built()) CHECK(cuda::nccl_version().empty());
  if (!cuda::nccl_version().empty()) CHECK_THAT(cuda::nccl_version(), Catch::Matches("[0-9]+\\.[0-9]+\\.[0-9]+"));
  const int n = cuda::device_count();  // never throws, with or without a driver
  CHECK(n >= 0);
  int host = 0;
  CHECK_FALSE(cuda::is_device_pointer(&host));
  CHECK_FALSE(cuda::is_device_pointer(nullptr));
  INFO("devices: " << n << ", nccl: " << cuda::nccl_version());
}

TEST_CASE("cuda: DeviceAllreducer refuses bad options with a clear message", "[cuda][info]") {
  hvd::store::InMemoryStore store;
  cuda::DeviceAllreducerOptions o;
  o.local_size = 0;
  CHECK_THROWS_AS(cuda::DeviceAllreducer(store, o), hvd::InvalidArgument);
#ifdef HVD_WITH_CUDA
  o.local_size = 2;
  o.local_rank = 2;
  CHECK_THROWS_WITH(cuda::DeviceAllreducer(store, o), Catch::Contains("local_rank 2"));
  o.local_rank = 0;
  o.slots = 0;
  CHECK_THROWS_WITH(cuda::DeviceAllreducer(store, o), Catch::Contains("slots"));
  if (cuda::device_count() == 0) {
    o.slots = 2;
    CHECK_THROWS_WITH(cuda::DeviceAllreducer(store, o), Catch::Contains("device 0 does not exist"));
  }
#else
  CHECK_THROWS_WITH(cuda::DeviceAllreducer(store, o), Catch::Contains("built without CUDA"));
#endif
}

TEST_CASE("cuda: device kernels check their arguments before touching the GPU", "[cuda][info]") {
  int dummy = 0;
  CHECK_THROWS_AS(cuda::reduce({}, &dummy, 1, DataType::Float32, ReduceOp::Sum, 1, 1, nullptr), hvd::Error);
  std::vector<const void*> too_many(cuda::detail::kMaxReduceInputs + 1, &dummy);
  CHECK_THROWS_AS(cuda::reduce(too_many, &dummy, 1, DataType::Float32, ReduceOp::Sum, 1, 1, nullptr), hvd::Error);
}

#ifdef HVD_WITH_CUDA
TEST_CASE("cuda: CUDA failures become CudaError naming the call and the runtime's message", "[cuda][info]") {
  const std::string m = cuda::detail::cuda_error_message(2, "cudaMalloc(&p, 1 << 40)");
  CHECK_THAT(
      m, Catch::StartsWith("cudaMalloc(&p, 1 << 40) failed: ") && Catch::Contains("memory") && Catch::EndsWith("(2)"));
  try {
    HVD_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL("no throw");
  } catch (const CudaError& e) {
    CHECK(e.code() == static_cast<int>(cudaErrorInvalidValue));
    CHECK_THAT(e.what(), Catch::Contains("cudaErrorInvalidValue") && Catch::Contains("invalid argument"));
    const hvd::Error& base = e;  // part of the library's hierarchy
    CHECK(std::string(base.what()).size() > 10);
  }
}

TEST_CASE("cuda: without a GPU, real CUDA work fails with CudaError, not a crash", "[cuda][info]") {
  if (cuda::device_count() > 0) {
    SUCCEED("a device is present; tests/integration/cuda covers this path");
    return;
  }
  // Pointers are never dereferenced: the launch itself fails.
  int a = 0, b = 0;
  CHECK_THROWS_AS(cuda::reduce({&a, &b}, &a, 1000, DataType::Float32, ReduceOp::Sum, 1, 1, nullptr), CudaError);
  CHECK_THROWS_AS(cuda::batched_copy({cuda::CopyItem{&a, &b, 4}}, nullptr), CudaError);
  CHECK_THROWS_AS(cuda::detail::make_pinned_allocator()->allocate(4096), CudaError);
}
#endif
