// ShmRing and ShmSegment (shm.h): the shared memory of one pair of ranks.
//
// Ring layout (every counter on its own 64-byte line, so the producer's and
// the consumer's writes never share a cache line):
//   line 0: magic, capacity          (written once by the creator)
//   line 1: head  (bytes ever written; producer only)
//   line 2: tail  (bytes ever read; consumer only)
//   line 3: consumer_waiting
//   line 4: producer_waiting
//   then `capacity` data bytes (a power of two; positions are counter & mask)
// Counters are 64-bit and only grow, so full (head - tail == capacity) and
// empty (head == tail) are never confused.
#include "hvd/transport/shm.h"

#include "hvd/common/error.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

namespace hvd::transport {

namespace {
constexpr uint64_t kRingMagic = 0x31474e49524d4853ULL;  // "SHMRING1"
constexpr std::size_t kLine = 64;
}  // namespace

struct ShmRing::Header {
  alignas(kLine) uint64_t magic;
  uint64_t capacity;
  alignas(kLine) std::atomic<uint64_t> head;
  alignas(kLine) std::atomic<uint64_t> tail;
  alignas(kLine) std::atomic<uint32_t> consumer_waiting;
  alignas(kLine) std::atomic<uint32_t> producer_waiting;
  // Single-copy descriptor (see shm.h): written by the producer.
  alignas(kLine) std::atomic<uint64_t> cma_posted;  // sequence number of the last posted descriptor
  uint64_t cma_addr;
  uint64_t cma_len;
  // Written by the consumer.
  alignas(kLine) std::atomic<uint64_t> cma_copied;  // bytes ever copied through descriptors
  std::atomic<uint32_t> cma_refused;  // 1: the consumer cannot read our memory
};

static_assert(sizeof(std::atomic<uint64_t>) == 8 && std::atomic<uint64_t>::is_always_lock_free,
              "shared-memory rings need lock-free 64-bit atomics");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared-memory rings need lock-free 32-bit atomics");

std::size_t ShmRing::bytes_for(std::size_t capacity) {
  const std::size_t header = (sizeof(Header) + kLine - 1) / kLine * kLine;
  return header + capacity;
}

ShmRing ShmRing::create(void* mem, std::size_t capacity) {
  if (capacity < 64 || (capacity & (capacity - 1)) != 0) {
    throw InvalidArgument(fmt::format("shared-memory ring capacity {} is not a power of two >= 64", capacity));
  }
  if (reinterpret_cast<uintptr_t>(mem) % kLine != 0) throw InvalidArgument("shared-memory ring is not 64-byte aligned");
  Header* h = new (mem) Header;
  h->capacity = capacity;
  h->head.store(0, std::memory_order_relaxed);
  h->tail.store(0, std::memory_order_relaxed);
  h->consumer_waiting.store(0, std::memory_order_relaxed);
  h->producer_waiting.store(0, std::memory_order_relaxed);
  h->cma_posted.store(0, std::memory_order_relaxed);
  h->cma_addr = 0;
  h->cma_len = 0;
  h->cma_copied.store(0, std::memory_order_relaxed);
  h->cma_refused.store(0, std::memory_order_relaxed);
  // Published last: attach() checks the magic.
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kRingMagic;
  return attach(mem, bytes_for(capacity));
}

ShmRing ShmRing::attach(void* mem, std::size_t available) {
  if (reinterpret_cast<uintptr_t>(mem) % kLine != 0) throw InvalidArgument("shared-memory ring is not 64-byte aligned");
  if (available < bytes_for(64)) throw InvalidArgument("shared-memory ring: segment too small for a ring header");
  auto* h = static_cast<Header*>(mem);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (h->magic != kRingMagic) throw InvalidArgument("shared-memory ring: bad header (not a ring)");
  const uint64_t cap = h->capacity;
  if (cap < 64 || (cap & (cap - 1)) != 0 || bytes_for(cap) > available) {
    throw InvalidArgument(
        fmt::format("shared-memory ring: capacity {} does not fit the {} bytes mapped", cap, available));
  }
  ShmRing r;
  r.h_ = h;
  r.data_ = static_cast<char*>(mem) + (bytes_for(cap) - cap);
  r.capacity_ = cap;
  return r;
}

std::size_t ShmRing::readable() const {
  return static_cast<std::size_t>(h_->head.load(std::memory_order_acquire) - h_->tail.load(std::memory_order_relaxed));
}

std::size_t ShmRing::writable() const {
  return capacity_ -
         static_cast<std::size_t>(h_->head.load(std::memory_order_relaxed) - h_->tail.load(std::memory_order_acquire));
}

std::size_t ShmRing::write(const void* data, std::size_t len) {
  const uint64_t head = h_->head.load(std::memory_order_relaxed);
  const uint64_t tail = h_->tail.load(std::memory_order_acquire);
  if (head - tail > capacity_) throw IoError("shared-memory ring corrupted (head and tail more than a ring apart)");
  const std::size_t space = capacity_ - static_cast<std::size_t>(head - tail);
  const std::size_t n = std::min(len, space);
  if (n == 0) return 0;
  const std::size_t pos = static_cast<std::size_t>(head & (capacity_ - 1));
  const std::size_t first = std::min(n, capacity_ - pos);
  std::memcpy(data_ + pos, data, first);
  if (n > first) std::memcpy(data_, static_cast<const char*>(data) + first, n - first);
  h_->head.store(head + n, std::memory_order_release);
  return n;
}

std::size_t ShmRing::read_view(std::size_t len, std::size_t align, RecvSink sink, void* ctx) {
  const uint64_t tail = h_->tail.load(std::memory_order_relaxed);
  const uint64_t head = h_->head.load(std::memory_order_acquire);
  const std::size_t avail = static_cast<std::size_t>(head - tail);
  if (avail > capacity_) throw IoError("shared-memory ring corrupted (head and tail more than a ring apart)");
  std::size_t n = std::min(len, avail);
  n -= n % align;
  if (n == 0) return 0;
  std::size_t done = 0;
  while (done < n) {
    const std::size_t pos = static_cast<std::size_t>((tail + done) & (capacity_ - 1));
    std::size_t span = std::min(n - done, capacity_ - pos);
    if (span >= align) {
      span -= span % align;
      sink(ctx, data_ + pos, span);
      done += span;
    } else {
      // One element straddles the end of the ring.
      alignas(16) char unit[16];
      std::memcpy(unit, data_ + pos, span);
      std::memcpy(unit + span, data_, align - span);
      sink(ctx, unit, align);
      done += align;
    }
  }
  h_->tail.store(tail + n, std::memory_order_release);
  return n;
}

std::size_t ShmRing::read(void* data, std::size_t len) {
  const uint64_t tail = h_->tail.load(std::memory_order_relaxed);
  const uint64_t head = h_->head.load(std::memory_order_acquire);
  const std::size_t avail = static_cast<std::size_t>(head - tail);
  if (avail > capacity_) throw IoError("shared-memory ring corrupted (head and tail more than a ring apart)");
  const std::size_t n = std::min(len, avail);
  if (n == 0) return 0;
  const std::size_t pos = static_cast<std::size_t>(tail & (capacity_ - 1));
  const std::size_t first = std::min(n, capacity_ - pos);
  std::memcpy(data, data_ + pos, first);
  if (n > first) std::memcpy(static_cast<char*>(data) + first, data_, n - first);
  h_->tail.store(tail + n, std::memory_order_release);
  return n;
}

// The sleep protocol: the waiter stores its flag, fences, re-checks the
// counter; the mover stores the counter, fences, checks the flag. With both
// fences sequentially consistent, at least one of them sees the other's
// store, so either the waiter does not sleep or the mover wakes it.
bool ShmRing::arm_consumer_wait() {
  h_->consumer_waiting.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return h_->head.load(std::memory_order_relaxed) == h_->tail.load(std::memory_order_relaxed);
}

bool ShmRing::arm_producer_wait() {
  h_->producer_waiting.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return h_->head.load(std::memory_order_relaxed) - h_->tail.load(std::memory_order_relaxed) == capacity_;
}

bool ShmRing::take_consumer_waiter() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h_->consumer_waiting.load(std::memory_order_relaxed) == 0) return false;
  return h_->consumer_waiting.exchange(0, std::memory_order_relaxed) != 0;
}

bool ShmRing::take_producer_waiter() {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  if (h_->producer_waiting.load(std::memory_order_relaxed) == 0) return false;
  return h_->producer_waiting.exchange(0, std::memory_order_relaxed) != 0;
}

void ShmRing::post_descriptor(uint64_t seq, const void* addr, std::size_t len) {
  h_->cma_addr = reinterpret_cast<uint64_t>(addr);
  h_->cma_len = len;
  h_->cma_posted.store(seq, std::memory_order_release);
}

uint64_t ShmRing::posted_descriptor(uint64_t& addr, std::size_t& len) const {
  const uint64_t seq = h_->cma_posted.load(std::memory_order_acquire);
  addr = h_->cma_addr;
  len = static_cast<std::size_t>(h_->cma_len);
  return seq;
}

uint64_t ShmRing::posted_sequence() const { return h_->cma_posted.load(std::memory_order_relaxed); }

uint64_t ShmRing::descriptor_bytes_copied() const { return h_->cma_copied.load(std::memory_order_acquire); }

void ShmRing::add_descriptor_bytes_copied(std::size_t n) {
  h_->cma_copied.store(h_->cma_copied.load(std::memory_order_relaxed) + n, std::memory_order_release);
}

void ShmRing::refuse_descriptors() { h_->cma_refused.store(1, std::memory_order_release); }
bool ShmRing::descriptors_refused() const { return h_->cma_refused.load(std::memory_order_acquire) != 0; }

bool ShmRing::arm_consumer_wait_for(uint64_t seen_seq) {
  h_->consumer_waiting.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return h_->head.load(std::memory_order_relaxed) == h_->tail.load(std::memory_order_relaxed) &&
         h_->cma_posted.load(std::memory_order_relaxed) == seen_seq;
}

bool ShmRing::arm_producer_wait_for(uint64_t copied_seen) {
  h_->producer_waiting.store(1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return h_->cma_copied.load(std::memory_order_relaxed) == copied_seen &&
         h_->cma_refused.load(std::memory_order_relaxed) == 0;
}

bool ShmRing::empty_for_producer() const {
  return h_->head.load(std::memory_order_relaxed) == h_->tail.load(std::memory_order_acquire);
}

// ---- ShmSegment -------------------------------------------------------------

namespace {
constexpr uint64_t kSegmentMagic = 0x31474553444d5648ULL;  // "HVDMSEG1"

struct SegmentHeader {
  alignas(kLine) uint64_t magic;
  uint64_t ring_bytes;  // bytes_for(capacity) of each ring
};
constexpr std::size_t kSegmentHeaderBytes = kLine;
static_assert(sizeof(SegmentHeader) <= kSegmentHeaderBytes);
}  // namespace

std::shared_ptr<ShmSegment> ShmSegment::create(std::size_t ring_capacity, bool populate) {
  const std::size_t ring_bytes = ShmRing::bytes_for(ring_capacity);
  const std::size_t size = kSegmentHeaderBytes + 2 * ring_bytes;
  UniqueFd fd(::memfd_create("hvd-shm", MFD_CLOEXEC));
  if (!fd) throw IoError(fmt::format("memfd_create failed: {}", std::strerror(errno)));
  if (::ftruncate(fd.get(), static_cast<off_t>(size)) != 0) {
    throw IoError(fmt::format("ftruncate of a {}-byte shared segment failed: {}", size, std::strerror(errno)));
  }
  // MAP_POPULATE: fault every page in now. Otherwise the first pass of the
  // rings pays a page fault per 4 KiB on both sides (measured: a 16 KiB
  // allreduce took 52 us instead of 12 us until the 1 MiB ring had wrapped).
  // Not when the caller says the set-up matters more (populate = false:
  // 8 ranks on 2 cores spent ~50 ms of a 110 ms hello_allreduce job
  // zeroing 28 segments of 2 MiB they hardly used; performance.md).
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), fd.get(), 0);
  if (base == MAP_FAILED)
    throw IoError(fmt::format("mmap of a {}-byte shared segment failed: {}", size, std::strerror(errno)));
  std::shared_ptr<ShmSegment> s(new ShmSegment);
  s->fd_ = std::move(fd);
  s->base_ = base;
  s->size_ = size;
  char* p = static_cast<char*>(base);
  s->rings_[0] = ShmRing::create(p + kSegmentHeaderBytes, ring_capacity);
  s->rings_[1] = ShmRing::create(p + kSegmentHeaderBytes + ring_bytes, ring_capacity);
  auto* h = new (base) SegmentHeader;
  h->ring_bytes = ring_bytes;
  std::atomic_thread_fence(std::memory_order_release);
  h->magic = kSegmentMagic;
  return s;
}

std::shared_ptr<ShmSegment> ShmSegment::map(int memfd, bool populate) {
  struct stat st {};
  if (::fstat(memfd, &st) != 0)
    throw IoError(fmt::format("fstat of a shared segment failed: {}", std::strerror(errno)));
  const auto size = static_cast<std::size_t>(st.st_size);
  if (size < kSegmentHeaderBytes + 2 * ShmRing::bytes_for(64) || size > (std::size_t{1} << 34)) {
    throw InvalidArgument(fmt::format("shared segment of {} bytes is not a pair's segment", size));
  }
  void* base = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | (populate ? MAP_POPULATE : 0), memfd, 0);
  if (base == MAP_FAILED)
    throw IoError(fmt::format("mmap of a {}-byte shared segment failed: {}", size, std::strerror(errno)));
  std::shared_ptr<ShmSegment> s(new ShmSegment);
  s->base_ = base;
  s->size_ = size;
  auto* h = static_cast<SegmentHeader*>(base);
  std::atomic_thread_fence(std::memory_order_acquire);
  const uint64_t ring_bytes = h->ring_bytes;
  if (h->magic != kSegmentMagic || kSegmentHeaderBytes + 2 * ring_bytes != size) {
    throw InvalidArgument("shared segment: bad header");
  }
  char* p = static_cast<char*>(base);
  s->rings_[0] = ShmRing::attach(p + kSegmentHeaderBytes, ring_bytes);
  s->rings_[1] = ShmRing::attach(p + kSegmentHeaderBytes + ring_bytes, ring_bytes);
  if (s->rings_[0].capacity() != s->rings_[1].capacity()) throw InvalidArgument("shared segment: rings differ");
  return s;
}

ShmSegment::~ShmSegment() {
  if (base_) ::munmap(base_, size_);
}

}  // namespace hvd::transport
