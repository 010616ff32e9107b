#pragma once
// The cross-host leg of a device allreduce (private; plain C++): device ->
// pinned host staging -> network allreduce -> staging -> device, chunked so
// that the copies overlap the network. Two staging buffers alternate:
//
//   enqueue D2H(0 -> stage0)
//   for chunk k:  enqueue D2H(k+1 -> stage[(k+1)%2])   (copy engine, async)
//                 wait D2H(k);  host_reduce(stage[k%2]) (network, blocking)
//                 enqueue H2D(stage[k%2] -> k)          (copy engine, async)
//   finish: the caller's stream waits for the last H2D
//
// All copies go on one stream, in order, so D2H(k+1) into a staging buffer
// always runs after H2D(k-1) out of it. StagedDevice is the seam that
// tests/unit/cuda fakes; staged_allreducer.cpp implements it with CUDA.
#include "chunk_plan.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace hvd::collective::cuda::detail {

class StagedDevice {
 public:
  virtual ~StagedDevice() = default;
  /// Copies wait for the caller's earlier work on its stream.
  virtual void begin() = 0;
  /// Enqueues device chunk -> host staging buffer `slot` (0 or 1).
  virtual void d2h(const Chunk& chunk, int slot) = 0;
  /// Blocks the host until the last d2h into `slot` is complete.
  virtual void wait_d2h(int slot) = 0;
  /// Enqueues host staging buffer `slot` -> device chunk.
  virtual void h2d(const Chunk& chunk, int slot) = 0;
  /// Orders the caller's stream after every enqueued copy (no host wait).
  virtual void finish() = 0;
  virtual uint8_t* staging(int slot) = 0;
};

/// host_reduce(data, bytes) reduces `bytes` at `data` in place across hosts.
using HostReduce = std::function<void(uint8_t* data, std::size_t bytes)>;

void run_staged(const std::vector<Chunk>& chunks, StagedDevice& device, const HostReduce& host_reduce);

}  // namespace hvd::collective::cuda::detail
