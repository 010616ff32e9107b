#pragma once
/// Autotune (HOROVOD_AUTOTUNE, docs/collective.md "Autotune"): rank 0 tunes
/// the fusion threshold, the cycle time and (with more than one host) the
/// hierarchical allreduce/allgather switches online from measured
/// throughput, and every rank applies each new setting after the same
/// negotiation cycle.
///
/// Samples: a sample ends after the cycle in which some tensor has been
/// processed steps_per_sample times since the sample began (a "step" is
/// one occurrence of each tensor, as in Horovod). Every rank sees the same
/// agreed responses, so every rank ends a sample in the same cycle; rank 0's
/// score for it (bytes processed per microsecond of wall time, Horovod's
/// unit) decides the next setting, broadcast to every rank right then.
///
/// Search: instead of Horovod's Bayesian optimisation, a coordinate search
/// over log-spaced values: the starting setting, then every fusion
/// threshold of kFusionMb (at the starting cycle time), then every cycle
/// time of kCycleMs at the best threshold so far, then hierarchical on/off
/// at the best of those (only with several hosts); each setting measured
/// once, after warmup_samples samples of the starting setting that are not
/// scored. One sample is noisy (a busy neighbour, a page fault storm), so
/// when max_samples leaves room (>= 2 * kConfirm + 2) the search keeps
/// kConfirm samples back: once the candidates (or the rest of the budget)
/// run out, the kConfirm best-scoring settings are measured once more, and
/// tuning ends on the one whose samples have the best mean. Without that
/// room it ends on the best single sample.
#include "engine/controller.h"

#include <array>
#include <deque>
#include <fstream>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace hvd::collective {
class Comm;
}

namespace hvd::collective::detail {

struct TuneParams {
  double fusion_mb = 64;  // tensor fusion threshold, MiB
  double cycle_ms = 1;
  bool hierarchical_allreduce = false;
  bool hierarchical_allgather = false;
  bool operator==(const TuneParams& o) const {
    return fusion_mb == o.fusion_mb && cycle_ms == o.cycle_ms && hierarchical_allreduce == o.hierarchical_allreduce &&
           hierarchical_allgather == o.hierarchical_allgather;
  }
};

inline constexpr double kFusionMb[] = {0, 1, 2, 4, 8, 16, 32, 64};
inline constexpr double kCycleMs[] = {1, 2.5, 5, 10, 25, 50, 100};
/// Settings measured a second time before the search ends (see above).
inline constexpr int kConfirm = 3;

struct AutotuneOptions {
  int rank = 0;
  /// HOROVOD_AUTOTUNE_WARMUP_SAMPLES (Horovod's default 3).
  int warmup_samples = 3;
  /// HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE (default 10).
  int steps_per_sample = 10;
  /// HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES (default 20): scored samples.
  int max_samples = 20;
  /// Try hierarchical on/off (the job has more than one host).
  bool tune_hierarchical = false;
  /// HOROVOD_AUTOTUNE_LOG: rank 0 writes Horovod's CSV there (empty: none).
  std::string log_path;
};

/// What rank 0 decided at the end of a sample.
struct TuneDecision {
  TuneParams params;
  bool done = false;
  std::array<double, 5> encode() const;
  static TuneDecision decode(const std::array<double, 5>& v);
};

class Autotuner {
 public:
  Autotuner(AutotuneOptions options, TuneParams initial);
  bool active() const { return active_; }
  const TuneParams& current() const { return current_; }
  const TuneParams& best() const { return best_; }
  double best_score() const { return best_score_; }
  /// (params, score) of every scored sample, in order.
  const std::vector<std::pair<TuneParams, double>>& history() const { return history_; }

  /// Every rank, after each cycle: the names of the tensors the cycle's
  /// responses carried and this rank's bytes. True when a sample ended in
  /// this cycle: every rank then calls decide (rank 0) / apply.
  bool record(const std::vector<std::string>& names, uint64_t bytes, Clock::time_point now);
  /// Rank 0: scores the sample that just ended with `score` (bytes per
  /// microsecond; the measured one when omitted) and picks what runs next.
  TuneDecision decide(std::optional<double> score = std::nullopt);
  /// Every rank: adopts rank 0's decision.
  void apply(const TuneDecision& d);

  /// The whole end-of-cycle step for a Context: record, and at the end of
  /// a sample decide on rank 0, broadcast over `comm` (null: one rank) and
  /// apply. Returns the setting to use from now on when it changed or
  /// tuning finished.
  std::optional<TuneParams> after_cycle(const std::vector<Response>& responses, int rank, Comm* comm);

 private:
  std::optional<TuneParams> next_candidate();
  /// Queues the confirmation samples; false when there is nothing to confirm.
  bool start_confirmation();
  /// The confirmed setting with the best mean score (sets best_/best_score_).
  void choose_confirmed();
  void log_line(const TuneParams& p, double score);

  AutotuneOptions options_;
  TuneParams current_;
  TuneParams best_;
  double best_score_ = -1;
  bool active_ = true;
  int warmup_left_;
  int phase_ = 0;
  std::deque<TuneParams> queue_;
  bool confirming_ = false;
  std::deque<TuneParams> confirm_queue_;
  std::vector<TuneParams> confirmed_;
  std::vector<std::pair<TuneParams, double>> history_;
  std::unordered_map<std::string, int> counts_;
  uint64_t bytes_ = 0;
  std::optional<Clock::time_point> sample_start_;
  double last_score_ = 0;
  std::ofstream log_;
};

}  // namespace hvd::collective::detail
