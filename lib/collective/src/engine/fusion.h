#pragma once
/// Tensor fusion: ready allreduces with the same dtype, reduce op and scale
/// factors, on the same memory on every rank (host, or the same device as
/// the other tensors of that rank), are packed into one buffer (up to the
/// fusion threshold), reduced with one call and unpacked -- many small
/// reductions cost one latency.
#include "engine/controller.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace hvd::collective::detail {

/// Groups `ready` (in agreed order) into responses: the first not-yet-taken
/// allreduce opens a group that takes every later compatible allreduce that
/// still fits under `threshold` bytes; other responses pass through alone.
/// Pure and deterministic, so every rank forms the same groups.
std::vector<Response> plan_fusion(std::vector<Response> ready, std::size_t threshold);

/// Bytes of one rank's tensor in a response.
std::size_t tensor_bytes(const Request& request);

/// Alignment of tensors in a device fusion buffer (cuda::DeviceFusionBuffer
/// places each at a 16-byte boundary); fusion counts device tensors rounded
/// up to it so that a planned group always fits the device buffer.
inline constexpr std::size_t kDeviceFusionAlign = 16;
/// What one tensor takes of the fusion threshold: its bytes, rounded up to
/// kDeviceFusionAlign for device tensors.
std::size_t fusion_bytes(const Request& request);

/// The fusion buffer: allocated on first use at the threshold size and kept
/// for the life of the Context (fresh pages are expensive; never reallocate
/// per cycle). Left uninitialised so untouched pages cost nothing.
class FusionBuffer {
 public:
  explicit FusionBuffer(std::size_t threshold) : threshold_(threshold) {}
  /// A buffer of at least `bytes` (bytes <= threshold except for tests).
  uint8_t* get(std::size_t bytes);

 private:
  std::size_t threshold_;
  std::size_t size_ = 0;
  std::unique_ptr<uint8_t[]> data_;
};

}  // namespace hvd::collective::detail
