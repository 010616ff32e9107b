// The executor's choice of hierarchical collectives (hierarchy.h).
#include "engine/hierarchy.h"

#include "algorithms/hierarchical.h"

#include "hvd/collective/algorithms.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace hvd::collective::detail {

HierarchyPlan plan_hierarchy(const std::vector<int32_t>& topo, int size, int rank) {
  HierarchyPlan p;
  if (size <= 1 || topo.size() != static_cast<std::size_t>(3 * size)) {
    p.why_not = "a job of one rank";
    return p;
  }
  const int L = topo[2];
  if (L < 1 || size % L != 0) {
    p.why_not = fmt::format("local size {} does not divide the job size {}", L, size);
    return p;
  }
  for (int r = 0; r < size; ++r) {
    const int lr = topo[3 * r], cr = topo[3 * r + 1], ls = topo[3 * r + 2];
    if (ls != L) {
      p.why_not = fmt::format("hosts have different numbers of ranks ({} and {})", L, ls);
      return p;
    }
    if (lr != r % L || cr != r / L) {
      p.why_not = fmt::format("ranks are not host-major (rank {} is local rank {} of host {})", r, lr, cr);
      return p;
    }
  }
  p.hosts = size / L;
  if (p.hosts == 1) {
    p.why_not = "all ranks are on one host";
    return p;
  }
  p.usable = true;
  p.host = rank / L;
  const int lr = rank % L;
  for (int i = 0; i < L; ++i) p.local.push_back(p.host * L + i);
  for (int h = 0; h < p.hosts; ++h) {
    p.cross.push_back(h * L + lr);
    p.leaders.push_back(h * L);
  }
  return p;
}

Hierarchy::Hierarchy(bool allreduce, bool allgather, int local_rank, int cross_rank, int local_size)
    : allreduce_(allreduce),
      allgather_(allgather),
      local_rank_(local_rank),
      cross_rank_(cross_rank),
      local_size_(local_size) {}

const HierarchyPlan& Hierarchy::plan(Executors& ex) {
  if (plan_) return *plan_;
  Comm& comm = ex.comm;
  const int n = comm.size();
  std::vector<int32_t> topo(3 * static_cast<std::size_t>(n), 0);
  const int32_t mine[3] = {local_rank_, cross_rank_, local_size_};
  collective::allgatherv(comm, mine, sizeof mine, topo.data(), std::vector<std::size_t>(n, sizeof mine));
  plan_ = plan_hierarchy(topo, n, comm.rank());
  if (comm.rank() == 0) {
    const char* what = allreduce_ && allgather_ ? "allreduce and allgather" : allreduce_ ? "allreduce" : "allgather";
    if (plan_->usable) {
      spdlog::info("hvd: hierarchical {}: {} hosts of {} ranks", what, plan_->hosts, plan_->local.size());
    } else {
      spdlog::warn("hvd: hierarchical {} requested but the flat one runs: {}", what, plan_->why_not);
    }
  }
  return *plan_;
}

bool Hierarchy::allreduce(Executors& ex, void* data, std::size_t count, DataType dtype, ReduceOp op, double prescale,
                          double postscale) {
  if (!allreduce_ || ex.comm.size() <= 1) return false;
  const HierarchyPlan& p = plan(ex);
  if (!p.usable) return false;
  hierarchical_allreduce(ex.group(p.local), ex.group(p.cross), data, count, dtype, op, prescale, postscale);
  ++ops_;
  return true;
}

bool Hierarchy::allgatherv(Executors& ex, const void* send, std::size_t send_bytes, void* recv,
                           const std::vector<std::size_t>& recv_bytes) {
  if (!allgather_ || ex.comm.size() <= 1) return false;
  const HierarchyPlan& p = plan(ex);
  if (!p.usable) return false;
  Comm* leaders = ex.comm.rank() == p.local.front() ? &ex.group(p.leaders) : nullptr;
  hierarchical_allgatherv(ex.group(p.local), leaders, p.host, p.hosts, send, send_bytes, recv, recv_bytes);
  ++ops_;
  return true;
}

}  // namespace hvd::collective::detail
