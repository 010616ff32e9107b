#include "control_block.h"

#include "hvd/common/error.h"
#include "hvd/common/secret.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace hvd::collective::cuda::detail {

namespace {
constexpr uint64_t kMagic = 0x4856444354524c31ull;  // "HVDCTRL1"
constexpr int kMaxRanks = 4096;

// Whole cache lines per rank so ranks never false-share: the two counters,
// then the rank's mailbox (written before a counter is published).
struct alignas(64) RankSlot {
  std::atomic<uint64_t> counters[2];
  alignas(64) uint8_t mailbox[ControlBlock::kMailboxBytes];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "cross-process atomics need lock-free uint64");
}  // namespace

struct ControlBlock::Layout {
  std::atomic<uint64_t> magic;
  int32_t ranks;
  std::atomic<int32_t> attached;
  std::atomic<int32_t> aborted_by;  // -1: healthy
  std::atomic<uint32_t> flags;      // set by the creator before anyone attaches
  alignas(64) RankSlot slots[1];  // `ranks` of them
};

namespace {
std::size_t layout_bytes(int ranks) {
  return offsetof(ControlBlock::Layout, slots) + sizeof(RankSlot) * static_cast<std::size_t>(ranks);
}
}  // namespace

std::string ControlBlock::make_name() {
  return fmt::format("/hvd-cuda-{}-{}", static_cast<long>(::getpid()), random_secret(8));
}

ControlBlock ControlBlock::create(const std::string& name, int ranks) {
  if (ranks < 1 || ranks > kMaxRanks) throw InvalidArgument(fmt::format("control block: bad rank count {}", ranks));
  const std::size_t bytes = layout_bytes(ranks);
  int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw IoError(fmt::format("shm_open({}) failed: {}", name, std::strerror(errno)));
  UniqueFd guard(fd);
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int err = errno;
    ::shm_unlink(name.c_str());
    throw IoError(fmt::format("ftruncate of shared memory {} failed: {}", name, std::strerror(err)));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::shm_unlink(name.c_str());
    throw IoError(fmt::format("mmap of shared memory {} failed: {}", name, std::strerror(err)));
  }
  auto* l = static_cast<Layout*>(p);  // fresh pages are zero
  for (int r = 0; r < ranks; ++r) {
    new (&l->slots[r]) RankSlot{};
    l->slots[r].counters[0].store(0);
    l->slots[r].counters[1].store(0);
  }
  l->ranks = ranks;
  l->flags.store(0);
  l->attached.store(0);
  l->aborted_by.store(-1);
  std::atomic_thread_fence(std::memory_order_release);
  l->magic.store(kMagic, std::memory_order_release);
  return ControlBlock(name, p, bytes, true);
}

ControlBlock ControlBlock::open(const std::string& name, int ranks) {
  if (ranks < 1 || ranks > kMaxRanks) throw InvalidArgument(fmt::format("control block: bad rank count {}", ranks));
  const std::size_t bytes = layout_bytes(ranks);
  int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) {
    throw IoError(fmt::format("shm_open({}) failed: {} (the creating rank exited, or ranks are not on one host?)", name,
                              std::strerror(errno)));
  }
  UniqueFd guard(fd);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes) {
    throw IoError(fmt::format("shared memory {} has {} bytes, expected {} for {} ranks", name,
                              static_cast<long long>(st.st_size), bytes, ranks));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw IoError(fmt::format("mmap of shared memory {} failed: {}", name, std::strerror(errno)));
  ControlBlock block(name, p, bytes, false);
  auto* l = block.layout();
  if (l->magic.load(std::memory_order_acquire) != kMagic || l->ranks != ranks) {
    throw IoError(fmt::format("shared memory {} is not a control block for {} ranks", name, ranks));
  }
  return block;
}

ControlBlock::ControlBlock(std::string name, void* mapping, std::size_t bytes, bool owner)
    : name_(std::move(name)), mapping_(mapping), bytes_(bytes), owner_(owner) {}

ControlBlock::ControlBlock(ControlBlock&& o) noexcept
    : name_(std::move(o.name_)), mapping_(o.mapping_), bytes_(o.bytes_), owner_(o.owner_), unlinked_(o.unlinked_) {
  o.mapping_ = nullptr;
  o.owner_ = false;
}

ControlBlock& ControlBlock::operator=(ControlBlock&& o) noexcept {
  if (this != &o) {
    this->~ControlBlock();
    new (this) ControlBlock(std::move(o));
  }
  return *this;
}

ControlBlock::~ControlBlock() {
  if (owner_) unlink();
  if (mapping_) ::munmap(mapping_, bytes_);
  mapping_ = nullptr;
}

ControlBlock::Layout* ControlBlock::layout() const { return static_cast<Layout*>(mapping_); }

int ControlBlock::ranks() const { return layout()->ranks; }

void ControlBlock::attach() { layout()->attached.fetch_add(1, std::memory_order_acq_rel); }

void ControlBlock::wait_attached(const Deadline& deadline) const {
  const int want = layout()->ranks;
  while (layout()->attached.load(std::memory_order_acquire) < want) {
    check_abort();
    if (deadline.expired()) {
      throw TimeoutError(
          fmt::format("control block {}: only {} of {} local ranks attached", name_, layout()->attached.load(), want));
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void ControlBlock::unlink() {
  if (owner_ && !unlinked_) {
    ::shm_unlink(name_.c_str());
    unlinked_ = true;
  }
}

void ControlBlock::publish(int rank, Counter which, uint64_t value) {
  HVD_ENFORCE(rank >= 0 && rank < ranks(), "rank {} out of range", rank);
  layout()->slots[rank].counters[static_cast<int>(which)].store(value, std::memory_order_release);
}

uint64_t ControlBlock::value(int rank, Counter which) const {
  HVD_ENFORCE(rank >= 0 && rank < ranks(), "rank {} out of range", rank);
  return layout()->slots[rank].counters[static_cast<int>(which)].load(std::memory_order_acquire);
}

void ControlBlock::wait_at_least(int rank, Counter which, uint64_t value, const Deadline& deadline) const {
  HVD_ENFORCE(rank >= 0 && rank < ranks(), "rank {} out of range", rank);
  const auto& c = layout()->slots[rank].counters[static_cast<int>(which)];
  // Spin first (a peer is usually microseconds behind), then back off so
  // ranks sharing cores with their peers do not starve them.
  for (int i = 0; i < 2000; ++i) {
    if (c.load(std::memory_order_acquire) >= value) return;
  }
  for (uint64_t i = 0;; ++i) {
    if (c.load(std::memory_order_acquire) >= value) return;
    check_abort();
    if (deadline.expired()) {
      throw TimeoutError(fmt::format("local rank {} did not reach step {} ({}) in time (it is at {})", rank, value,
                                     which == Counter::Ready ? "ready" : "done", c.load()));
    }
    if (i < 1000) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

void ControlBlock::set_flags(uint32_t flags) { layout()->flags.store(flags, std::memory_order_release); }

uint32_t ControlBlock::flags() const { return layout()->flags.load(std::memory_order_acquire); }

void ControlBlock::put_mailbox(int rank, const void* data, std::size_t bytes) {
  HVD_ENFORCE(rank >= 0 && rank < ranks(), "rank {} out of range", rank);
  HVD_ENFORCE(bytes <= kMailboxBytes, "mailbox message of {} bytes", bytes);
  std::memcpy(layout()->slots[rank].mailbox, data, bytes);
}

void ControlBlock::get_mailbox(int rank, void* out, std::size_t bytes) const {
  HVD_ENFORCE(rank >= 0 && rank < ranks(), "rank {} out of range", rank);
  HVD_ENFORCE(bytes <= kMailboxBytes, "mailbox message of {} bytes", bytes);
  std::memcpy(out, layout()->slots[rank].mailbox, bytes);
}

void ControlBlock::abort(int by_rank) {
  int32_t expected = -1;
  layout()->aborted_by.compare_exchange_strong(expected, by_rank, std::memory_order_acq_rel);
}

bool ControlBlock::aborted() const { return layout()->aborted_by.load(std::memory_order_acquire) >= 0; }

void ControlBlock::check_abort() const {
  const int by = layout()->aborted_by.load(std::memory_order_acquire);
  if (by >= 0) throw IoError(fmt::format("device allreduce aborted by local rank {}", by));
}

}  // namespace hvd::collective::cuda::detail
