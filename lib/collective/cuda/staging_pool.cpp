#include "staging_pool.h"

#include "hvd/common/error.h"

#include <algorithm>

namespace hvd::collective::cuda::detail {

StagingPool::StagingPool(std::unique_ptr<HostAllocator> allocator, std::size_t max_bytes, std::size_t min_buffer)
    : allocator_(std::move(allocator)), max_bytes_(max_bytes), min_buffer_(std::max<std::size_t>(min_buffer, 64)) {
  HVD_ENFORCE(allocator_ != nullptr, "StagingPool needs an allocator{}", "");
}

StagingPool::~StagingPool() {
  for (auto& b : buffers_) allocator_->release(b.data);
}

StagingPool::Lease::Lease(Lease&& o) noexcept : pool_(o.pool_), data_(o.data_), size_(o.size_) {
  o.pool_ = nullptr;
  o.data_ = nullptr;
  o.size_ = 0;
}

StagingPool::Lease& StagingPool::Lease::operator=(Lease&& o) noexcept {
  if (this != &o) {
    if (pool_ && data_) pool_->give_back(data_);
    pool_ = o.pool_;
    data_ = o.data_;
    size_ = o.size_;
    o.pool_ = nullptr;
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

StagingPool::Lease::~Lease() {
  if (pool_ && data_) pool_->give_back(data_);
}

StagingPool::Lease StagingPool::acquire(std::size_t bytes) {
  if (bytes > max_bytes_) {
    throw InvalidArgument(
        fmt::format("staging buffer of {} bytes requested but the pool is capped at {} bytes", bytes, max_bytes_));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  Buffer* best = nullptr;
  for (auto& b : buffers_) {
    if (!b.leased && b.size >= bytes && (!best || b.size < best->size)) best = &b;
  }
  if (best) {
    best->leased = true;
    ++stats_.reuses;
    return Lease(this, best->data, best->size);
  }
  std::size_t size = min_buffer_;
  while (size < bytes) size *= 2;
  size = std::min(size, max_bytes_);
  // Make room by returning idle buffers, smallest first (they are the least
  // likely to serve later requests).
  while (stats_.bytes_held + size > max_bytes_) {
    auto victim = buffers_.end();
    for (auto it = buffers_.begin(); it != buffers_.end(); ++it) {
      if (!it->leased && (victim == buffers_.end() || it->size < victim->size)) victim = it;
    }
    if (victim == buffers_.end()) {
      throw Error(fmt::format("staging pool exhausted: {} bytes requested, {} of {} bytes held by leases", bytes,
                              stats_.bytes_held, max_bytes_));
    }
    allocator_->release(victim->data);
    stats_.bytes_held -= victim->size;
    ++stats_.releases;
    buffers_.erase(victim);
  }
  auto* data = static_cast<uint8_t*>(allocator_->allocate(size));
  ++stats_.allocations;
  stats_.bytes_held += size;
  buffers_.push_back(Buffer{data, size, true});
  return Lease(this, data, size);
}

void StagingPool::give_back(uint8_t* data) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& b : buffers_) {
    if (b.data == data) {
      b.leased = false;
      return;
    }
  }
}

StagingPoolStats StagingPool::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

}  // namespace hvd::collective::cuda::detail
