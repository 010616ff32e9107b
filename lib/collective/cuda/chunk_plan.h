#pragma once
// Chunk planning for the pipelined device allreduce (private to the CUDA
// component; plain C++ so tests/unit/cuda checks it without a GPU).
//
// A buffer of `bytes` is cut into chunks of at most `chunk_bytes`; every
// chunk but the last is a multiple of the alignment, so vector loads stay
// aligned in every chunk. Chunks run as pipeline *steps*: step `seq` (a
// counter that keeps growing across calls, identical on every rank because
// every rank plans the same sizes) uses exchange slot seq % slots, and may
// only overwrite that slot once every rank has released step seq - slots.
#include "hvd/collective/types.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hvd::collective::cuda::detail {

/// Bytes per element (the component links into hvd_collective, so it cannot
/// call the library's dtype_size). InvalidArgument for an unknown dtype.
std::size_t element_size(DataType dtype);

struct Chunk {
  std::size_t offset = 0;  ///< bytes from the start of the buffer
  std::size_t bytes = 0;
};

/// Chunks covering [0, bytes). `elem_size` divides bytes (else
/// InvalidArgument); chunk_bytes is rounded down to a multiple of
/// lcm(elem_size, align), but never below one such unit. bytes == 0 -> {}.
std::vector<Chunk> plan_chunks(std::size_t bytes, std::size_t elem_size, std::size_t chunk_bytes,
                               std::size_t align = 256);

struct Step {
  uint64_t seq = 0;  ///< global step number (1-based; 0 means "none yet")
  int slot = 0;  ///< exchange slot = (seq - 1) % slots
  Chunk chunk;
  /// The earlier step that used this slot and must be released by every
  /// rank before this step writes it; 0 when the slot is fresh.
  uint64_t reuse_after = 0;
};

/// Steps for `chunks`, numbered from `next_seq` (>= 1).
std::vector<Step> plan_steps(uint64_t next_seq, const std::vector<Chunk>& chunks, int slots);

/// Layout of a device fusion buffer: tensor i of bytes[i] goes at
/// offsets[i]; each offset is a multiple of `align` (so the batched copy and
/// the reduction keep 16-byte vector access), the padding between tensors is
/// reduced along with them and ignored. Every rank computes the same layout
/// from the same sizes. `total` is the end of the last tensor.
struct FusionLayout {
  std::vector<std::size_t> offsets;
  std::size_t total = 0;
};
FusionLayout plan_fusion_layout(const std::vector<std::size_t>& bytes, std::size_t align = 16);

}  // namespace hvd::collective::cuda::detail
