#include "engine/fusion.h"

#include <algorithm>

namespace hvd::collective::detail {

std::size_t tensor_bytes(const Request& request) {
  return static_cast<std::size_t>(num_elements(request.shape)) * dtype_size(request.dtype);
}

std::size_t fusion_bytes(const Request& request) {
  const std::size_t b = tensor_bytes(request);
  if (request.device < 0) return b;
  return (b + kDeviceFusionAlign - 1) / kDeviceFusionAlign * kDeviceFusionAlign;
}

namespace {

bool fusable(const Response& r) { return r.ok() && r.type == OpType::Allreduce && r.tensors.size() == 1; }

/// Parameters are validated equal across ranks, so rank 0's decide; the
/// memory may differ per rank (each rank's device), so every rank's must
/// match: a fused buffer lives on one device (or the host) per rank.
bool compatible(const TensorRequests& a, const TensorRequests& b) {
  const Request& x = a[0];
  const Request& y = b[0];
  if (x.dtype != y.dtype || x.op != y.op || x.prescale != y.prescale || x.postscale != y.postscale) return false;
  for (std::size_t r = 0; r < a.size() && r < b.size(); ++r) {
    if (a[r].device != b[r].device) return false;
  }
  return a.size() == b.size();
}

}  // namespace

std::vector<Response> plan_fusion(std::vector<Response> ready, std::size_t threshold) {
  std::vector<Response> out;
  std::vector<bool> taken(ready.size(), false);
  for (std::size_t i = 0; i < ready.size(); ++i) {
    if (taken[i]) continue;
    taken[i] = true;
    Response group = std::move(ready[i]);
    if (fusable(group)) {
      std::size_t bytes = fusion_bytes(group.tensors[0][0]);
      for (std::size_t j = i + 1; j < ready.size() && bytes < threshold; ++j) {
        if (taken[j] || !fusable(ready[j])) continue;
        if (!compatible(group.tensors[0], ready[j].tensors[0])) continue;
        std::size_t b = fusion_bytes(ready[j].tensors[0][0]);
        if (bytes + b > threshold) continue;
        bytes += b;
        taken[j] = true;
        group.tensors.push_back(std::move(ready[j].tensors[0]));
      }
    }
    out.push_back(std::move(group));
  }
  return out;
}

uint8_t* FusionBuffer::get(std::size_t bytes) {
  if (bytes > size_) {
    std::size_t want = std::max(bytes, threshold_);
    data_.reset(new uint8_t[want]);
    size_ = want;
  }
  return data_.get();
}

}  // namespace hvd::collective::detail
