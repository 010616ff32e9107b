// choose_local_links (local_links.h): shared-memory links to the peers of
// this host.
//
// 1. Hello: every rank sends every peer, over the authenticated TCP link,
//    its host identity (shm_host_id(): same kernel boot, network namespace
//    and uid; empty when shared memory is off for it), the abstract name of
//    its pairing socket and a fresh token for that peer. Two ranks are
//    local to each other when both sent the same non-empty identity, so
//    both sides of every pair reach the same verdict.
// 2. Pairing: the higher rank of each local pair connects to the lower
//    one's socket with the token the lower one gave it (first to every
//    lower local rank, then accepting every higher one: the same order as
//    the TCP mesh, so it cannot deadlock), passing the segment's memfd.
// 3. The TCP link to each paired peer is closed; the shared-memory link
//    takes its place. Remote peers keep TCP.
#include "local_links.h"

#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/job_env.h"
#include "hvd/transport/link.h"
#include "hvd/transport/shm.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>

namespace hvd::collective::detail {

namespace {

constexpr char kMagic[8] = {'H', 'V', 'D', 'L', 'O', 'C', '1', '\0'};

struct LocalHello {
  char magic[8];
  char host_id[64];  // hex sha256, or all zero: no shared memory with us
  char listener[56];  // abstract socket name, NUL padded
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

void choose_local_links(std::vector<std::unique_ptr<transport::Link>>& links, const CommOptions& options, bool use_shm,
                        Deadline deadline) {
  const int me = options.rank;
  const int n = options.size;
  if (n < 2) return;
  if (!use_shm && me == 0) {
    for (const char* var :
         {transport::kShmSpinEnv, transport::kShmBusyPollEnv, transport::kShmCmaEnv, transport::kShmInPlaceEnv}) {
      if (env::get(var)) {
        spdlog::info("{} is ignored: {}=tcp (no shared memory between ranks)", var, transport::kTransportEnv);
      }
    }
  }
  std::string host_id = use_shm ? transport::shm_host_id() : std::string();
  if (use_shm && host_id.empty()) {
    spdlog::debug("rank {}: cannot identify this host (boot id / network namespace unreadable): TCP to every peer", me);
  }
  std::optional<transport::ShmListener> listener;
  if (!host_id.empty()) listener.emplace(options.secret, options.prefix, me, n + 16);

  // 1. Hello, to and from every peer at once.
  std::vector<LocalHello> out(static_cast<std::size_t>(n)), in(static_cast<std::size_t>(n));
  std::vector<transport::ShmToken> issued(static_cast<std::size_t>(n));
  std::vector<transport::Transfer> ts;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    LocalHello& h = out[p];
    std::memset(&h, 0, sizeof h);
    std::memcpy(h.magic, kMagic, sizeof kMagic);
    if (listener) {
      put(h.host_id, host_id);
      put(h.listener, listener->name());
      issued[p] = transport::random_token();
      std::memcpy(h.token, issued[p].data(), sizeof h.token);
    }
    ts.push_back(transport::Transfer::send(*links[p], &out[p], sizeof(LocalHello)));
    ts.push_back(transport::Transfer::recv(*links[p], &in[p], sizeof(LocalHello)));
  }
  transport::progress(ts.data(), ts.size(), deadline);

  std::vector<int> local;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    if (std::memcmp(in[p].magic, kMagic, sizeof kMagic) != 0) {
      throw IoError(fmt::format("rank {}: rank {} sent a malformed local-link hello", me, p));
    }
    if (listener && get(in[p].host_id) == host_id) local.push_back(p);
  }
  const bool verbose = env::get_bool_or(job_env::kVerbose, false);
  if (local.empty()) {
    const std::string line = fmt::format(
        "rank {}: data path: TCP to every peer ({})", me,
        !use_shm ? fmt::format("{}=tcp", transport::kTransportEnv) : std::string("no other rank on this host"));
    // HVD_TRANSPORT=tcp: rank 0 says so once for the job with --verbose.
    if (!use_shm && me == 0 && verbose) {
      spdlog::info("{}", line);
    } else {
      spdlog::debug("{}", line);
    }
    return;
  }

  // 2. Pairing.
  const int local_ranks = static_cast<int>(local.size()) + 1;
  const std::chrono::microseconds spin = transport::shm_spin_from_env(local_ranks);
  const bool offload = transport::shm_offload_sends(local_ranks);
  const std::size_t capacity = transport::shm_ring_capacity(static_cast<int>(local.size()));
  std::vector<std::unique_ptr<transport::ShmLink>> shm(static_cast<std::size_t>(n));
  std::map<int, transport::ShmToken> expected;
  for (int p : local) {
    if (p > me) {
      expected[p] = issued[p];
      continue;
    }
    transport::ShmToken token;
    std::memcpy(token.data(), in[p].token, token.size());
    std::unique_ptr<transport::ShmLink> l =
        transport::shm_connect(get(in[p].listener), me, p, token, capacity, deadline, spin);
    l->set_offload_sends(offload);
    shm[p] = std::move(l);
  }
  while (!expected.empty()) {
    std::unique_ptr<transport::ShmLink> l = listener->accept(me, expected, deadline, spin);
    const int p = l->peer();
    l->set_offload_sends(offload);
    shm[p] = std::move(l);
  }

  // Busy polling while the local ranks have a CPU each (their affinity
  // masks together: ranks pinned one per core see one CPU each).
  std::vector<pid_t> peer_pids;
  for (int p : local) peer_pids.push_back(shm[p]->peer_pid());
  const int local_cpus = transport::shm_local_cpus(peer_pids);
  const std::chrono::nanoseconds busy_poll = transport::shm_busy_poll_from_env(local_ranks, local_cpus);
  for (int p : local) shm[p]->set_busy_poll(busy_poll);

  // 3. Swap.
  for (int p : local) links[p] = std::move(shm[p]);

  std::vector<int> group = local;
  group.push_back(me);
  std::sort(group.begin(), group.end());
  const std::string line = fmt::format(
      "rank {}: data path: shared memory between the ranks [{}] of this host (rings of {} KiB per "
      "direction, spin {} us, busy poll {} ns between yields, send helper thread {}); TCP to the {} other rank(s)",
      me, fmt::join(group, ","), capacity >> 10, spin.count(), busy_poll.count(), offload ? "on" : "off",
      n - local_ranks);
  if (group.front() == me && verbose) {
    spdlog::info("{}", line);
  } else {
    spdlog::debug("{}", line);
  }
}

}  // namespace hvd::collective::detail
