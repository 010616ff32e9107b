#pragma once
/// Point-to-point links: the only thing the collective algorithms know about
/// the wire (cf. gloo::transport::Pair).
///
/// A Link is one reliable, ordered, full-duplex byte stream to one peer. It
/// exposes *non-blocking* primitives (try_send/try_recv plus a pollable fd)
/// rather than blocking calls, because a ring step must send to the right
/// neighbour while receiving from the left one: if both were blocking, two
/// ranks sending large messages to each other would each fill the other's
/// socket buffer and deadlock. `progress()` drives any number of transfers on
/// any number of links concurrently from one thread with poll(2); `send`,
/// `recv` and `sendrecv` are thin conveniences over it.
///
/// A shared-memory link (shm.h) implements the same interface: its
/// poll_fd() is the pair's AF_UNIX socket, which the peer writes a wake-up
/// byte to when it sees this side waiting (prepare_wait).
#include "hvd/common/error.h"
#include "hvd/common/io.h"

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace hvd::transport {

/// An IoError of one link: peer() is the rank at its other end. progress()
/// (and so send, recv, sendrecv) throws it for every failure of a link it
/// drives, so that a caller can tell which peer it lost (the collective
/// library shares that rank with the other survivors).
class LinkError : public hvd::IoError {
 public:
  LinkError(int peer, const std::string& what) : hvd::IoError(what), peer_(peer) {}
  int peer() const { return peer_; }

 private:
  int peer_;
};

class Link {
 public:
  virtual ~Link() = default;

  /// The rank at the other end.
  virtual int peer() const = 0;

  /// Moves up to `len` bytes without blocking; returns how many moved
  /// (0 when the kernel buffer is full/empty). Throws hvd::IoError when the
  /// link failed, was shut down, or the peer closed it (EOF).
  virtual std::size_t try_send(const void* data, std::size_t len) = 0;
  virtual std::size_t try_recv(void* data, std::size_t len) = 0;

  /// A file descriptor poll(2) reports readable/writable when try_recv /
  /// try_send can make progress (or the link failed).
  virtual int poll_fd() const = 0;

  /// Shuts both directions down so that the peer and any local thread
  /// blocked in progress() on this link fail at once. Does not close the fd
  /// (closing could let another thread's poll see a reused descriptor); the
  /// destructor closes. Idempotent, thread-safe.
  virtual void shutdown() = 0;
  virtual bool is_shutdown() const = 0;

  /// Human-readable description for error messages ("rank 3 at 10.0.0.2:4711").
  virtual std::string describe() const = 0;

  /// The descriptor progress() polls while a send (send = true) or a receive
  /// waits; poll_fd() unless a link keeps one per direction.
  virtual int wait_fd(bool /*send*/) const { return poll_fd(); }
  /// The poll(2) events on wait_fd() that mean "try again" for a send
  /// (send = true) or a receive. TCP: POLLOUT | POLLRDHUP and POLLIN. A
  /// shared-memory link polls its wake-up socket for POLLIN both ways.
  virtual short wait_events(bool send) const { return send ? short(POLLOUT | POLLRDHUP) : short(POLLIN); }
  /// Called by progress() right before it sleeps in poll(2) on this link
  /// for a send (receive). Returns false when progress is possible now (do
  /// not sleep). A shared-memory link publishes "I am waiting" here so the
  /// peer wakes it; it may throw IoError when the peer is gone.
  virtual bool prepare_wait(bool /*send*/) { return true; }
  /// How long progress() should retry before sleeping while it waits on
  /// this link (HVD_TRANSPORT_SPIN_US, when larger, wins). TCP: 0.
  virtual std::chrono::microseconds spin_hint() const { return std::chrono::microseconds(0); }
  /// During that spin, how long progress() may watch this link through
  /// may_move() with the CPU's pause instruction, without a system call,
  /// between two sched_yield()s (shared memory, when the local ranks do
  /// not outnumber the cores). TCP: 0 (yield only).
  virtual std::chrono::nanoseconds busy_poll_hint() const { return std::chrono::nanoseconds(0); }
  /// A cheap check without a system call or side effect, for that busy
  /// poll: false only when try_send (send = true) / try_recv would surely
  /// move nothing now. Default: true (just try).
  virtual bool may_move(bool /*send*/) const { return true; }
  /// Whether progress() may hand large sends on this link to its send
  /// helper thread (HVD_TRANSPORT_SEND_THREAD=0/1 overrides). TCP: yes.
  virtual bool offload_sends() const { return true; }

  /// Silent-peer detection (host down, network cut: no FIN or RST ever
  /// arrives). While progress() waits on this link it calls check_peer()
  /// about every peer_check_interval() (zero: never), which throws
  /// hvd::IoError once the peer has been silent past the link's limit.
  virtual std::chrono::milliseconds peer_check_interval() const { return std::chrono::milliseconds(0); }
  virtual void check_peer() {}

  /// Zero-copy receive (shared memory): hands up to `len` received bytes to
  /// `sink(ctx, data, n)` straight from where the link holds them (the
  /// shared ring) instead of copying them into a buffer first; every `n` is
  /// a multiple of `align` (a power of two <= 16; `len` must be one too).
  /// Returns the bytes consumed (0: nothing yet). Only when
  /// supports_recv_view(); the default throws.
  using RecvSink = void (*)(void* ctx, const char* data, std::size_t n);
  virtual bool supports_recv_view() const { return false; }
  /// Bytes a send can always hand off without the peer reading anything
  /// (shared memory: the ring's capacity); 0 when unknown (TCP).
  virtual std::size_t send_window() const { return 0; }
  virtual std::size_t try_recv_view(std::size_t len, std::size_t align, RecvSink sink, void* ctx);

  /// Blocking conveniences (built on progress()).
  void send(const void* data, std::size_t len, Deadline deadline = Deadline::never());
  void recv(void* data, std::size_t len, Deadline deadline = Deadline::never());
};

/// One direction of one message on one link, driven by progress().
struct Transfer {
  enum class Dir { Send, Recv };
  Link* link = nullptr;
  Dir dir = Dir::Send;
  char* data = nullptr;
  /// Total bytes of the message.
  std::size_t size = 0;
  /// Bytes moved so far (progress() advances it).
  std::size_t done = 0;
  /// Send only: bytes that may be sent so far (defaults to `size` when left
  /// at SIZE_MAX). A pipeline (chain broadcast) raises it from the progress
  /// callback as data arrives from upstream.
  std::size_t ready = static_cast<std::size_t>(-1);
  /// Receive only, optional: consume the bytes in place through
  /// Link::try_recv_view (the link must support it) instead of copying
  /// them to `data` (which may then be null); `done` still counts them.
  Link::RecvSink sink = nullptr;
  void* sink_ctx = nullptr;
  std::size_t sink_align = 1;

  static Transfer send(Link& l, const void* d, std::size_t n) {
    Transfer t;
    t.link = &l;
    t.dir = Dir::Send;
    t.data = static_cast<char*>(const_cast<void*>(d));
    t.size = n;
    return t;
  }
  static Transfer recv(Link& l, void* d, std::size_t n) {
    Transfer t;
    t.link = &l;
    t.dir = Dir::Recv;
    t.data = static_cast<char*>(d);
    t.size = n;
    return t;
  }
  static Transfer recv_view(Link& l, std::size_t n, std::size_t align, Link::RecvSink sink, void* ctx) {
    Transfer t;
    t.link = &l;
    t.dir = Dir::Recv;
    t.size = n;
    t.sink = sink;
    t.sink_ctx = ctx;
    t.sink_align = align;
    return t;
  }
  bool complete() const { return done == size; }
};

/// Drives every transfer to completion concurrently. `on_progress` (may be
/// empty) runs on the calling thread after each batch of received bytes so
/// callers can consume data as it arrives (ring reduction of finished
/// segments, forwarding in a chain); it may raise `ready` on send transfers
/// and re-arm a completed receive (new data/size, done = 0).
/// Plain sends totalling >= 1 MiB alongside receives are driven by a helper
/// thread owned by the calling thread (one per thread, created on first
/// use), so send and receive copies overlap on two cores;
/// A link may decline (Link::offload_sends: shared memory when the ranks of
/// the host leave no spare core); HVD_TRANSPORT_SEND_THREAD=0 disables the
/// helper, =1 uses it whatever the links say.
/// Even with Deadline::never() a wait is bounded by the links' silent-peer
/// limits (Link::check_peer): a dead peer fails the call with IoError.
/// Throws LinkError (an hvd::IoError) naming the link on failure,
/// hvd::TimeoutError when the deadline passes; after a failure the links involved may be shut down
/// (the caller is expected to abort its communicator anyway).
void progress(Transfer* transfers, std::size_t count, Deadline deadline = Deadline::never(),
              const std::function<void()>& on_progress = {});

/// Sends `send_len` bytes to `to` while receiving `recv_len` bytes from
/// `from` (which may be the same link).
void sendrecv(Link& to, const void* send_data, std::size_t send_len, Link& from, void* recv_data, std::size_t recv_len,
              Deadline deadline = Deadline::never());

}  // namespace hvd::transport
