#include "pipeline.h"

namespace hvd::collective::cuda::detail {

void run_pipeline(ControlBlock& control, int me, const std::vector<Step>& steps, PipelineDevice& device,
                  const Deadline& deadline, uint64_t* issued) {
  const int n = control.ranks();
  if (steps.empty()) return;
  device.begin();
  for (const auto& step : steps) {
    // Before each device call of this step (idempotent).
    auto mark = [&] {
      if (issued && *issued < step.seq) *issued = step.seq;
    };
    if (step.reuse_after != 0) {  // a.
      for (int p = 0; p < n; ++p) {
        control.wait_at_least(p, Counter::Done, step.reuse_after, deadline);
        mark();
        device.copy_wait_done(p, step.slot);
      }
    }
    mark();
    device.copy_in(step.chunk, step.slot);  // b.
    control.publish(me, Counter::Ready, step.seq);
    for (int p = 0; p < n; ++p) {  // c.
      control.wait_at_least(p, Counter::Ready, step.seq, deadline);
      device.reduce_wait_ready(p, step.slot);
    }
    device.reduce_out(step.chunk, step.slot);  // d.
    control.publish(me, Counter::Done, step.seq);
  }
}

}  // namespace hvd::collective::cuda::detail
