#include "engine/response_cache.h"

#include "hvd/common/error.h"

#include <fmt/format.h>

namespace hvd::collective::detail {

std::optional<uint32_t> ResponseCache::lookup(const Request& request, int rank) const {
  auto it = by_name_.find(request.name);
  if (it == by_name_.end()) return std::nullopt;
  const Slot& slot = slots_[it->second];
  if (rank < 0 || static_cast<std::size_t>(rank) >= slot.tensor.size()) return std::nullopt;
  if (slot.tensor[rank] != request) return std::nullopt;
  return it->second;
}

const TensorRequests& ResponseCache::get(uint32_t id) const {
  if (id >= slots_.size() || !slots_[id].used) {
    throw IoError(
        fmt::format("negotiation state diverged: a peer referred to response-cache entry {} "
                    "which this rank does not hold",
                    id));
  }
  return slots_[id].tensor;
}

void ResponseCache::put(const TensorRequests& tensor) {
  if (capacity_ == 0 || tensor.empty()) return;
  const std::string& name = tensor[0].name;
  auto it = by_name_.find(name);
  if (it != by_name_.end()) {
    Slot& slot = slots_[it->second];
    slot.tensor = tensor;
    slot.last_used = ++tick_;
    return;
  }
  uint32_t id;
  if (slots_.size() < capacity_) {
    id = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    // Reuse a free slot, else evict the least recently used one.
    id = 0;
    bool found_free = false;
    for (uint32_t i = 0; i < slots_.size(); ++i) {
      if (!slots_[i].used) {
        id = i;
        found_free = true;
        break;
      }
      if (slots_[i].last_used < slots_[id].last_used) id = i;
    }
    if (!found_free) by_name_.erase(slots_[id].tensor[0].name);
  }
  Slot& slot = slots_[id];
  slot.used = true;
  slot.tensor = tensor;
  slot.last_used = ++tick_;
  by_name_[name] = id;
}

void ResponseCache::erase(const std::string& name) {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) return;
  Slot& slot = slots_[it->second];
  slot.used = false;
  slot.tensor.clear();
  by_name_.erase(it);
}

}  // namespace hvd::collective::detail
