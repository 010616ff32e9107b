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
/// Link is the byte-moving contract only. A shared-memory link (shm.h)
/// implements it too (its poll_fd() is the pair's AF_UNIX socket, which the
/// peer writes a wake-up byte to when it sees this side waiting), and adds
/// the SharedMemoryLink capability (shared_memory_link.h) that progress()
/// and the ring algorithms ask for through Link::shared_memory().
#include "hvd/common/error.h"
#include "hvd/common/io.h"

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace hvd::transport {

class SharedMemoryLink;

/// A zero-copy receive's consumer: `sink(ctx, data, n)` gets `n` received
/// bytes straight from where the link holds them (SharedMemoryLink::try_recv_view).
using RecvSink = void (*)(void* ctx, const char* data, std::size_t n);

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

  /// Silent-peer detection (host down, network cut: no FIN or RST ever
  /// arrives). While progress() waits on this link it calls check_peer()
  /// about every peer_check_interval() (zero: never), which throws
  /// hvd::IoError once the peer has been silent past the link's limit.
  virtual std::chrono::milliseconds peer_check_interval() const { return std::chrono::milliseconds(0); }
  virtual void check_peer() {}

  /// What this link offers beyond moving bytes when its peer shares this
  /// host's memory (shared_memory_link.h: waiting, spinning, busy polling,
  /// zero-copy receives); null for a link that only moves bytes (TCP).
  /// Asked where the progress engine and the algorithms need it, never
  /// per byte: Transfer keeps the answer.
  virtual SharedMemoryLink* shared_memory() { return nullptr; }
  const SharedMemoryLink* shared_memory() const { return const_cast<Link*>(this)->shared_memory(); }

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
  /// The link's shared-memory capability (Link::shared_memory(), asked once
  /// by the factories below), or null: progress() asks it, not the link,
  /// how to wait.
  SharedMemoryLink* shm = nullptr;
  /// Receive only, optional: consume the bytes in place through
  /// SharedMemoryLink::try_recv_view (the link must support it) instead of
  /// copying them to `data` (which may then be null); `done` still counts them.
  RecvSink sink = nullptr;
  void* sink_ctx = nullptr;
  std::size_t sink_align = 1;

  static Transfer send(Link& l, const void* d, std::size_t n) {
    Transfer t;
    t.link = &l;
    t.shm = l.shared_memory();
    t.dir = Dir::Send;
    t.data = static_cast<char*>(const_cast<void*>(d));
    t.size = n;
    return t;
  }
  static Transfer recv(Link& l, void* d, std::size_t n) {
    Transfer t;
    t.link = &l;
    t.shm = l.shared_memory();
    t.dir = Dir::Recv;
    t.data = static_cast<char*>(d);
    t.size = n;
    return t;
  }
  static Transfer recv_view(Link& l, std::size_t n, std::size_t align, RecvSink sink, void* ctx) {
    Transfer t;
    t.link = &l;
    t.shm = l.shared_memory();
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
/// A link may decline (SharedMemoryLink::offload_sends: shared memory when the ranks of
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
