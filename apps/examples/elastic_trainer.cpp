// elastic_trainer: a deterministic "training" loop for elastic jobs.
//
//   hvdrun -np 2 --min-np 1 --max-np 3 --host-discovery-script ./discover.sh
//          build/apps/examples/elastic_trainer
//
// The model is 1024 floats; each step allreduces (Average) a gradient that
// depends only on the step number and the parameters, never on the rank or
// the world size, so every world computes the same update. The gradient is
// int64: Average of identical integers is exact at any size (a float
// average rounds differently at size 3 than at size 2), which makes the
// final checksum identical whatever failures and resizes happened -- the
// end-to-end tests compare it with an undisturbed run.
//
// Environment: HVD_TRAINER_STEPS (default 100), HVD_TRAINER_STEP_MS
// (default 50), and two knobs for tests that leave the result unchanged:
// HVD_TRAINER_BALLAST_KB (default 0) adds an allreduce of that many KiB per
// step whose values are not used, so that with HVD_TRAINER_STEP_MS=0 a
// worker spends nearly all its time inside a collective (a kill -9 lands
// mid-allreduce); HVD_TRAINER_END_MS (default 0) pauses after the final line
// before exiting, as a job saving its model would; HVD_TRAINER_COMMIT_EVERY
// (default 1) commits every that many steps (and after the last), as a loop
// that checkpoints every N batches does: a rollback then redoes up to N-1
// steps, and a host update is noticed at the next commit; HVD_TRAINER_SYNC_MS
// (default 0) pauses that long inside every State::sync of a world of two or
// more, between agreeing on the root and copying its state (announced on
// stderr: "elastic_trainer: w3 syncing in world 2 from rank 0"), so a test
// can fail a world while a newcomer has joined it but not yet synced.
// Output, one line per step
// (a step redone after a failure prints again):
//   step <k> size <n> rank <r> version <v> checksum <x>
// and at the end:
//   final checksum <x> steps <k>
// Exit status: 0 when done (or when hvdrun removed this worker), 1 on error.
#include "hvd/collective/elastic.h"
#include "hvd/collective/hvd.h"
#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/job_env.h"

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr std::size_t kParams = 1024;

/// FNV-1a over the parameters' bytes and the step counter.
uint64_t checksum(const std::vector<float>& params, int64_t step) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const void* p, std::size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (std::size_t i = 0; i < n; ++i) {
      h ^= b[i];
      h *= 1099511628211ull;
    }
  };
  mix(params.data(), params.size() * sizeof(float));
  mix(&step, sizeof step);
  return h;
}

/// The gradient of step `step`: a function of the step and the parameters only.
void gradient(const std::vector<float>& params, int64_t step, std::vector<int64_t>& grad) {
  for (std::size_t i = 0; i < params.size(); ++i) {
    const int64_t q = static_cast<int64_t>(std::llround(static_cast<double>(params[i]) * 4096.0));
    grad[i] = q / 8 + ((step * 31 + static_cast<int64_t>(i) * 7) % 13) - 6;
  }
}

/// BufferState whose sync pauses before copying the root's state
/// (HVD_TRAINER_SYNC_MS).
class PausingState : public hvd::elastic::BufferState {
 public:
  PausingState(int64_t pause_ms, std::string worker_id) : pause_ms_(pause_ms), worker_id_(std::move(worker_id)) {}

 protected:
  void sync_from(int root) override {
    if (pause_ms_ > 0) {
      std::fprintf(stderr, "elastic_trainer: %s syncing in world %" PRIu64 " from rank %d\n", worker_id_.c_str(),
                   hvd::elastic::world_version(), root);
      std::fflush(stderr);
      std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms_));
    }
    BufferState::sync_from(root);
  }

 private:
  int64_t pause_ms_;
  std::string worker_id_;
};

int64_t positive_env(const char* name, int64_t fallback) {
  const int64_t v = hvd::env::get_int_or(name, fallback);
  if (v < 0) throw hvd::InvalidArgument(std::string(name) + " must be >= 0");
  return v;
}

}  // namespace

int main() {
  try {
    const int64_t steps = positive_env("HVD_TRAINER_STEPS", 100);
    const int64_t step_ms = positive_env("HVD_TRAINER_STEP_MS", 50);
    const int64_t ballast_kb = positive_env("HVD_TRAINER_BALLAST_KB", 0);
    const int64_t end_ms = positive_env("HVD_TRAINER_END_MS", 0);
    const int64_t commit_every = positive_env("HVD_TRAINER_COMMIT_EVERY", 1);
    const int64_t sync_ms = positive_env("HVD_TRAINER_SYNC_MS", 0);
    if (commit_every < 1) throw hvd::InvalidArgument("HVD_TRAINER_COMMIT_EVERY must be >= 1");
    // Which worker process this is ("w3"), for logs: the line prefix is the rank.
    const std::string worker_id = hvd::env::get_or(hvd::job_env::kWorkerId, "-");
    hvd::init();

    std::vector<float> params(kParams);
    for (std::size_t i = 0; i < kParams; ++i) params[i] = static_cast<float>(i % 17) * 0.0625f - 0.5f;
    std::vector<int64_t> step{0};
    std::vector<int64_t> grad(kParams);
    std::vector<float> ballast(static_cast<std::size_t>(ballast_kb) * 1024 / sizeof(float));

    PausingState state(sync_ms, worker_id);
    state.add("params", params);
    state.add("step", step);

    hvd::elastic::run(state, [&](hvd::elastic::State& s) {
      while (step[0] < steps) {
        gradient(params, step[0], grad);
        // Identical on every rank, so the average is the same at any size.
        hvd::allreduce("elastic_trainer.grad", grad, hvd::collective::ReduceOp::Average);
        if (!ballast.empty()) hvd::allreduce("elastic_trainer.ballast", ballast, hvd::collective::ReduceOp::Sum);
        for (std::size_t i = 0; i < kParams; ++i) params[i] -= 0.001f * static_cast<float>(grad[i]);
        ++step[0];
        std::printf("step %" PRId64 " size %d rank %d version %" PRIu64 " checksum %016" PRIx64 " worker %s\n",
                    step[0], hvd::size(), hvd::rank(), hvd::elastic::world_version(), checksum(params, step[0]),
                    worker_id.c_str());
        std::fflush(stdout);
        if (step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));
        if (step[0] % commit_every == 0 || step[0] == steps) s.commit();
      }
    });
    std::printf("final checksum %016" PRIx64 " steps %" PRId64 "\n", checksum(params, step[0]), step[0]);
    std::fflush(stdout);
    if (end_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(end_ms));
    hvd::shutdown();
    return 0;
  } catch (const hvd::elastic::WorkerRemovedError& e) {
    std::fprintf(stderr, "elastic_trainer: %s; exiting\n", e.what());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_trainer: error: %s\n", e.what());
    return 1;
  }
}
