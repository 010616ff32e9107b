#pragma once
// Pinned host staging buffers for the cross-host device path (device ->
// pinned host -> network -> pinned host -> device). Pinning (cudaHostAlloc)
// costs milliseconds and fresh pages ~10 us per 4 KiB, so buffers are
// allocated on first need, kept, and handed out again: once warm, a
// training loop never allocates. Allocation goes through HostAllocator, the
// seam tests/unit/cuda fakes (plain C++, no GPU needed).
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace hvd::collective::cuda::detail {

class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  /// Throws (CudaError for pinned memory) on failure; never returns null.
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* ptr) noexcept = 0;
};

/// cudaHostAlloc/cudaFreeHost (portable, so any device can DMA from it).
/// InvalidArgument in a build without CUDA.
std::unique_ptr<HostAllocator> make_pinned_allocator();

struct StagingPoolStats {
  uint64_t allocations = 0;  ///< calls to HostAllocator::allocate
  uint64_t reuses = 0;  ///< acquires served by a kept buffer
  uint64_t releases = 0;  ///< buffers given back to the allocator (eviction)
  std::size_t bytes_held = 0;
};

class StagingPool {
 public:
  /// `max_bytes` bounds the memory held; `min_buffer` is the smallest
  /// buffer allocated (sizes are rounded up to a power of two from there,
  /// so slightly growing requests reuse one buffer).
  StagingPool(std::unique_ptr<HostAllocator> allocator, std::size_t max_bytes, std::size_t min_buffer = 1u << 20);
  /// Returns every buffer to the allocator. Leases must be gone.
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  /// A buffer lent until the Lease is destroyed (then kept for reuse).
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&& o) noexcept;
    Lease& operator=(Lease&& o) noexcept;
    ~Lease();
    uint8_t* data() const { return data_; }
    std::size_t size() const { return size_; }
    explicit operator bool() const { return data_ != nullptr; }

   private:
    friend class StagingPool;
    Lease(StagingPool* pool, uint8_t* data, std::size_t size) : pool_(pool), data_(data), size_(size) {}
    StagingPool* pool_ = nullptr;
    uint8_t* data_ = nullptr;
    std::size_t size_ = 0;
  };

  /// The smallest free buffer of at least `bytes`; else a new one (freeing
  /// idle buffers first if the cap would be exceeded). Throws
  /// InvalidArgument when `bytes` exceeds the cap, hvd::Error when leased
  /// buffers leave no room. Thread-safe.
  Lease acquire(std::size_t bytes);

  StagingPoolStats stats() const;

 private:
  struct Buffer {
    uint8_t* data;
    std::size_t size;
    bool leased;
  };
  void give_back(uint8_t* data);

  std::unique_ptr<HostAllocator> allocator_;
  std::size_t max_bytes_;
  std::size_t min_buffer_;
  mutable std::mutex mutex_;
  std::vector<Buffer> buffers_;
  StagingPoolStats stats_;
};

}  // namespace hvd::collective::cuda::detail
