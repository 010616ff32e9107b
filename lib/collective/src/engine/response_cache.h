#pragma once
/// Horovod's response cache, adapted to all-gather negotiation.
///
/// After a tensor executes, every rank stores how *every* rank described it
/// (one Request per rank) under a small integer id. The next time a rank
/// submits exactly the same request for that name, it announces only the id
/// (a bit in a bitset) and peers read the full description from their own
/// copy of the cache. The cache changes only while processing the agreed
/// cycle results, in the same order on every rank, so ids agree everywhere
/// without ever being sent in full. Eviction is least-recently-executed.
#include "engine/message.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace hvd::collective::detail {

/// One named tensor as each rank described it (index = rank).
using TensorRequests = std::vector<Request>;

class ResponseCache {
 public:
  /// capacity 0 disables the cache (every lookup misses, put does nothing).
  explicit ResponseCache(std::size_t capacity) : capacity_(capacity) {}

  std::size_t capacity() const { return capacity_; }
  std::size_t size() const { return by_name_.size(); }

  /// Id of the entry for request.name if this rank described it exactly so.
  std::optional<uint32_t> lookup(const Request& request, int rank) const;

  /// The entry with `id`. Throws hvd::IoError when absent: a peer referred to
  /// an entry we do not hold, so negotiation state diverged.
  const TensorRequests& get(uint32_t id) const;

  /// Inserts or refreshes the entry for tensor[0].name and marks it most
  /// recently used; evicts the least recently used entry when full.
  void put(const TensorRequests& tensor);

  /// Drops the entry for `name` (e.g. after a mismatch) if present.
  void erase(const std::string& name);

 private:
  struct Slot {
    bool used = false;
    uint64_t last_used = 0;
    TensorRequests tensor;
  };
  std::size_t capacity_;
  uint64_t tick_ = 0;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, uint32_t> by_name_;
};

}  // namespace hvd::collective::detail
