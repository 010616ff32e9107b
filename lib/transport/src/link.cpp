// The progress engine: one poll(2) loop driving many non-blocking transfers.
//
// Each pass tries every unfinished transfer once (optimistically: a send or
// recv usually succeeds without waiting, and skipping poll saves a syscall on
// the hot path). When no transfer moved a byte the loop sleeps in poll on
// the links it is waiting on. HVD_TRANSPORT_SPIN_US=N makes it retry for N
// microseconds first; that trades CPU for wake-up latency and only pays on
// hosts with a core per rank to spare. Measured on the 2-core reference
// host, a 50 us spin made a 4 KiB allreduce 5x slower (the spinner delays
// the peer it is waiting for), hence the default of 0. Receives hand their progress to the caller's
// callback after each pass so data can be consumed while more arrives.
// While it waits, the loop asks the links it waits on whether their peer is
// still there (Link::check_peer, every peer_check_interval), so a peer that
// vanished without closing its sockets fails the wait even with no deadline.
#include "hvd/transport/link.h"

#include "hvd/transport/shared_memory_link.h"

#include "hvd/common/error.h"

#include <poll.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace hvd::transport {

void Link::send(const void* data, std::size_t len, Deadline deadline) {
  Transfer t = Transfer::send(*this, data, len);
  progress(&t, 1, deadline);
}

void Link::recv(void* data, std::size_t len, Deadline deadline) {
  Transfer t = Transfer::recv(*this, data, len);
  progress(&t, 1, deadline);
}

void sendrecv(Link& to, const void* send_data, std::size_t send_len, Link& from, void* recv_data, std::size_t recv_len,
              Deadline deadline) {
  Transfer ts[2] = {Transfer::send(to, send_data, send_len), Transfer::recv(from, recv_data, recv_len)};
  progress(ts, 2, deadline);
}

namespace {

constexpr long kDefaultSpinMicros = 0;

long spin_micros() {
  static const long value = [] {
    const char* text = std::getenv("HVD_TRANSPORT_SPIN_US");
    if (!text || !*text) return kDefaultSpinMicros;
    char* end = nullptr;
    long v = std::strtol(text, &end, 10);
    return (*end == '\0' && v >= 0) ? v : kDefaultSpinMicros;
  }();
  return value;
}

std::size_t send_limit(const Transfer& t) {
  return t.ready == static_cast<std::size_t>(-1) ? t.size : std::min(t.ready, t.size);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

// Busy polling (SharedMemoryLink::busy_poll_hint). One sched_yield()
// costs ~0.5 us on the reference VM even when nothing else wants the core,
// so a spin that yields between checks notices the peer's data up to that
// late, and a 2-rank 4 KiB allreduce (~1 us) paid it nearly every time.
// Between two yields the spin therefore watches the links' shared counters
// with the pause instruction for up to the hint. That holds the core
// without giving it away, which is what made a plain busy spin 3x slower
// on a loaded host (the spinner took the time slice its peer or a
// compiler needed). So a thread that sees another task take its core (a
// sched_yield that returned late, or a gap in the busy loop's clock: it
// was descheduled) stops busy polling for kBusyBackoff and only yields,
// as before.
constexpr auto kPreemptedGap = std::chrono::microseconds(2);  // a lone yield: 0.5 us, a switch away and back: >= 2.8 us
// A gap in the busy loop's own clock only counts from this size: an
// interrupt or a hypervisor exit stops the loop for a few microseconds
// (they turned busy polling off at random, often for the whole first
// benchmark size after start-up), while another task that takes the core
// holds it for a scheduler time slice (0.75 ms and more).
constexpr auto kDescheduledGap = std::chrono::microseconds(20);
// Short, so that one slow yield at start-up does not turn busy polling off
// for a whole short benchmark (1 ms did, and 200 us still did for the
// first size, ~50 operations of 1 us); a peer that shares this core still
// loses at most one busy window (2 us) per 100 us, 2 % (A/B with a busy
// loop beside the job: as fast as 200 us, performance.md).
constexpr auto kBusyBackoff = std::chrono::microseconds(100);
thread_local std::chrono::steady_clock::time_point busy_off_until{};

/// Watches the pending transfers' links (may_move) for up to `budget`.
/// True when one may move; false at the end of the budget or when this
/// thread was descheduled meanwhile (then busy polling backs off).
bool busy_poll(const Transfer* transfers, std::size_t count, const std::vector<char>* skip,
               std::chrono::nanoseconds budget) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto last = start;
  for (;;) {
    for (std::size_t i = 0; i < count; ++i) {
      const Transfer& t = transfers[i];
      if ((skip && (*skip)[i]) || t.complete()) continue;
      const bool send = t.dir == Transfer::Dir::Send;
      if (send && t.done >= send_limit(t)) continue;
      // Links that cannot be watched without a system call (TCP: no
      // shared memory; a hint of 0) wait for the next pass.
      if (!t.shm || t.shm->busy_poll_hint().count() == 0) continue;
      if (t.shm->may_move(send)) return true;
    }
    cpu_relax();
    const auto now = Clock::now();
    if (now - last > kDescheduledGap) {
      busy_off_until = now + kBusyBackoff;
      return false;
    }
    if (now - start >= budget) return false;
    last = now;
  }
}

/// One zero-copy receive step of `t` (a Transfer::recv_view).
std::size_t recv_view(Transfer& t) {
  if (!t.shm) {
    throw Error("transport: " + t.link->describe() +
                " cannot hand out received bytes in place (not a shared-memory link)");
  }
  return t.shm->try_recv_view(t.size - t.done, t.sink_align, t.sink, t.sink_ctx);
}

/// The poll loop. `skip[i]` marks transfers another thread drives; `wake_fd`
/// (or -1) is polled too and ends the loop early when readable (returns
/// false then; true when every non-skipped transfer completed).
bool progress_loop_untagged(Transfer* transfers, std::size_t count, Deadline deadline,
                            const std::function<void()>& on_progress, const std::vector<char>* skip, int wake_fd,
                            Link*& at);

/// progress_loop_untagged, with every IoError a link raised turned into a
/// LinkError naming that link's peer (`at`: the link being driven).
bool progress_loop(Transfer* transfers, std::size_t count, Deadline deadline, const std::function<void()>& on_progress,
                   const std::vector<char>* skip, int wake_fd) {
  Link* at = nullptr;
  try {
    return progress_loop_untagged(transfers, count, deadline, on_progress, skip, wake_fd, at);
  } catch (const LinkError&) {
    throw;
  } catch (const IoError& e) {
    if (at) throw LinkError(at->peer(), e.what());
    throw;
  }
}

bool progress_loop_untagged(Transfer* transfers, std::size_t count, Deadline deadline,
                            const std::function<void()>& on_progress, const std::vector<char>* skip, int wake_fd,
                            Link*& at) {
  std::vector<pollfd> fds;
  std::vector<std::size_t> fd_owner;
  const long spin_us = spin_micros();
  bool spinning = false;
  std::chrono::steady_clock::time_point spin_until;
  std::optional<std::chrono::steady_clock::time_point> next_check;
  for (;;) {
    bool all_done = true;
    bool moved = false;
    bool received = false;
    for (std::size_t i = 0; i < count; ++i) {
      Transfer& t = transfers[i];
      if ((skip && (*skip)[i]) || t.complete()) continue;
      all_done = false;
      at = t.link;
      if (t.dir == Transfer::Dir::Send) {
        std::size_t limit = send_limit(t);
        if (t.done >= limit) continue;
        std::size_t n = t.link->try_send(t.data + t.done, limit - t.done);
        t.done += n;
        moved = moved || n > 0;
      } else {
        std::size_t n = t.sink ? recv_view(t) : t.link->try_recv(t.data + t.done, t.size - t.done);
        t.done += n;
        moved = moved || n > 0;
        received = received || n > 0;
      }
    }
    at = nullptr;
    if (received && on_progress) on_progress();
    if (all_done) return true;
    if (moved) {
      spinning = false;
      continue;
    }
    // Spin: the global setting, or the longest hint of the links we wait on
    // (shared-memory links ask for a short spin when cores are not shared).
    long spin_for = spin_us;
    for (std::size_t i = 0; i < count; ++i) {
      const Transfer& t = transfers[i];
      if ((skip && (*skip)[i]) || t.complete()) continue;
      if (t.shm) spin_for = std::max<long>(spin_for, static_cast<long>(t.shm->spin_hint().count()));
    }
    if (spin_for > 0) {
      const auto now = std::chrono::steady_clock::now();
      if (!spinning) {
        spinning = true;
        spin_until = now + std::chrono::microseconds(spin_for);
        continue;
      }
      if (now < spin_until) {
        // A link's spin (shared memory) yields between passes: when the
        // peer waits for a core, it gets this one at once. Between yields
        // it may busy-poll (see busy_poll).
        if (spin_for > spin_us) {
          std::chrono::nanoseconds busy{0};
          for (std::size_t i = 0; i < count; ++i) {
            const Transfer& t = transfers[i];
            if ((skip && (*skip)[i]) || t.complete()) continue;
            if (t.shm) busy = std::max(busy, t.shm->busy_poll_hint());
          }
          if (busy.count() > 0 && now >= busy_off_until) {
            if (busy_poll(transfers, count, skip, busy)) continue;
            const auto y0 = std::chrono::steady_clock::now();
            sched_yield();
            const auto y1 = std::chrono::steady_clock::now();
            if (y1 - y0 > kPreemptedGap) busy_off_until = y1 + kBusyBackoff;
          } else {
            sched_yield();
          }
        }
        continue;
      }
    }
    spinning = false;

    // Tell the links we are about to sleep; one that can move now (data
    // arrived meanwhile) sends us round the loop again instead.
    bool can_move = false;
    for (std::size_t i = 0; i < count && !can_move; ++i) {
      Transfer& t = transfers[i];
      if ((skip && (*skip)[i]) || t.complete()) continue;
      const bool send = t.dir == Transfer::Dir::Send;
      if (send && t.done >= send_limit(t)) continue;
      if (!t.shm) continue;
      at = t.link;
      can_move = !t.shm->prepare_wait(send);
    }
    at = nullptr;
    if (can_move) continue;

    // Nothing moved: wait for readiness on every unfinished transfer.
    fds.clear();
    fd_owner.clear();
    for (std::size_t i = 0; i < count; ++i) {
      const Transfer& t = transfers[i];
      if ((skip && (*skip)[i]) || t.complete()) continue;
      if (t.dir == Transfer::Dir::Send && t.done >= send_limit(t)) continue;  // waiting on upstream data
      // TCP sends: POLLOUT | POLLRDHUP (a peer that aborted sends FIN, not
      // RST, and a sender blocked on its full buffer would otherwise wait
      // forever); receives POLLIN. Shared memory: POLLIN on its socket.
      const bool send = t.dir == Transfer::Dir::Send;
      if (t.shm) {
        fds.push_back(pollfd{t.shm->wait_fd(send), POLLIN, 0});
      } else {
        fds.push_back(pollfd{t.link->poll_fd(), send ? short(POLLOUT | POLLRDHUP) : short(POLLIN), 0});
      }
      fd_owner.push_back(i);
    }
    if (wake_fd >= 0) {
      fds.push_back(pollfd{wake_fd, POLLIN, 0});
      fd_owner.push_back(count);
    }
    if (fds.empty()) {
      // Only sends blocked on `ready` remain and nobody can raise it.
      throw Error("transport::progress: pipeline stalled (send waits for data no receive will provide)");
    }
    // Silent peers: wake at least every check interval of the links we wait
    // on, and check them once it has passed (whatever woke us: other links
    // may keep poll busy while this one's peer is gone).
    std::chrono::milliseconds check_every{0};
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fd_owner[k] == count) continue;
      auto every = transfers[fd_owner[k]].link->peer_check_interval();
      if (every.count() > 0 && (check_every.count() == 0 || every < check_every)) check_every = every;
    }
    const int deadline_ms = deadline.poll_timeout_ms();
    int timeout_ms = deadline_ms;
    if (check_every.count() > 0) {
      const int every_ms = static_cast<int>(std::min<int64_t>(check_every.count(), INT32_MAX));
      if (timeout_ms < 0 || every_ms < timeout_ms) timeout_ms = every_ms;
      if (!next_check) next_check = std::chrono::steady_clock::now() + check_every;
    }
    int rc = ::poll(fds.data(), fds.size(), timeout_ms);
    if (check_every.count() > 0 && std::chrono::steady_clock::now() >= *next_check) {
      for (std::size_t k = 0; k < fds.size(); ++k) {
        if (fd_owner[k] == count) continue;
        Link* l = transfers[fd_owner[k]].link;
        bool seen = false;
        for (std::size_t j = 0; j < k && !seen; ++j) seen = fd_owner[j] != count && transfers[fd_owner[j]].link == l;
        at = l;
        if (!seen) l->check_peer();  // throws IoError for a silent peer
      }
      at = nullptr;
      next_check = std::chrono::steady_clock::now() + check_every;
    }
    if (rc == 0 && (timeout_ms == deadline_ms || deadline.expired())) {
      std::string who;
      for (std::size_t k = 0; k < fds.size(); ++k) {
        if (fd_owner[k] == count) continue;
        const Transfer& t = transfers[fd_owner[k]];
        who += fmt::format("{}{} {} ({} of {} bytes)", who.empty() ? "" : ", ",
                           t.dir == Transfer::Dir::Send ? "send to" : "recv from", t.link->describe(), t.done, t.size);
      }
      throw TimeoutError("timed out waiting for " + who);
    }
    if (rc < 0 && errno != EINTR) throw IoError(fmt::format("poll failed: {}", std::strerror(errno)));
    if (rc > 0 && wake_fd >= 0 && (fds.back().revents & POLLIN)) return false;
    if (rc > 0) {
      for (std::size_t k = 0; k < fds.size(); ++k) {
        if (fd_owner[k] == count) continue;
        const Transfer& t = transfers[fd_owner[k]];
        // Peers never half-close: a FIN on a link we still have to send on
        // means the peer aborted or died before taking bytes it needs.
        if (t.dir == Transfer::Dir::Send && (fds[k].events & POLLOUT) && (fds[k].revents & (POLLRDHUP | POLLHUP)) &&
            !(fds[k].revents & POLLOUT)) {
          throw LinkError(t.link->peer(), fmt::format("connection to {} closed by peer while sending ({} of {} bytes)",
                                                      t.link->describe(), t.done, t.size));
        }
      }
    }
    // Readiness (including POLLERR/POLLHUP) is turned into progress or an
    // IoError by the next try_send/try_recv pass.
  }
}

/// A per-thread helper that drives large sends on its own thread while the
/// caller receives (and reduces) on the calling thread: the kernel's send
/// and receive copies then run on two cores, as in Gloo's device thread.
class SendHelper {
 public:
  SendHelper() : wake_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)), cancel_(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    if (!wake_ || !cancel_) throw IoError(fmt::format("eventfd failed: {}", std::strerror(errno)));
    thread_ = std::thread([this] { loop(); });
  }
  ~SendHelper() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  int wake_fd() const { return wake_.get(); }

  /// Starts driving `sends` (which must stay alive until wait() returns).
  void start(std::vector<Transfer> sends, Deadline deadline) {
    uint64_t drain;
    while (::read(wake_.get(), &drain, sizeof(drain)) > 0) {
    }
    while (::read(cancel_.get(), &drain, sizeof(drain)) > 0) {
    }
    std::lock_guard<std::mutex> lock(mu_);
    job_ = std::move(sends);
    deadline_ = deadline;
    error_ = nullptr;
    busy_ = true;
    cv_.notify_all();
  }

  /// Blocks until the current job finished; rethrows its error.
  void wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !busy_; });
    if (error_) {
      auto e = error_;
      error_ = nullptr;
      std::rethrow_exception(e);
    }
  }

  /// Ends the current job fast (the caller already failed). The links stay
  /// up: shutting them here would tell the peers we failed before our
  /// caller could record which peer failed first (Comm::report_failure);
  /// the caller aborts its communicator right after.
  void cancel() {
    uint64_t one = 1;
    ssize_t w = ::write(cancel_.get(), &one, sizeof(one));
    (void)w;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || busy_; });
      if (stop_) return;
      std::vector<Transfer>& job = job_;
      Deadline deadline = deadline_;
      lock.unlock();
      std::exception_ptr err;
      try {
        if (!progress_loop(job.data(), job.size(), deadline, {}, nullptr, cancel_.get())) {
          err = std::make_exception_ptr(IoError("transport: send cancelled after a failure"));
        }
      } catch (...) {
        err = std::current_exception();
      }
      lock.lock();
      error_ = err;
      busy_ = false;
      cv_.notify_all();
      uint64_t one = 1;
      ssize_t w = ::write(wake_.get(), &one, sizeof(one));
      (void)w;
    }
  }

  UniqueFd wake_;
  UniqueFd cancel_;  ///< readable: cancel() asked the job to end
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Transfer> job_;
  Deadline deadline_ = Deadline::never();
  std::exception_ptr error_;
  bool busy_ = false;
  bool stop_ = false;
  std::thread thread_;
};

/// Sends at least this large (in total) go to the helper thread.
constexpr std::size_t kOffloadBytes = 1u << 20;

/// HVD_TRANSPORT_SEND_THREAD: 0 (off for every link), 1 (on for every
/// link), unset or anything else: each link decides (SharedMemoryLink::offload_sends;
/// TCP links always take the helper).
int offload_setting() {
  static const int value = [] {
    const char* text = std::getenv("HVD_TRANSPORT_SEND_THREAD");
    if (!text) return -1;
    const std::string t(text);
    if (t == "0" || t == "false" || t == "off") return 0;
    if (t == "1" || t == "true" || t == "on") return 1;
    return -1;
  }();
  return value;
}

SendHelper& helper() {
  // One helper per calling thread. After fork() the child inherits the
  // object but not its thread: abandon it (never join a thread that does
  // not exist here) and start a fresh one.
  thread_local std::unique_ptr<SendHelper> h;
  thread_local pid_t owner = 0;
  if (h && owner != ::getpid()) (void)h.release();
  if (!h) {
    h = std::make_unique<SendHelper>();
    owner = ::getpid();
  }
  return *h;
}

}  // namespace

void progress(Transfer* transfers, std::size_t count, Deadline deadline, const std::function<void()>& on_progress) {
  // Offload plain (not pipelined) sends when they are large and there is
  // receiving to do meanwhile; otherwise one thread drives everything.
  std::size_t offload_bytes = 0;
  bool has_recv = false;
  bool links_want = true;
  for (std::size_t i = 0; i < count; ++i) {
    const Transfer& t = transfers[i];
    if (t.dir == Transfer::Dir::Recv) {
      has_recv = has_recv || !t.complete();
    } else if (t.ready == static_cast<std::size_t>(-1)) {
      offload_bytes += t.size - t.done;
      links_want = links_want && (!t.shm || t.shm->offload_sends());
    }
  }
  const int setting = offload_setting();
  const bool enabled = setting == 1 || (setting == -1 && links_want);
  if (!has_recv || offload_bytes < kOffloadBytes || !enabled) {
    progress_loop(transfers, count, deadline, on_progress, nullptr, -1);
    return;
  }
  std::vector<char> skip(count, 0);
  std::vector<Transfer> sends;
  for (std::size_t i = 0; i < count; ++i) {
    const Transfer& t = transfers[i];
    if (t.dir == Transfer::Dir::Send && t.ready == static_cast<std::size_t>(-1) && !t.complete()) {
      skip[i] = 1;
      sends.push_back(t);
    }
  }
  SendHelper& h = helper();
  h.start(std::move(sends), deadline);
  try {
    bool finished = false;
    bool helper_done = false;
    while (!finished) {
      finished = progress_loop(transfers, count, deadline, on_progress, &skip, helper_done ? -1 : h.wake_fd());
      if (!finished) {
        // The helper finished first: surface its error now (a failed send
        // must not leave us blocked on a receive from a live peer).
        helper_done = true;
        h.wait();
      }
    }
    h.wait();
  } catch (...) {
    h.cancel();
    try {
      h.wait();
    } catch (...) {
    }
    throw;
  }
  for (std::size_t i = 0; i < count; ++i) {
    if (skip[i]) transfers[i].done = transfers[i].size;
  }
}

}  // namespace hvd::transport
