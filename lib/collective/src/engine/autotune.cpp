// Autotune: the coordinate search and its CSV log (autotune.h).
#include "engine/autotune.h"

#include "hvd/collective/algorithms.h"
#include "hvd/collective/comm.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>

namespace hvd::collective::detail {

std::array<double, 5> TuneDecision::encode() const {
  return {params.fusion_mb, params.cycle_ms, params.hierarchical_allreduce ? 1.0 : 0.0,
          params.hierarchical_allgather ? 1.0 : 0.0, done ? 1.0 : 0.0};
}

TuneDecision TuneDecision::decode(const std::array<double, 5>& v) {
  TuneDecision d;
  d.params = {v[0], v[1], v[2] != 0, v[3] != 0};
  d.done = v[4] != 0;
  return d;
}

Autotuner::Autotuner(AutotuneOptions options, TuneParams initial)
    : options_(std::move(options)), current_(initial), best_(initial), warmup_left_(options_.warmup_samples) {
  if (options_.rank == 0 && !options_.log_path.empty()) {
    log_.open(options_.log_path, std::ios::out | std::ios::trunc);
    if (!log_) {
      spdlog::warn("hvd: autotune: cannot write HOROVOD_AUTOTUNE_LOG={}; tuning without a log", options_.log_path);
    } else {
      // Horovod's columns (torus_allreduce and cache_enabled are not tuned
      // here: always 0 and 1).
      log_ << "hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,"
              "tensor_fusion_threshold,score\n";
      log_.flush();
    }
  }
  if (options_.max_samples < 1) active_ = false;
}

bool Autotuner::record(const std::vector<std::string>& names, uint64_t bytes, Clock::time_point now) {
  if (!active_ || names.empty()) return false;
  if (!sample_start_) sample_start_ = now;
  bytes_ += bytes;
  bool ended = false;
  for (const std::string& n : names) {
    if (++counts_[n] >= options_.steps_per_sample) ended = true;
  }
  if (!ended) return false;
  const double us = std::max(1.0, std::chrono::duration<double, std::micro>(now - *sample_start_).count());
  last_score_ = static_cast<double>(bytes_) / us;
  counts_.clear();
  bytes_ = 0;
  sample_start_ = now;
  return true;
}

void Autotuner::log_line(const TuneParams& p, double score) {
  if (!log_.is_open() || !log_) return;
  log_ << (p.hierarchical_allreduce ? 1 : 0) << ',' << (p.hierarchical_allgather ? 1 : 0) << ",0,1," << p.cycle_ms
       << ',' << p.fusion_mb << ',' << score << '\n';
  log_.flush();
}

std::optional<TuneParams> Autotuner::next_candidate() {
  auto measured = [&](const TuneParams& p) {
    return std::any_of(history_.begin(), history_.end(), [&](const auto& h) { return h.first == p; });
  };
  while (true) {
    while (queue_.empty() && phase_ < 3) {
      const TuneParams base = best_;
      if (phase_ == 0) {
        for (double f : kFusionMb) {
          TuneParams p = base;
          p.fusion_mb = f;
          queue_.push_back(p);
        }
      } else if (phase_ == 1) {
        for (double c : kCycleMs) {
          TuneParams p = base;
          p.cycle_ms = c;
          queue_.push_back(p);
        }
      } else if (options_.tune_hierarchical) {
        for (bool on : {false, true}) {
          TuneParams p = base;
          p.hierarchical_allreduce = p.hierarchical_allgather = on;
          queue_.push_back(p);
        }
      }
      ++phase_;
    }
    if (queue_.empty()) return std::nullopt;
    TuneParams p = queue_.front();
    queue_.pop_front();
    if (!measured(p)) return p;
  }
}

TuneDecision Autotuner::decide(std::optional<double> score) {
  const double s = score.value_or(last_score_);
  TuneDecision d;
  d.params = current_;
  if (!active_) {
    d.params = best_;
    d.done = true;
    return d;
  }
  if (warmup_left_ > 0) {
    --warmup_left_;
    return d;
  }
  history_.emplace_back(current_, s);
  log_line(current_, s);
  if (s > best_score_) {
    best_score_ = s;
    best_ = current_;
  }
  const int samples = static_cast<int>(history_.size());
  const int reserve = options_.max_samples >= 2 * kConfirm + 2 ? kConfirm : 0;
  std::optional<TuneParams> next;
  if (!confirming_) {
    if (samples < options_.max_samples - reserve) next = next_candidate();
    if (!next && reserve > 0 && start_confirmation()) confirming_ = true;
  }
  if (confirming_ && !next && !confirm_queue_.empty() && samples < options_.max_samples) {
    next = confirm_queue_.front();
    confirm_queue_.pop_front();
  }
  if (next) {
    d.params = *next;
  } else {
    if (confirming_) choose_confirmed();
    d.params = best_;
    d.done = true;
    log_line(best_, best_score_);  // Horovod's last line: the best setting and its score
    spdlog::info(
        "hvd: autotune done after {} samples: fusion threshold {} MiB, cycle time {} ms, hierarchical {}; "
        "score {:.1f} bytes/us",
        history_.size(), best_.fusion_mb, best_.cycle_ms, best_.hierarchical_allreduce ? "on" : "off", best_score_);
  }
  return d;
}

bool Autotuner::start_confirmation() {
  // The kConfirm distinct settings with the best single samples.
  std::vector<std::pair<TuneParams, double>> best;
  for (const auto& [p, s] : history_) {
    auto it = std::find_if(best.begin(), best.end(), [&](const auto& b) { return b.first == p; });
    if (it == best.end()) {
      best.emplace_back(p, s);
    } else {
      it->second = std::max(it->second, s);
    }
  }
  std::stable_sort(best.begin(), best.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  if (best.size() > static_cast<std::size_t>(kConfirm)) best.resize(kConfirm);
  if (best.size() < 2) return false;
  for (const auto& b : best) {
    confirm_queue_.push_back(b.first);
    confirmed_.push_back(b.first);
  }
  return true;
}

void Autotuner::choose_confirmed() {
  double best_mean = -1;
  for (const TuneParams& p : confirmed_) {
    double sum = 0;
    int n = 0;
    for (const auto& [q, s] : history_) {
      if (q == p) sum += s, ++n;
    }
    if (n > 0 && sum / n > best_mean) {
      best_mean = sum / n;
      best_ = p;
    }
  }
  best_score_ = best_mean;
}

void Autotuner::apply(const TuneDecision& d) {
  current_ = d.params;
  if (d.done) {
    active_ = false;
    best_ = d.params;
  }
}

std::optional<TuneParams> Autotuner::after_cycle(const std::vector<Response>& responses, int rank, Comm* comm) {
  if (!active_) return std::nullopt;
  std::vector<std::string> names;
  uint64_t bytes = 0;
  for (const Response& r : responses) {
    if (!r.ok()) continue;
    for (const TensorRequests& t : r.tensors) {
      const Request& q = t[static_cast<std::size_t>(rank)];
      names.push_back(q.name);
      bytes += static_cast<uint64_t>(std::max<int64_t>(0, num_elements(q.shape))) * dtype_size(q.dtype);
    }
  }
  if (!record(names, bytes, Clock::now())) return std::nullopt;
  std::array<double, 5> wire{};
  if (rank == 0) wire = decide().encode();
  if (comm && comm->size() > 1) broadcast(*comm, wire.data(), sizeof wire, 0);
  const TuneParams before = current_;
  const TuneDecision d = TuneDecision::decode(wire);
  apply(d);
  if (d.done || !(before == current_)) return current_;
  return std::nullopt;
}

}  // namespace hvd::collective::detail
