#pragma once
// The control block of the intra-host device allreduce: a small POSIX
// shared-memory segment where each local rank publishes, per pipeline step,
// "my slot is filled and its IPC event recorded" (ready) and "I finished
// reading every slot of this step" (done). Peers wait for the counter, then
// make their stream wait on the matching IPC event. The counter is what
// makes event reuse safe: cudaStreamWaitEvent waits for the *latest*
// record, so a peer must know the record for this step has been issued.
//
// Plain C++ (tests/unit/cuda runs it across threads and processes). Waits
// spin briefly, then yield and sleep, and are bounded by a deadline
// (hvd::TimeoutError naming the rank and step); abort() makes every waiter
// on every rank fail with hvd::IoError at once.
#include "hvd/common/io.h"

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace hvd::collective::cuda::detail {

enum class Counter : int { Ready = 0, Done = 1 };

class ControlBlock {
 public:
  /// A fresh unguessable name: "/hvd-cuda-<pid>-<random hex>".
  static std::string make_name();
  /// Creates (O_EXCL) and zero-initialises a block for `ranks` ranks.
  static ControlBlock create(const std::string& name, int ranks);
  /// Opens a block another rank created; IoError if missing or its layout
  /// does not match `ranks`.
  static ControlBlock open(const std::string& name, int ranks);

  ControlBlock(ControlBlock&& other) noexcept;
  ControlBlock& operator=(ControlBlock&& other) noexcept;
  ControlBlock(const ControlBlock&) = delete;
  ControlBlock& operator=(const ControlBlock&) = delete;
  /// Unmaps (the creator also unlinks the name if not done yet).
  ~ControlBlock();

  const std::string& name() const { return name_; }
  int ranks() const;

  /// Counts this rank as attached; the creator calls wait_attached() and
  /// unlink() so that the name never outlives the rendezvous.
  void attach();
  void wait_attached(const Deadline& deadline) const;
  void unlink();

  /// Bytes of each rank's mailbox: a small message a rank writes before it
  /// publishes a counter (the publish's release makes it visible to a peer
  /// whose wait saw the counter).
  static constexpr std::size_t kMailboxBytes = 128;
  void put_mailbox(int rank, const void* data, std::size_t bytes);
  void get_mailbox(int rank, void* out, std::size_t bytes) const;
  /// Bits the creator sets before the others attach (a job-wide choice
  /// made by local rank 0); 0 in a fresh block.
  void set_flags(uint32_t flags);
  uint32_t flags() const;

  /// counter(rank) = value (release). Values only grow.
  void publish(int rank, Counter which, uint64_t value);
  uint64_t value(int rank, Counter which) const;
  /// Blocks until counter(rank) >= value.
  void wait_at_least(int rank, Counter which, uint64_t value, const Deadline& deadline) const;

  /// Marks the block failed: every current and later wait throws IoError.
  void abort(int by_rank);
  bool aborted() const;
  /// hvd::IoError naming the rank if the block was marked failed.
  void check_abort() const;

 public:
  struct Layout;  // defined in control_block.cpp

 private:
  ControlBlock(std::string name, void* mapping, std::size_t bytes, bool owner);
  Layout* layout() const;

  std::string name_;
  void* mapping_ = nullptr;
  std::size_t bytes_ = 0;
  bool owner_ = false;
  bool unlinked_ = false;
};

}  // namespace hvd::collective::cuda::detail
