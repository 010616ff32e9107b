#pragma once
/// The capability a link to a peer on the same host adds to Link (which only
/// moves bytes): how progress() waits on it without a system call when it
/// can, and a zero-copy receive for the ring algorithms. A link offers it
/// through Link::shared_memory(); ShmLink (shm.h) is the one that does.
///
/// A link without it (TCP) is waited on as any socket: poll(2) on poll_fd()
/// for POLLOUT | POLLRDHUP (send) or POLLIN (receive), no spin, no busy
/// poll, large sends on progress()'s send helper thread, no zero-copy
/// receive.
#include "hvd/transport/link.h"

#include <chrono>
#include <cstddef>

namespace hvd::transport {

class SharedMemoryLink {
 public:
  virtual ~SharedMemoryLink() = default;

  /// The descriptor progress() polls for POLLIN while a send (send = true)
  /// or a receive waits: each direction has its own wake-up socket.
  virtual int wait_fd(bool send) const = 0;
  /// Called by progress() right before it sleeps in poll(2) on this link
  /// for a send (receive). Returns false when progress is possible now (do
  /// not sleep). Publishes "I am waiting" so the peer wakes this side; may
  /// throw IoError when the peer is gone.
  virtual bool prepare_wait(bool send) = 0;
  /// How long progress() should retry before sleeping while it waits on
  /// this link (HVD_TRANSPORT_SPIN_US, when larger, wins).
  virtual std::chrono::microseconds spin_hint() const = 0;
  /// During that spin, how long progress() may watch this link through
  /// may_move() with the CPU's pause instruction, without a system call,
  /// between two sched_yield()s (when the local ranks do not outnumber the
  /// cores); 0: yield only.
  virtual std::chrono::nanoseconds busy_poll_hint() const = 0;
  /// A cheap check without a system call or side effect, for that busy
  /// poll: false only when try_send (send = true) / try_recv would surely
  /// move nothing now.
  virtual bool may_move(bool send) const = 0;
  /// Whether progress() may hand large sends on this link to its send
  /// helper thread (HVD_TRANSPORT_SEND_THREAD=0/1 overrides).
  virtual bool offload_sends() const = 0;

  /// Zero-copy receive: hands up to `len` received bytes to
  /// `sink(ctx, data, n)` straight from where the link holds them (the
  /// shared ring) instead of copying them into a buffer first; every `n` is
  /// a multiple of `align` (a power of two <= 16; `len` must be one too).
  /// Returns the bytes consumed (0: nothing yet). Only when
  /// supports_recv_view().
  virtual bool supports_recv_view() const = 0;
  virtual std::size_t try_recv_view(std::size_t len, std::size_t align, RecvSink sink, void* ctx) = 0;
  /// Bytes a send can always hand off without the peer reading anything
  /// (the ring's capacity).
  virtual std::size_t send_window() const = 0;
};

}  // namespace hvd::transport
