#include "check.h"
#include "staging_pool.h"

namespace hvd::collective::cuda::detail {

namespace {
class PinnedAllocator final : public HostAllocator {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    HVD_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
    return p;
  }
  void release(void* ptr) noexcept override {
    if (cudaFreeHost(ptr) != cudaSuccess) cudaGetLastError();
  }
};
}  // namespace

std::unique_ptr<HostAllocator> make_pinned_allocator() { return std::make_unique<PinnedAllocator>(); }

}  // namespace hvd::collective::cuda::detail
