// ShmLink, the pairing (ShmListener / shm_connect) and the settings (shm.h).
#include "hvd/transport/shm.h"

#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/secret.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <poll.h>
#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>

namespace hvd::transport {

// ---- settings ---------------------------------------------------------------

bool shm_enabled_from_env() {
  const char* v = std::getenv(kTransportEnv);
  if (!v || !*v) return true;
  const std::string s(v);
  if (s == "shm") return true;
  if (s == "tcp") return false;
  throw InvalidArgument(
      fmt::format("{}='{}': expected 'shm' (shared memory between ranks of one host, the default) "
                  "or 'tcp' (TCP everywhere)",
                  kTransportEnv, s));
}

bool shm_cma_from_env() { return env::get_bool_or(kShmCmaEnv, false); }

bool shm_reduce_in_ring_from_env() { return env::get_bool_or(kShmInPlaceEnv, true); }

void check_shm_env() {
  (void)shm_spin_from_env(1);
  (void)shm_busy_poll_from_env(1, 1);
  (void)shm_cma_from_env();
  (void)shm_reduce_in_ring_from_env();
}

namespace {
int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  int cpus = 1;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) cpus = CPU_COUNT(&set);
  return cpus;
}
}  // namespace

std::chrono::microseconds default_shm_spin(int local_ranks) {
  const int cpus = affinity_cpus();
  // The spin yields the core between checks (progress()), so a peer that
  // waits for this core runs at once. Measured on 2 loaded cores: with 2
  // ranks a pure 20 us busy spin made a 4 KiB allreduce 3x slower (20 ->
  // 66 us) while the yielding spin is as fast as none or faster (1 MiB
  // 136-167 us vs 165-352 us); with 4 ranks (oversubscribed) the yielding
  // 20 us spin cut 4 KiB from 110-133 us to 67-84 us. Only with many more
  // ranks than cores (a crowd of yielders just churns the scheduler) it
  // is off.
  return local_ranks <= 4 * cpus ? std::chrono::microseconds(20) : std::chrono::microseconds(0);
}

namespace {
/// `name`'s value, 0 to 1000000 `unit`s; nullopt when unset or empty;
/// InvalidArgument naming the variable otherwise.
std::optional<long> bounded_env(const char* name, const char* unit) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  if (*end != '\0' || errno != 0 || n < 0 || n > 1000000) {
    throw InvalidArgument(fmt::format("{}='{}': expected {}, 0 to 1000000", name, v, unit));
  }
  return n;
}
}  // namespace

std::chrono::microseconds shm_spin_from_env(int local_ranks) {
  const std::optional<long> n = bounded_env(kShmSpinEnv, "microseconds");
  return n ? std::chrono::microseconds(*n) : default_shm_spin(local_ranks);
}

std::chrono::nanoseconds default_shm_busy_poll(int local_ranks, int cpus) {
  return local_ranks <= cpus ? std::chrono::nanoseconds(2000) : std::chrono::nanoseconds(0);
}

std::chrono::nanoseconds shm_busy_poll_from_env(int local_ranks, int cpus) {
  const std::optional<long> n = bounded_env(kShmBusyPollEnv, "nanoseconds");
  return n ? std::chrono::nanoseconds(*n) : default_shm_busy_poll(local_ranks, cpus);
}

int shm_local_cpus(const std::vector<pid_t>& peers) {
  cpu_set_t all;
  CPU_ZERO(&all);
  if (::sched_getaffinity(0, sizeof all, &all) != 0) return 1;
  for (pid_t pid : peers) {
    cpu_set_t theirs;
    CPU_ZERO(&theirs);
    if (pid > 0 && ::sched_getaffinity(pid, sizeof theirs, &theirs) == 0) CPU_OR(&all, &all, &theirs);
  }
  return std::max(1, CPU_COUNT(&all));
}

bool shm_offload_sends(int local_ranks) {
  const int cpus = affinity_cpus();
  // The helper copies into the ring while the caller reduces out of the
  // other: a gain only with a spare core per rank. On 2 cores with 2 ranks
  // it made 2-16 MiB allreduces slower (performance.md).
  return 2 * local_ranks <= cpus;
}

std::size_t shm_ring_capacity(int local_peers) {
  constexpr std::size_t kMax = std::size_t{1} << 20;
  constexpr std::size_t kMin = std::size_t{64} << 10;
  constexpr std::size_t kBudget = std::size_t{8} << 20;
  if (local_peers <= 8) return kMax;
  std::size_t c = kMax;
  while (c > kMin && c * static_cast<std::size_t>(local_peers) > kBudget) c /= 2;
  return c;
}

namespace {

std::string hex(const unsigned char* p, std::size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    s.push_back(digits[p[i] >> 4]);
    s.push_back(digits[p[i] & 15]);
  }
  return s;
}

std::string sha256_hex(const std::string& text) {
  unsigned char md[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(text.data()), text.size(), md);
  return hex(md, sizeof md);
}

}  // namespace

std::string shm_host_id() {
  std::string boot;
  {
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::getline(f, boot);
  }
  char net[128] = {0};
  const ssize_t n = ::readlink("/proc/self/ns/net", net, sizeof net - 1);
  if (boot.empty() || n <= 0) return {};
  return sha256_hex(fmt::format("{}|{}|{}", boot, std::string(net, static_cast<std::size_t>(n)), ::geteuid()));
}

ShmToken random_token() {
  ShmToken t{};
  if (RAND_bytes(t.data(), static_cast<int>(t.size())) != 1) throw Error("RAND_bytes failed");
  return t;
}

// ---- ShmLink ----------------------------------------------------------------

ShmLink::ShmLink(std::shared_ptr<ShmSegment> segment, int tx, int rx, UniqueFd tx_sock, UniqueFd rx_sock, int peer,
                 pid_t peer_pid, std::chrono::microseconds spin)
    : segment_(std::move(segment)),
      tx_(segment_->ring(tx)),
      rx_(segment_->ring(rx)),
      tx_sock_(std::move(tx_sock)),
      rx_sock_(std::move(rx_sock)),
      peer_(peer),
      peer_pid_(peer_pid),
      spin_(spin) {
  set_nonblocking(tx_sock_.get(), true);
  set_nonblocking(rx_sock_.get(), true);
  cma_ = rx_cma_ok_ = peer_pid_ > 0 && shm_cma_from_env();
  view_ok_ = shm_reduce_in_ring_from_env();
  if (peer_pid_ > 0) {
    pidfd_ = UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, peer_pid_, 0)));
    if (!pidfd_) spdlog::debug("pidfd_open({}) for {} failed: {}", peer_pid_, describe(), std::strerror(errno));
  }
}

std::chrono::milliseconds ShmLink::peer_check_interval() const {
  return pidfd_ ? std::chrono::milliseconds(250) : std::chrono::milliseconds(0);
}

void ShmLink::check_peer() {
  if (!pidfd_) return;
  // Data it wrote before it died is still ours to read: fail only when the
  // ring from it is empty (the next pass reads the rest, then waits again).
  if (rx_.readable() > 0) return;
  pollfd p{pidfd_.get(), POLLIN, 0};
  if (::poll(&p, 1, 0) > 0 && (p.revents & POLLIN)) {
    fail(
        fmt::format("{} is gone: its process exited or was killed (its end of the link is still held open, by a "
                    "process it forked?)",
                    describe()));
  }
}

ShmLink::~ShmLink() = default;

std::string ShmLink::describe() const { return fmt::format("rank {} (shared memory, pid {})", peer_, peer_pid_); }

void ShmLink::fail(const std::string& reason) {
  shutdown();
  throw IoError(reason);
}

void ShmLink::wake(int sock) {
  const char b = 1;
  // Errors are ignored on purpose: a full socket already holds a wake-up,
  // and a peer that is gone is noticed by our own wait (EOF), not here (it
  // may have finished normally after a stale flag).
  ssize_t rc;
  do {
    rc = ::send(sock, &b, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
  } while (rc < 0 && errno == EINTR);
}

bool ShmLink::drain_wakeups(int sock, std::atomic<bool>& closed) {
  if (closed.load(std::memory_order_relaxed)) return true;
  char buf[256];
  for (;;) {
    const ssize_t n = ::recv(sock, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) {
      if (static_cast<std::size_t>(n) < sizeof buf) return false;
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    // EOF, ECONNRESET, ...: the peer's end is gone.
    closed.store(true);
    return true;
  }
}

std::size_t ShmLink::try_send(const void* data, std::size_t len) {
  if (shut_.load(std::memory_order_relaxed)) throw IoError(fmt::format("link to {} was aborted", describe()));
  if (tx_active_) {
    // A posted descriptor: report what the receiver copied meanwhile.
    const auto copied = static_cast<std::size_t>(tx_.descriptor_bytes_copied() - tx_copied_base_);
    if (static_cast<const char*>(data) != tx_addr_ + tx_reported_) {
      fail(fmt::format("internal error: a send to {} moved while its single-copy descriptor was pending", describe()));
    }
    const std::size_t n = copied - tx_reported_;
    tx_reported_ = copied;
    if (copied == tx_len_) {
      tx_active_ = false;
    } else if (tx_.descriptors_refused()) {
      tx_active_ = false;  // the rest goes through the ring
      cma_ = false;
    }
    return n;
  }
  if (cma_ && len >= kShmCmaMinBytes && tx_.empty_for_producer()) {
    if (tx_.descriptors_refused()) {
      cma_ = false;
    } else {
      tx_active_ = true;
      tx_addr_ = static_cast<const char*>(data);
      tx_len_ = len;
      tx_reported_ = 0;
      tx_copied_base_ = tx_.descriptor_bytes_copied();
      tx_.post_descriptor(++tx_seq_, data, len);
      if (tx_.take_consumer_waiter()) wake(tx_sock_.get());
      return 0;
    }
  }
  const std::size_t n = tx_.write(data, len);
  if (n > 0 && tx_.take_consumer_waiter()) wake(tx_sock_.get());
  return n;
}

bool ShmLink::rx_single_copy(void* data, std::size_t len, std::size_t& moved) {
  moved = 0;
  if (!rx_active_) {
    uint64_t addr = 0;
    std::size_t dlen = 0;
    const uint64_t seq = rx_.posted_descriptor(addr, dlen);
    if (seq == rx_seq_) return false;
    rx_seq_ = seq;
    rx_addr_ = addr;
    rx_len_ = dlen;
    rx_copied_ = 0;
    rx_active_ = true;
  }
  if (rx_cma_ok_) {
    const std::size_t want = std::min(len, rx_len_ - rx_copied_);
    iovec local{data, want};
    iovec remote{reinterpret_cast<void*>(rx_addr_ + rx_copied_), want};
    const ssize_t r = ::process_vm_readv(peer_pid_, &local, 1, &remote, 1, 0);
    if (r > 0) {
      moved = static_cast<std::size_t>(r);
      rx_copied_ += moved;
      rx_.add_descriptor_bytes_copied(moved);
      single_copy_bytes_ += moved;
      if (rx_copied_ == rx_len_) rx_active_ = false;
      if (rx_.take_producer_waiter()) wake(rx_sock_.get());
      return true;
    }
    const int err = r < 0 ? errno : EIO;
    if (err != EPERM && err != EACCES && err != ENOSYS) {
      fail(fmt::format("reading {}'s memory (single copy) failed: {} (did the process exit?)", describe(),
                       std::strerror(err)));
    }
    static std::atomic<bool> logged{false};
    if (!logged.exchange(true)) {
      spdlog::info(
          "{}: single-copy transfers are not permitted here ({}: ptrace rules or no CAP_SYS_PTRACE); "
          "shared memory copies twice instead",
          describe(), std::strerror(err));
    }
    rx_cma_ok_ = false;
  }
  // Refused (now or earlier): the sender resends the rest through the ring.
  rx_.refuse_descriptors();
  rx_active_ = false;
  if (rx_.take_producer_waiter()) wake(rx_sock_.get());
  return false;
}

std::size_t ShmLink::try_recv(void* data, std::size_t len) {
  if (shut_.load(std::memory_order_relaxed)) throw IoError(fmt::format("link to {} was aborted", describe()));
  std::size_t n = rx_.read(data, len);
  if (n > 0) {
    if (rx_.take_producer_waiter()) wake(rx_sock_.get());
    return n;
  }
  if (len > 0) rx_single_copy(data, len, n);
  return n;
}

std::size_t ShmLink::try_recv_view(std::size_t len, std::size_t align, RecvSink sink, void* ctx) {
  if (shut_.load(std::memory_order_relaxed)) throw IoError(fmt::format("link to {} was aborted", describe()));
  if (align == 0 || align > 16 || (align & (align - 1)) != 0 || len % align != 0) {
    throw Error(fmt::format("ShmLink::try_recv_view: bad alignment {} for {} bytes", align, len));
  }
  std::size_t n = rx_.read_view(len, align, sink, ctx);
  if (n > 0) {
    if (rx_.take_producer_waiter()) wake(rx_sock_.get());
    return n;
  }
  // A descriptor posted by a sender with single copy on: refused (this side
  // has it off), so the sender goes on through the ring.
  if (len > 0) rx_single_copy(nullptr, len, n);
  return n;
}

bool ShmLink::may_move(bool send) const {
  if (shut_.load(std::memory_order_relaxed)) return true;
  if (send) {
    if (!tx_active_) return tx_.writable() > 0;
    return tx_.descriptor_bytes_copied() != tx_copied_base_ + tx_reported_ || tx_.descriptors_refused();
  }
  return rx_active_ || rx_.readable() > 0 || rx_.posted_sequence() != rx_seq_;
}

bool ShmLink::prepare_wait(bool send) {
  if (shut_.load(std::memory_order_relaxed)) throw IoError(fmt::format("link to {} was aborted", describe()));
  const bool closed = send ? drain_wakeups(tx_sock_.get(), tx_closed_) : drain_wakeups(rx_sock_.get(), rx_closed_);
  bool may_sleep;
  if (send) {
    may_sleep = tx_active_ ? tx_.arm_producer_wait_for(tx_copied_base_ + tx_reported_) : tx_.arm_producer_wait();
  } else {
    may_sleep = !rx_active_ && rx_.arm_consumer_wait_for(rx_seq_);
  }
  if (!may_sleep) return false;  // the ring moved meanwhile: go round again
  if (closed) {
    fail(fmt::format("connection to {} closed by peer while {} (the process exited, was killed or aborted)", describe(),
                     send ? "sending" : "receiving"));
  }
  return true;
}

void ShmLink::shutdown() {
  if (shut_.exchange(true)) return;
  ::shutdown(tx_sock_.get(), SHUT_RDWR);
  ::shutdown(rx_sock_.get(), SHUT_RDWR);
}

// ---- pairing ----------------------------------------------------------------

namespace {

constexpr char kHelloMagic[8] = {'H', 'V', 'D', 'S', 'H', 'M', '1', '\0'};

struct Hello {
  char magic[8];
  int32_t from_rank;
  int32_t to_rank;
  unsigned char token[16];
};
static_assert(sizeof(Hello) == 32);

sockaddr_un abstract_address(const std::string& name, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  HVD_ENFORCE(name.size() + 1 <= sizeof a.sun_path, "abstract socket name too long");
  a.sun_path[0] = '\0';
  std::memcpy(a.sun_path + 1, name.data(), name.size());
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  return a;
}

ucred peer_credentials(int fd) {
  ucred c{};
  socklen_t len = sizeof c;
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &c, &len) != 0) {
    throw IoError(fmt::format("SO_PEERCRED failed: {}", std::strerror(errno)));
  }
  return c;
}

/// Waits for `events` on fd; false at the deadline.
bool wait_for(int fd, short events, Deadline deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    const int rc = ::poll(&p, 1, deadline.poll_timeout_ms());
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) throw IoError(fmt::format("poll failed: {}", std::strerror(errno)));
  }
}

}  // namespace

ShmListener::ShmListener(const std::string& secret, const std::string& scope, int self_rank, int backlog) {
  const ShmToken salt = random_token();
  name_ = "hvd-shm-" +
          sha256_hex(fmt::format("{}|{}|{}|{}|{}", secret, scope, self_rank, ::getpid(), hex(salt.data(), salt.size())))
              .substr(0, 40);
  fd_ = UniqueFd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!fd_) throw IoError(fmt::format("AF_UNIX socket failed: {}", std::strerror(errno)));
  socklen_t len = 0;
  const sockaddr_un a = abstract_address(name_, len);
  if (::bind(fd_.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0) {
    throw IoError(fmt::format("binding the shared-memory pairing socket failed: {}", std::strerror(errno)));
  }
  if (::listen(fd_.get(), backlog) != 0) {
    throw IoError(fmt::format("listen on the shared-memory pairing socket failed: {}", std::strerror(errno)));
  }
}

ShmListener::~ShmListener() = default;

std::unique_ptr<ShmLink> ShmListener::accept(int self_rank, std::map<int, ShmToken>& tokens, Deadline deadline,
                                             std::chrono::microseconds spin, bool populate) {
  for (;;) {
    if (!wait_for(fd_.get(), POLLIN, deadline)) {
      throw TimeoutError(fmt::format("rank {}: local peers did not pair over shared memory in time", self_rank));
    }
    UniqueFd conn(::accept4(fd_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!conn) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) continue;
      throw IoError(fmt::format("accept on the shared-memory pairing socket failed: {}", std::strerror(errno)));
    }
    auto refuse = [&](const std::string& why) {
      if (refused_++ == 0) spdlog::warn("rank {}: refused a shared-memory pairing connection: {}", self_rank, why);
    };
    // A real peer sent its hello before we accepted; a stranger gets at
    // most one second.
    const Deadline one = Deadline(std::min(deadline.at(), Clock::now() + std::chrono::seconds(1)));
    if (!wait_for(conn.get(), POLLIN, one)) {
      refuse("nothing received within 1 s");
      continue;
    }
    Hello hello{};
    alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))];
    iovec iov{&hello, sizeof hello};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t n;
    do {
      n = ::recvmsg(conn.get(), &msg, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    UniqueFd memfd;
    UniqueFd ring1_sock;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); n > 0 && c; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      int fds[2] = {-1, -1};
      std::memcpy(fds, CMSG_DATA(c), std::min<std::size_t>(nfds, 2) * sizeof(int));
      for (std::size_t i = 2; i < nfds; ++i) {  // more than we asked for: close the rest
        int extra;
        std::memcpy(&extra, CMSG_DATA(c) + i * sizeof(int), sizeof extra);
        ::close(extra);
      }
      memfd = UniqueFd(fds[0]);
      ring1_sock = UniqueFd(fds[1]);
    }
    if (n != static_cast<ssize_t>(sizeof hello) || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
        std::memcmp(hello.magic, kHelloMagic, sizeof kHelloMagic) != 0 || !memfd || !ring1_sock) {
      refuse("not a pairing hello");
      continue;
    }
    const ucred cred = peer_credentials(conn.get());
    if (cred.uid != ::geteuid()) {
      refuse(fmt::format("connecting process runs as uid {}, not {}", cred.uid, ::geteuid()));
      continue;
    }
    auto it = tokens.find(hello.from_rank);
    if (hello.to_rank != self_rank || it == tokens.end() ||
        CRYPTO_memcmp(it->second.data(), hello.token, sizeof hello.token) != 0) {
      refuse(fmt::format("rank {} presented no valid token for rank {}", hello.from_rank, hello.to_rank));
      continue;
    }
    std::shared_ptr<ShmSegment> segment;
    try {
      segment = ShmSegment::map(memfd.get(), populate);
    } catch (const InvalidArgument& e) {
      refuse(fmt::format("rank {}: {}", hello.from_rank, e.what()));
      continue;
    }
    memfd.reset();
    const char ok = 'K';
    write_all(conn.get(), &ok, 1, deadline);
    const int peer = hello.from_rank;
    tokens.erase(it);
    // Ring 0 carries the connecting side's data to us (wake-ups on the
    // accepted connection), ring 1 ours to it (on the socketpair's end).
    return std::make_unique<ShmLink>(std::move(segment), 1, 0, std::move(ring1_sock), std::move(conn), peer, cred.pid,
                                     spin);
  }
}

std::unique_ptr<ShmLink> shm_connect(const std::string& name, int self_rank, int peer, const ShmToken& token,
                                     std::size_t ring_capacity, Deadline deadline, std::chrono::microseconds spin,
                                     bool populate) {
  UniqueFd sock(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
  if (!sock) throw IoError(fmt::format("AF_UNIX socket failed: {}", std::strerror(errno)));
  socklen_t len = 0;
  const sockaddr_un a = abstract_address(name, len);
  for (;;) {
    if (::connect(sock.get(), reinterpret_cast<const sockaddr*>(&a), len) == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN) {  // the listener's backlog is full: it is busy, retry
      if (deadline.expired()) {
        throw TimeoutError(fmt::format("rank {}: rank {}'s shared-memory pairing socket stayed busy", self_rank, peer));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    throw IoError(fmt::format("rank {}: connecting to rank {}'s shared-memory pairing socket failed: {}", self_rank,
                              peer, std::strerror(errno)));
  }
  const ucred cred = peer_credentials(sock.get());
  if (cred.uid != ::geteuid()) {
    throw IoError(fmt::format("rank {}: rank {}'s shared-memory pairing socket belongs to uid {}, not {}", self_rank,
                              peer, cred.uid, ::geteuid()));
  }
  std::shared_ptr<ShmSegment> segment = ShmSegment::create(ring_capacity, populate);
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    throw IoError(fmt::format("socketpair failed: {}", std::strerror(errno)));
  }
  UniqueFd ring1_mine(pair[0]);
  UniqueFd ring1_theirs(pair[1]);

  Hello hello{};
  std::memcpy(hello.magic, kHelloMagic, sizeof kHelloMagic);
  hello.from_rank = self_rank;
  hello.to_rank = peer;
  std::memcpy(hello.token, token.data(), token.size());
  alignas(cmsghdr) char control[CMSG_SPACE(2 * sizeof(int))] = {};
  iovec iov{&hello, sizeof hello};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(2 * sizeof(int));
  const int fds[2] = {segment->fd(), ring1_theirs.get()};
  std::memcpy(CMSG_DATA(c), fds, sizeof fds);
  for (;;) {
    const ssize_t n = ::sendmsg(sock.get(), &msg, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(sizeof hello)) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (!wait_for(sock.get(), POLLOUT, deadline)) {
        throw TimeoutError(fmt::format("rank {}: sending the shared segment to rank {} timed out", self_rank, peer));
      }
      continue;
    }
    throw IoError(fmt::format("rank {}: sending the shared segment to rank {} failed: {}", self_rank, peer,
                              n < 0 ? std::strerror(errno) : "short write"));
  }
  // Only the peer may hold the other end: its death must close it.
  ring1_theirs.reset();
  if (!wait_for(sock.get(), POLLIN, deadline)) {
    throw TimeoutError(
        fmt::format("rank {}: rank {} did not confirm the shared-memory pairing in time", self_rank, peer));
  }
  char ok = 0;
  const ssize_t n = ::recv(sock.get(), &ok, 1, MSG_DONTWAIT);
  if (n != 1 || ok != 'K') {
    throw IoError(
        fmt::format("rank {}: rank {} refused the shared-memory pairing (closed the connection)", self_rank, peer));
  }
  segment->release_fd();
  return std::make_unique<ShmLink>(std::move(segment), 0, 1, std::move(sock), std::move(ring1_mine), peer, cred.pid,
                                   spin);
}

}  // namespace hvd::transport
