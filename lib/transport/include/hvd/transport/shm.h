#pragma once
/// Shared-memory links between two processes of one host.
///
/// Data: one anonymous shared segment per pair of ranks (memfd_create: no
/// name in /dev/shm, nothing to clean up after any crash; only the two
/// processes that map it can reach it), holding one single-producer /
/// single-consumer byte ring per direction. Head and tail counters and the
/// two "waiting" flags live on their own cache lines.
///
/// Waiting: progress() spins briefly (ShmLink::spin_hint), then a waiting
/// side sets its flag in the ring and sleeps in poll(2) on an AF_UNIX
/// connection of the pair; the other side, after moving data, writes one
/// wake-up byte there when it sees the flag (a Dekker-style store / fence /
/// load on both sides, so a wake-up is never lost). Each ring has its own
/// connection, so a receive (caller's thread) and a send (progress()'s send
/// helper thread) on one link never take each other's wake-ups.
/// Oversubscribed jobs (more ranks than cores) therefore sleep instead of
/// burning the core their peer needs.
///
/// Large sends (>= kShmCmaMinBytes, with kShmCmaEnv=1): single copy. While the ring is empty
/// the sender posts a descriptor (address, length) in the ring's header
/// instead of copying, and the receiver copies straight from the sender's
/// memory with process_vm_readv (Linux cross-memory attach) into its
/// destination; the send completes as the receiver reports bytes copied.
/// Where CMA is forbidden (ptrace rules, a container without
/// CAP_SYS_PTRACE) the receiver refuses the descriptor, logs one line, and
/// the sender falls back to the ring (two copies) for good.
///
/// Liveness: the same AF_UNIX connections. When the peer process exits or is
/// killed the kernel closes its ends and the waiting side sees EOF at once;
/// an aborted peer shuts them down (Link::shutdown). Data the peer wrote
/// before it went away can still be read (the mapping stays valid).
///
/// Pairing (ShmListener / shm_connect): the lower rank of a pair listens on
/// an abstract AF_UNIX socket whose name includes a hash of the job secret,
/// the communicator scope and the rank (abstract names live in the network
/// namespace and vanish with the socket). The higher rank connects and sends,
/// in one message, its rank, a 16-byte token it got from the listener over
/// the already authenticated TCP link, and the segment's memfd (SCM_RIGHTS).
/// The listener accepts the connection only when SO_PEERCRED shows the same
/// uid and the token matches the one it issued to that rank (so a stranger
/// that finds the name gets nothing), maps the segment and answers with one
/// byte. The same message carries one end of a socketpair: the second
/// connection (the first carries ring 0's wake-ups, the pair ring 1's). Both sides then close the memfd: the mappings
/// are all that is left.
#include "hvd/common/io.h"
#include "hvd/transport/link.h"
#include "hvd/transport/shared_memory_link.h"

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace hvd::transport {

/// Environment variable choosing the data path between ranks of one host:
/// "shm" (default) or "tcp" (everything over TCP, the pre-shm behaviour).
inline constexpr const char* kTransportEnv = "HVD_TRANSPORT";
/// Environment variable: microseconds progress() spins on a shared-memory
/// link before sleeping (default: see default_shm_spin).
inline constexpr const char* kShmSpinEnv = "HVD_SHM_SPIN_US";
/// Environment variable: nanoseconds of busy polling (no system call)
/// between two yields of that spin (default: see default_shm_busy_poll).
inline constexpr const char* kShmBusyPollEnv = "HVD_SHM_BUSY_POLL_NS";
/// Environment variable: 1 turns on single-copy transfers (CMA) of large
/// sends on shared-memory links (default 0: on the 2-core reference host
/// they were not faster than the two ring copies; docs/performance.md).
inline constexpr const char* kShmCmaEnv = "HVD_SHM_CMA";
inline constexpr const char* kShmInPlaceEnv = "HVD_SHM_REDUCE_IN_RING";
/// Sends at least this large go single copy when CMA is allowed.
inline constexpr std::size_t kShmCmaMinBytes = 256 * 1024;

/// True unless kTransportEnv says "tcp"; InvalidArgument naming the variable
/// for any value other than "", "shm", "tcp".
bool shm_enabled_from_env();
/// kShmCmaEnv as a boolean (default false); InvalidArgument for garbage.
bool shm_cma_from_env();
/// HVD_SHM_REDUCE_IN_RING (default 1): 0 makes ShmLink refuse
/// try_recv_view, so the ring reduce-scatter copies out of the ring into its
/// staging buffer first (the path before; for A/B measurements).
bool shm_reduce_in_ring_from_env();
/// Validates kShmSpinEnv and kShmCmaEnv (InvalidArgument naming the
/// variable), so bad values fail before any peer is contacted.
void check_shm_env();

/// One direction of a pair: a byte ring in shared memory. A view only (the
/// memory belongs to a ShmSegment). Exactly one producer and one consumer.
class ShmRing {
 public:
  /// Bytes of shared memory a ring of `capacity` data bytes needs
  /// (capacity must be a power of two >= 64).
  static std::size_t bytes_for(std::size_t capacity);
  /// Formats `mem` (bytes_for(capacity) bytes, 64-byte aligned) as an empty ring.
  static ShmRing create(void* mem, std::size_t capacity);
  /// A view of a ring another process formatted; InvalidArgument when the
  /// header does not describe a ring that fits in `available` bytes.
  static ShmRing attach(void* mem, std::size_t available);

  ShmRing() = default;
  std::size_t capacity() const { return capacity_; }

  /// Producer: copies up to `len` bytes in; returns how many (0: full).
  std::size_t write(const void* data, std::size_t len);
  /// Consumer: copies up to `len` bytes out; returns how many (0: empty).
  std::size_t read(void* data, std::size_t len);
  /// Consumer, zero copy: passes up to `len` readable bytes to
  /// `sink(ctx, p, n)` where they lie in the ring (two spans when they wrap;
  /// an element of `align` bytes that straddles the end is passed through a
  /// small local copy), then frees them. Only whole `align`-byte units are
  /// taken (`len` must be a multiple of `align`, a power of two <= 16);
  /// returns the bytes taken.
  std::size_t read_view(std::size_t len, std::size_t align, RecvSink sink, void* ctx);
  /// Bytes readable now / free space now.
  std::size_t readable() const;
  std::size_t writable() const;

  /// Announce that the consumer (producer) is about to sleep. Returns true
  /// when it may sleep: the ring is still empty (full) after the flag was
  /// published, so the other side will see the flag after its next move.
  bool arm_consumer_wait();
  bool arm_producer_wait();
  /// The other side: after moving data, take the waiter's flag (true: it
  /// was set, the waiter must be woken).
  bool take_consumer_waiter();
  bool take_producer_waiter();

  /// Single copy (ShmLink): the producer posts where its large send lies
  /// (one descriptor at a time, only while the ring is empty, sequence
  /// numbers from 1); the consumer copies straight out of the producer's
  /// memory (process_vm_readv) and counts the bytes it copied.
  void post_descriptor(uint64_t seq, const void* addr, std::size_t len);
  /// Consumer: the last posted sequence number (0: none yet) and its fields.
  uint64_t posted_descriptor(uint64_t& addr, std::size_t& len) const;
  /// Consumer: the last posted sequence number alone (a relaxed load).
  uint64_t posted_sequence() const;
  uint64_t descriptor_bytes_copied() const;
  void add_descriptor_bytes_copied(std::size_t n);
  /// Consumer: it cannot read the producer's memory (ptrace rules); the
  /// producer sends through the ring instead from then on.
  void refuse_descriptors();
  bool descriptors_refused() const;
  /// Sleep flags for the descriptor protocol: the consumer may sleep while
  /// the ring is empty and nothing beyond `seen_seq` was posted; the
  /// producer while no byte beyond `copied_seen` was copied (and no refusal).
  bool arm_consumer_wait_for(uint64_t seen_seq);
  bool arm_producer_wait_for(uint64_t copied_seen);
  /// Producer: every byte written so far was read.
  bool empty_for_producer() const;

 private:
  struct Header;
  Header* h_ = nullptr;
  char* data_ = nullptr;
  std::size_t capacity_ = 0;
};

/// The shared memory of one pair: two rings (ring 0 carries the connecting
/// side's data to the listening side, ring 1 the other way).
class ShmSegment {
 public:
  /// memfd_create + ftruncate + mmap (MAP_SHARED). IoError naming the call.
  /// `populate`: fault every page in now (MAP_POPULATE), so the rings'
  /// first pass pays no page faults; false: pages are allocated as they are
  /// first used (set-up of a short or oversubscribed job then pays only for
  /// what it touches).
  static std::shared_ptr<ShmSegment> create(std::size_t ring_capacity, bool populate = true);
  /// Maps a segment received from the peer; checks its size and headers.
  static std::shared_ptr<ShmSegment> map(int memfd, bool populate = true);
  ~ShmSegment();
  ShmSegment(const ShmSegment&) = delete;
  ShmSegment& operator=(const ShmSegment&) = delete;

  ShmRing& ring(int i) { return rings_[i]; }
  /// The memfd until release_fd() (create() keeps it so it can be sent).
  int fd() const { return fd_.get(); }
  void release_fd() { fd_.reset(); }
  std::size_t size() const { return size_; }

 private:
  ShmSegment() = default;
  UniqueFd fd_;
  void* base_ = nullptr;
  std::size_t size_ = 0;
  ShmRing rings_[2];
};

class ShmLink final : public Link, public SharedMemoryLink {
 public:
  /// `tx`/`rx`: which of the segment's rings this side produces into /
  /// consumes from; `tx_sock`/`rx_sock`: the connected AF_UNIX sockets
  /// carrying those rings' wake-ups (and liveness). `spin`: see spin_hint.
  ShmLink(std::shared_ptr<ShmSegment> segment, int tx, int rx, UniqueFd tx_sock, UniqueFd rx_sock, int peer,
          pid_t peer_pid, std::chrono::microseconds spin);
  ~ShmLink() override;

  int peer() const override { return peer_; }
  std::size_t try_send(const void* data, std::size_t len) override;
  std::size_t try_recv(void* data, std::size_t len) override;
  SharedMemoryLink* shared_memory() override { return this; }
  /// Zero copy out of the ring (the reduce-scatter reduces straight from
  /// it). Not while single copy (HVD_SHM_CMA) may still deliver data.
  bool supports_recv_view() const override { return view_ok_ && !rx_cma_ok_; }
  std::size_t send_window() const override { return tx_.capacity(); }
  std::size_t try_recv_view(std::size_t len, std::size_t align, RecvSink sink, void* ctx) override;
  int poll_fd() const override { return rx_sock_.get(); }
  int wait_fd(bool send) const override { return send ? tx_sock_.get() : rx_sock_.get(); }
  bool prepare_wait(bool send) override;
  std::chrono::microseconds spin_hint() const override { return spin_; }
  /// Busy polling between the spin's yields (set by the caller, default 0).
  std::chrono::nanoseconds busy_poll_hint() const override { return busy_poll_; }
  void set_busy_poll(std::chrono::nanoseconds ns) { busy_poll_ = ns; }
  /// Reads the ring's counters only.
  bool may_move(bool send) const override;
  /// Large sends on progress()'s helper thread: only while every local rank
  /// and its helper can have a core (set by the caller, default yes).
  bool offload_sends() const override { return offload_; }
  void set_offload_sends(bool on) { offload_ = on; }
  void shutdown() override;
  bool is_shutdown() const override { return shut_.load(); }
  std::string describe() const override;
  /// While waiting, the peer's process is checked through a pidfd every
  /// 250 ms: a process that forked (a data loader, say) before it died
  /// leaves its socket ends open in its children, so EOF alone would not
  /// come. 0 when no pidfd could be opened (peer in another pid namespace,
  /// kernel before 5.3).
  std::chrono::milliseconds peer_check_interval() const override;
  void check_peer() override;

  pid_t peer_pid() const { return peer_pid_; }
  /// Bytes this side received by single copy (process_vm_readv).
  std::size_t single_copy_bytes() const { return single_copy_bytes_; }

 private:
  [[noreturn]] void fail(const std::string& reason);
  /// Reads pending wake-up bytes from `sock`; true when the peer closed
  /// its end (latched in `closed`).
  static bool drain_wakeups(int sock, std::atomic<bool>& closed);
  static void wake(int sock);

  std::shared_ptr<ShmSegment> segment_;
  ShmRing& tx_;
  ShmRing& rx_;
  UniqueFd tx_sock_;
  UniqueFd rx_sock_;
  int peer_;
  pid_t peer_pid_;
  std::chrono::microseconds spin_;
  std::chrono::nanoseconds busy_poll_{0};
  std::atomic<bool> shut_{false};
  std::atomic<bool> tx_closed_{false};
  std::atomic<bool> rx_closed_{false};
  UniqueFd pidfd_;
  /// try_recv's share of a single-copy send: how the receiving side copies.
  bool rx_single_copy(void* data, std::size_t len, std::size_t& moved);

  // Single copy, sending side (only the sending thread touches these).
  bool cma_ = true;
  bool tx_active_ = false;
  uint64_t tx_seq_ = 0;
  const char* tx_addr_ = nullptr;
  std::size_t tx_len_ = 0;
  std::size_t tx_reported_ = 0;
  uint64_t tx_copied_base_ = 0;
  // Receiving side (only the receiving thread).
  bool rx_cma_ok_ = true;
  bool view_ok_ = true;
  bool offload_ = true;
  bool rx_active_ = false;
  uint64_t rx_seq_ = 0;
  uint64_t rx_addr_ = 0;
  std::size_t rx_len_ = 0;
  std::size_t rx_copied_ = 0;
  std::size_t single_copy_bytes_ = 0;
};

/// The spin a link gets when kShmSpinEnv is unset: 20 us (yielding the core
/// between checks) unless the host is heavily oversubscribed (`local_ranks`
/// > 4x the CPUs this process may run on: 0).
std::chrono::microseconds default_shm_spin(int local_ranks);
/// kShmSpinEnv's value, else default_shm_spin(local_ranks); InvalidArgument
/// for garbage.
std::chrono::microseconds shm_spin_from_env(int local_ranks);
/// The busy polling a link gets when kShmBusyPollEnv is unset: 2 us
/// between the spin's yields while the local ranks do not outnumber `cpus`
/// (shm_local_cpus), else 0 (yield only: a busy poller would hold a core
/// another rank needs).
std::chrono::nanoseconds default_shm_busy_poll(int local_ranks, int cpus);
/// kShmBusyPollEnv's value (0 to 1000000 ns), else
/// default_shm_busy_poll(local_ranks, cpus); InvalidArgument for garbage.
std::chrono::nanoseconds shm_busy_poll_from_env(int local_ranks, int cpus);
/// CPUs the local ranks may run on: the union of this process's affinity
/// and that of each process in `peers` (a peer whose affinity cannot be read
/// adds nothing). Ranks pinned one per core (mpirun --bind-to core) each
/// see a single CPU, but together they have one core per rank.
int shm_local_cpus(const std::vector<pid_t>& peers);
/// Whether shared-memory links hand large sends to progress()'s helper
/// thread: when 2 * local_ranks <= the CPUs this process may use.
bool shm_offload_sends(int local_ranks);

/// Ring capacity (power of two) for a rank with `local_peers` peers on its
/// host: 1 MiB each up to 8 peers, less beyond (at least 64 KiB), so the
/// shared memory per rank stays bounded (~8 MiB).
std::size_t shm_ring_capacity(int local_peers);

/// An identity of "this host" for pairing: processes with equal ids can
/// reach each other's abstract AF_UNIX sockets and share memory (same
/// kernel boot, same network namespace, same uid). Empty when it cannot be
/// determined (then no shared memory is used).
std::string shm_host_id();

/// 16 random bytes.
using ShmToken = std::array<unsigned char, 16>;
ShmToken random_token();

/// Listening side of the pairing (see the file comment).
class ShmListener {
 public:
  /// Binds an abstract AF_UNIX socket named from sha256(secret | scope |
  /// rank | pid | random). IoError on failure.
  ShmListener(const std::string& secret, const std::string& scope, int self_rank, int backlog = 64);
  ~ShmListener();
  ShmListener(const ShmListener&) = delete;
  ShmListener& operator=(const ShmListener&) = delete;

  /// The abstract name (without the leading NUL), to hand to peers.
  const std::string& name() const { return name_; }

  /// Accepts until one peer presents `tokens[rank]` (a rank in the map, not
  /// yet paired) and the same uid; maps its segment and returns the link
  /// (the paired rank is removed from `tokens`). Other connections are
  /// dropped and logged. TimeoutError at the deadline.
  /// `populate`: see ShmSegment::create.
  std::unique_ptr<ShmLink> accept(int self_rank, std::map<int, ShmToken>& tokens, Deadline deadline,
                                  std::chrono::microseconds spin, bool populate = true);

 private:
  UniqueFd fd_;
  std::string name_;
  std::size_t refused_ = 0;
};

/// Connecting side: connects to `name`, sends self_rank + token + a fresh
/// segment of `ring_capacity` per direction, waits for the listener's
/// answer. IoError when the listener refuses or is gone, TimeoutError at the
/// deadline.
std::unique_ptr<ShmLink> shm_connect(const std::string& name, int self_rank, int peer, const ShmToken& token,
                                     std::size_t ring_capacity, Deadline deadline, std::chrono::microseconds spin,
                                     bool populate = true);

}  // namespace hvd::transport
