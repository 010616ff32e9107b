// LocalPairing (local_links.h): shared-memory links to the peers of this
// host, decided one link at a time as links are formed.
#include "local_links.h"

#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/job_env.h"
#include "hvd/transport/link.h"
#include "hvd/transport/shm.h"
#include "hvd/transport/tcp.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <map>

namespace hvd::collective::detail {

namespace {

constexpr char kMagic[8] = {'H', 'V', 'D', 'L', 'O', 'C', '2', '\0'};

struct LocalHello {
  char magic[8];
  char host_id[64];  // hex sha256, or all zero: no shared memory with us
  char listener[56];  // abstract socket name, NUL padded (accepting side only)
  unsigned char token[16];
};
static_assert(sizeof(LocalHello) == 144);

template <std::size_t N>
void put(char (&dst)[N], const std::string& s) {
  HVD_ENFORCE(s.size() <= N, "local hello field too long ({} > {})", s.size(), N);
  std::memset(dst, 0, N);
  std::memcpy(dst, s.data(), s.size());
}

template <std::size_t N>
std::string get(const char (&src)[N]) {
  return std::string(src, strnlen(src, N));
}

}  // namespace

int local_ranks_hint(int fallback) {
  const auto v = env::get(job_env::kLocalSize);
  if (v) {
    if (auto n = env::parse_int(*v); n && *n >= 1 && *n <= (1 << 20)) return static_cast<int>(*n);
  }
  return std::max(fallback, 1);
}

LocalPairing::LocalPairing(const CommOptions& options, bool use_shm, int local_ranks)
    : rank_(options.rank), use_shm_(use_shm), local_ranks_(std::max(local_ranks, 2)) {
  if (!use_shm && options.rank == 0) {
    for (const char* var :
         {transport::kShmSpinEnv, transport::kShmBusyPollEnv, transport::kShmCmaEnv, transport::kShmInPlaceEnv}) {
      if (env::get(var)) {
        spdlog::info("{} is ignored: {}=tcp (no shared memory between ranks)", var, transport::kTransportEnv);
      }
    }
  }
  host_id_ = use_shm ? transport::shm_host_id() : std::string();
  if (use_shm && host_id_.empty()) {
    spdlog::debug("rank {}: cannot identify this host (boot id / network namespace unreadable): TCP to every peer",
                  rank_);
  }
  if (!host_id_.empty()) {
    listener_ = std::make_unique<transport::ShmListener>(options.secret, options.prefix, rank_, 64);
    spin_ = transport::shm_spin_from_env(local_ranks_);
    offload_ = transport::shm_offload_sends(local_ranks_);
    capacity_ = transport::shm_ring_capacity(local_ranks_ - 1);
    // Rings faulted in up front only while the local ranks have a CPU each:
    // then the first passes' latency matters and the CPU is there. On an
    // oversubscribed host set-up CPU is the bottleneck, and a short job
    // touches a few pages of each ring.
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    const int ncpu = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? std::max(1, CPU_COUNT(&cpus)) : 1;
    populate_ = local_ranks_ <= ncpu;
  }
}

LocalPairing::~LocalPairing() = default;

std::string LocalPairing::describe(bool detailed) const {
  if (!use_shm_) return fmt::format("TCP to every peer ({}=tcp)", transport::kTransportEnv);
  if (!listener_) return "TCP to every peer (this host cannot be identified)";
  if (!detailed) return fmt::format("shared memory to the peers of this host ({}), TCP to the others", describe(true));
  return fmt::format("rings of {} KiB per direction{}, spin {} us, send helper thread {}", capacity_ >> 10,
                     populate_ ? "" : " faulted in as used", spin_.count(), offload_ ? "on" : "off");
}

std::unique_ptr<transport::Link> LocalPairing::connect_side(std::unique_ptr<transport::TcpLink> tcp,
                                                            Deadline deadline) {
  return finish(std::move(tcp), false, deadline);
}

std::unique_ptr<transport::Link> LocalPairing::accept_side(std::unique_ptr<transport::TcpLink> tcp,
                                                           Deadline deadline) {
  return finish(std::move(tcp), true, deadline);
}

std::unique_ptr<transport::Link> LocalPairing::finish(std::unique_ptr<transport::TcpLink> tcp, bool accepting,
                                                      Deadline deadline) {
  const int p = tcp->peer();
  // 1. Hello, both ways at once.
  LocalHello out{}, in{};
  std::memcpy(out.magic, kMagic, sizeof kMagic);
  transport::ShmToken token{};
  if (listener_) {
    put(out.host_id, host_id_);
    if (accepting) {
      put(out.listener, listener_->name());
      token = transport::random_token();
      std::memcpy(out.token, token.data(), sizeof out.token);
    }
  }
  transport::Transfer ts[2] = {transport::Transfer::send(*tcp, &out, sizeof out),
                               transport::Transfer::recv(*tcp, &in, sizeof in)};
  try {
    transport::progress(ts, 2, deadline);
  } catch (const TimeoutError& e) {
    throw TimeoutError(fmt::format("rank {}: rank {} sent no data-path hello in time ({})", rank_, p, e.what()));
  } catch (const IoError& e) {
    throw transport::LinkError(p, fmt::format("rank {}: data-path hello with rank {} failed: {}", rank_, p, e.what()));
  }
  if (std::memcmp(in.magic, kMagic, sizeof kMagic) != 0) {
    throw transport::LinkError(p, fmt::format("rank {}: rank {} sent a malformed data-path hello", rank_, p));
  }
  const bool local = listener_ && get(in.host_id) == host_id_ && (accepting || !get(in.listener).empty());
  if (!local) {
    ++tcp_links_;
    spdlog::debug("rank {}: link to rank {}: TCP", rank_, p);
    return tcp;
  }
  // 2. Pairing.
  std::unique_ptr<transport::ShmLink> l;
  try {
    if (accepting) {
      std::map<int, transport::ShmToken> expected{{p, token}};
      l = listener_->accept(rank_, expected, deadline, spin_, populate_);
    } else {
      std::memcpy(token.data(), in.token, token.size());
      l = transport::shm_connect(get(in.listener), rank_, p, token, capacity_, deadline, spin_, populate_);
    }
  } catch (const TimeoutError& e) {
    throw TimeoutError(
        fmt::format("rank {}: shared-memory pairing with rank {} did not complete in time ({})", rank_, p, e.what()));
  } catch (const IoError& e) {
    throw transport::LinkError(p,
                               fmt::format("rank {}: shared-memory pairing with rank {} failed: {}", rank_, p, e.what()));
  }
  l->set_offload_sends(offload_);
  // Busy polling while the local ranks have a CPU each (this process's and
  // the peer's affinity masks together).
  const int cpus = transport::shm_local_cpus({l->peer_pid()});
  l->set_busy_poll(transport::shm_busy_poll_from_env(local_ranks_, cpus));
  ++shm_links_;
  spdlog::debug("rank {}: link to rank {}: shared memory", rank_, p);
  // 3. The TCP link closes as it goes out of scope.
  return l;
}

}  // namespace hvd::collective::detail
