#pragma once
/// Whether and how the executor runs host-buffer allreduces and allgathers
/// hierarchically (HOROVOD_HIERARCHICAL_ALLREDUCE / _ALLGATHER,
/// algorithms/hierarchical.h). One per Context, used by its background
/// thread only.
#include "engine/operations.h"

#include <optional>
#include <string>
#include <vector>

namespace hvd::collective::detail {

/// Where every rank of a communicator is, and the groups the hierarchical
/// collectives use. Usable only for a regular layout: every host has the
/// same number of ranks L, and ranks are host-major (rank = host * L +
/// local rank), as hvdrun assigns them with equal slots per host.
struct HierarchyPlan {
  bool usable = false;
  /// Why not usable (for the one log line).
  std::string why_not;
  int hosts = 1;
  int host = 0;
  std::vector<int> local;  // this host's ranks, by local rank
  std::vector<int> cross;  // the ranks of this local rank, by host
  std::vector<int> leaders;  // local rank 0 of every host, by host
};

/// The plan for `size` ranks whose (local rank, cross rank, local size) are
/// topo[3 * r ...], as seen from `rank`. Pure (unit-tested).
HierarchyPlan plan_hierarchy(const std::vector<int32_t>& topo, int size, int rank);

class Hierarchy {
 public:
  /// `local_rank`, `cross_rank`, `local_size`: this rank's topology in its
  /// communicator (Settings).
  Hierarchy(bool allreduce, bool allgather, int local_rank, int cross_rank, int local_size);

  /// Runs the operation hierarchically and returns true, or returns false
  /// (the caller runs the flat one): the setting is off, or the layout does
  /// not allow it. The first call exchanges every rank's topology over
  /// ex.comm (so every rank must have the same settings, as hvdrun exports
  /// them to all) and logs the decision once.
  bool allreduce(Executors& ex, void* data, std::size_t count, DataType dtype, ReduceOp op, double prescale,
                 double postscale);
  bool allgatherv(Executors& ex, const void* send, std::size_t send_bytes, void* recv,
                  const std::vector<std::size_t>& recv_bytes);
  /// Autotune: switches either on or off (every rank after the same cycle).
  void set_enabled(bool allreduce, bool allgather) {
    allreduce_ = allreduce;
    allgather_ = allgather;
  }
  /// Operations run hierarchically so far.
  uint64_t ops() const { return ops_; }

 private:
  const HierarchyPlan& plan(Executors& ex);
  bool allreduce_ = false;
  bool allgather_ = false;
  int local_rank_ = 0;
  int cross_rank_ = 0;
  int local_size_ = 1;
  std::optional<HierarchyPlan> plan_;
  uint64_t ops_ = 0;
};

}  // namespace hvd::collective::detail
