#pragma once
/// Stall inspection (Horovod's StallInspector): a tensor that some ranks
/// submitted and others did not for `warn_after` is reported, naming the
/// missing ranks; past `fail_after` (0 = never) it is failed on every rank.
/// Runs on rank 0 only, whose clock therefore decides for the whole job.
#include "hvd/common/io.h"

#include <chrono>
#include <string>
#include <unordered_map>
#include <vector>

namespace hvd::collective::detail {

/// A tensor submitted by some but not all ranks.
struct PendingTensor {
  std::string name;
  std::vector<int> present;
  std::vector<int> missing;
  Clock::time_point first_seen;
};

struct StallOptions {
  bool enabled = true;
  std::chrono::milliseconds warn_after{60000};
  /// 0: never fail stalled tensors.
  std::chrono::milliseconds fail_after{0};
};

class StallInspector {
 public:
  explicit StallInspector(StallOptions options) : options_(options) {}

  struct Report {
    /// One line per stalled tensor, e.g. "tensor 'x' submitted by ranks 0,1
    /// has waited 61.0 s for ranks 2,3 (stall check)".
    std::vector<std::string> warnings;
    /// Tensors past fail_after.
    std::vector<std::string> to_fail;
  };

  /// Warns about a tensor at most once per warn_after.
  Report check(const std::vector<PendingTensor>& pending, Clock::time_point now);

 private:
  StallOptions options_;
  std::unordered_map<std::string, Clock::time_point> last_warned_;
};

/// "0,2,3"
std::string join_ranks(const std::vector<int>& ranks);

}  // namespace hvd::collective::detail
