#include "chunk_plan.h"

#include "hvd/common/error.h"

#include <numeric>

namespace hvd::collective::cuda::detail {

std::size_t element_size(DataType dtype) {
  switch (dtype) {
    case DataType::UInt8:
    case DataType::Int8:
    case DataType::Bool: return 1;
    case DataType::Int16:
    case DataType::Float16:
    case DataType::BFloat16: return 2;
    case DataType::Int32:
    case DataType::Float32: return 4;
    case DataType::Int64:
    case DataType::Float64: return 8;
  }
  throw InvalidArgument(fmt::format("unknown data type {}", static_cast<int>(dtype)));
}

std::vector<Chunk> plan_chunks(std::size_t bytes, std::size_t elem_size, std::size_t chunk_bytes, std::size_t align) {
  if (elem_size == 0 || align == 0) throw InvalidArgument("plan_chunks: element size and alignment must be positive");
  if (bytes % elem_size != 0) {
    throw InvalidArgument(
        fmt::format("plan_chunks: {} bytes is not a whole number of {}-byte elements", bytes, elem_size));
  }
  std::vector<Chunk> chunks;
  if (bytes == 0) return chunks;
  const std::size_t unit = std::lcm(elem_size, align);
  const std::size_t step = std::max(unit, chunk_bytes / unit * unit);
  chunks.reserve((bytes + step - 1) / step);
  for (std::size_t off = 0; off < bytes; off += step) chunks.push_back(Chunk{off, std::min(step, bytes - off)});
  return chunks;
}

std::vector<Step> plan_steps(uint64_t next_seq, const std::vector<Chunk>& chunks, int slots) {
  if (slots < 1) throw InvalidArgument(fmt::format("plan_steps: slots must be >= 1, got {}", slots));
  if (next_seq < 1) throw InvalidArgument("plan_steps: steps are numbered from 1");
  std::vector<Step> steps;
  steps.reserve(chunks.size());
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    Step s;
    s.seq = next_seq + i;
    s.slot = static_cast<int>((s.seq - 1) % static_cast<uint64_t>(slots));
    s.chunk = chunks[i];
    s.reuse_after = s.seq > static_cast<uint64_t>(slots) ? s.seq - slots : 0;
    steps.push_back(s);
  }
  return steps;
}

FusionLayout plan_fusion_layout(const std::vector<std::size_t>& bytes, std::size_t align) {
  if (align == 0) throw InvalidArgument("plan_fusion_layout: alignment must be positive");
  FusionLayout layout;
  layout.offsets.reserve(bytes.size());
  std::size_t at = 0;
  for (std::size_t b : bytes) {
    at = (at + align - 1) / align * align;
    layout.offsets.push_back(at);
    at += b;
  }
  layout.total = at;
  return layout;
}

}  // namespace hvd::collective::cuda::detail
