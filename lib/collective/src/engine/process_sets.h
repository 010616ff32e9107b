#pragma once
/// The process-set table of one Context (docs/collective.md, "Process
/// sets"): which sets exist (the same table on every rank), and for the sets
/// this rank belongs to, the Context that runs their operations.
///
/// A set is a Context of its own over the set's ranks: its own mesh (formed
/// through the owner's store under "<comm_prefix>pset<N>/"), background
/// thread, negotiation, fusion buffer and response cache. Sets never share
/// links or a thread, so no ordering between sets is needed and an op that
/// waits on one set never holds up another. Adding and removing is
/// collective over the owner: every rank agrees on the call through one
/// allgather on the owner before anything changes, so the tables stay
/// identical everywhere.
#include "hvd/collective/context.h"
#include "hvd/store/store.h"

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hvd::collective::detail {

/// Horovod's topology within a set: local ranks count the members on this
/// member's host, cross ranks the members with its local rank.
/// `hosts[g]` is global rank g's host; `me` indexes `ranks`.
struct SetTopology {
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
};
SetTopology set_topology(const std::vector<int>& ranks, const std::vector<std::string>& hosts, int me);

class ProcessSetTable {
 public:
  /// `owner` is the Context of every rank; `store` its rendezvous store
  /// (null for a job of size 1).
  ProcessSetTable(Context& owner, std::shared_ptr<store::Store> store);
  ~ProcessSetTable();

  /// Settings::process_sets, at the owner's creation: ids 1..n in order.
  void register_static(const std::vector<std::vector<int>>& sets, bool skip_unfit);
  int32_t add(std::vector<int> ranks);
  void remove(int32_t id);

  std::vector<int32_t> ids() const;
  std::vector<int> ranks(int32_t id) const;
  bool included(int32_t id) const;
  int rank(int32_t id) const;
  int size(int32_t id) const;

  /// The Context that runs `what` (e.g. "allreduce of tensor 'x'") on set
  /// `id` (not 0), or hvd::InvalidArgument: unknown id, or this rank is not
  /// a member.
  std::shared_ptr<Context> member(int32_t id, const std::string& what) const;
  /// Global rank -> index in set `id`, or -1 when not a member.
  int set_rank_of(int32_t id, int global_rank) const;

  /// Shuts down / aborts every set's Context (the owner's shutdown/abort).
  void shutdown_all();
  void abort_all(const std::string& reason);

 private:
  struct Entry {
    std::vector<int> ranks;  // ascending global ranks
    std::shared_ptr<Context> context;  // null when this rank is not a member
  };

  /// One allgather over the owner: every rank's description of the call
  /// (and its hostname, learnt once). Throws InvalidArgument on every rank
  /// unless all ranks described the same call.
  void agree(const std::string& call);
  /// Validates ranks against the owner's size and the registered sets
  /// (`allow_global`: equal to the global set's is no duplicate); sorted.
  std::vector<int> checked(std::vector<int> ranks, const char* what, bool allow_global) const;
  /// Registers `ranks` as `id`; members form the set's Context.
  void install(int32_t id, std::vector<int> ranks);
  const Entry& entry(int32_t id, const std::string& what) const;

  Context& owner_;
  std::shared_ptr<store::Store> store_;
  /// add/remove run one at a time (they are collective and ordered).
  std::mutex call_mu_;
  mutable std::mutex mu_;
  std::map<int32_t, Entry> sets_;
  std::deque<int32_t> free_ids_;
  int32_t next_id_ = 1;
  /// Calls so far: names the agreement allgather and the sets' store prefix.
  uint64_t calls_ = 0;
  /// Every rank's hostname (learnt at the first call): local/cross ranks
  /// within a set.
  std::vector<std::string> hosts_;
};

}  // namespace hvd::collective::detail
