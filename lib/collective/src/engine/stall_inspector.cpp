#include "engine/stall_inspector.h"

#include <fmt/format.h>

#include <unordered_set>

namespace hvd::collective::detail {

std::string join_ranks(const std::vector<int>& ranks) { return fmt::format("{}", fmt::join(ranks, ",")); }

StallInspector::Report StallInspector::check(const std::vector<PendingTensor>& pending, Clock::time_point now) {
  Report report;
  if (!options_.enabled) return report;
  std::unordered_set<std::string> alive;
  for (const PendingTensor& t : pending) {
    alive.insert(t.name);
    auto waited = now - t.first_seen;
    if (options_.fail_after.count() > 0 && waited >= options_.fail_after) {
      report.to_fail.push_back(t.name);
      continue;
    }
    if (waited < options_.warn_after) continue;
    auto it = last_warned_.find(t.name);
    if (it != last_warned_.end() && now - it->second < options_.warn_after) continue;
    last_warned_[t.name] = now;
    double seconds = std::chrono::duration<double>(waited).count();
    report.warnings.push_back(fmt::format(
        "stall: tensor '{}' submitted by rank{} {} has waited {:.1f} s for rank{} {} that never submitted it", t.name,
        t.present.size() == 1 ? "" : "s", join_ranks(t.present), seconds, t.missing.size() == 1 ? "" : "s",
        join_ranks(t.missing)));
  }
  // Forget tensors that are no longer pending.
  for (auto it = last_warned_.begin(); it != last_warned_.end();) {
    it = alive.count(it->first) ? std::next(it) : last_warned_.erase(it);
  }
  return report;
}

}  // namespace hvd::collective::detail
