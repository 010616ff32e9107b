#pragma once
// The host side of one device-allreduce call (private; plain C++): walks the
// pipeline steps, publishing and waiting on the control block, and tells a
// PipelineDevice what to enqueue. device_allreducer.cpp implements the device
// with CUDA streams and IPC events; tests/unit/cuda drives the same loop with
// a simulated device (streams as threads, events with CUDA's "wait for the
// latest record at call time" semantics), so the protocol is tested without
// a GPU.
//
// Step k on rank `me` (slot s = (k-1) % slots):
//   a. slot reuse: for every rank p, wait for done(p) >= k - slots, then the
//      copy stream waits on p's done event of s (p stopped reading my slot);
//   b. copy the chunk into my slot s and record my ready event (copy
//      stream); publish ready = k;
//   c. for every rank p: wait for ready(p) >= k, the reduce stream waits on
//      p's ready event of s;
//   d. reduce every rank's slot s into the caller's chunk and record my done
//      event of s (reduce stream = the caller's stream); publish done = k.
// Counters are published once work is enqueued, so the host never waits for
// the device. A counter tells a waiter that the event record for that step
// has been issued, and nobody can record the same slot's event again before
// every rank passed the step (a and c), so the wait targets that record.
#include "chunk_plan.h"
#include "control_block.h"

#include <vector>

namespace hvd::collective::cuda::detail {

class PipelineDevice {
 public:
  virtual ~PipelineDevice() = default;
  /// Before the first step: the copy stream waits for the caller's stream
  /// (the caller's buffer is complete).
  virtual void begin() = 0;
  /// Copy stream waits on `rank`'s done event of `slot`.
  virtual void copy_wait_done(int rank, int slot) = 0;
  /// Copy stream: caller's chunk -> my slot, then record my ready event.
  virtual void copy_in(const Chunk& chunk, int slot) = 0;
  /// Reduce stream waits on `rank`'s ready event of `slot`.
  virtual void reduce_wait_ready(int rank, int slot) = 0;
  /// Reduce stream: every rank's slot -> caller's chunk, then record my
  /// done event of `slot`.
  virtual void reduce_out(const Chunk& chunk, int slot) = 0;
};

/// Runs `steps` for local rank `me` of control.ranks(). TimeoutError past
/// `deadline`, IoError if the block is aborted; anything the device throws
/// passes through (the caller aborts the block).
/// `issued` (optional) is raised to a step's seq before the first device
/// call of that step (begin() aside, which only orders after the caller's
/// stream): after a failure part-way through a call it tells the caller
/// whether work that may wait on a peer's events was enqueued -- then its
/// buffers must not be freed or unmapped (that could block on a dead peer).
void run_pipeline(ControlBlock& control, int me, const std::vector<Step>& steps, PipelineDevice& device,
                  const Deadline& deadline, uint64_t* issued = nullptr);

}  // namespace hvd::collective::cuda::detail
