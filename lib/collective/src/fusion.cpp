#include "fusion.h"

#include <algorithm>

namespace hvd::collective::detail {

std::size_t tensor_bytes(const Request& request) {
  return static_cast<std::size_t>(num_elements(request.shape)) * dtype_size(request.dtype);
}

namespace {

bool fusable(const Response& r) {
  return r.ok() && r.type == OpType::Allreduce && r.tensors.size() == 1;
}

bool compatible(const Request& a, const Request& b) {
  return a.dtype == b.dtype && a.op == b.op && a.prescale == b.prescale && a.postscale == b.postscale;
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
      std::size_t bytes = tensor_bytes(group.tensors[0][0]);
      for (std::size_t j = i + 1; j < ready.size() && bytes < threshold; ++j) {
        if (taken[j] || !fusable(ready[j])) continue;
        const Request& head = group.tensors[0][0];
        const Request& cand = ready[j].tensors[0][0];
        if (!compatible(head, cand)) continue;
        std::size_t b = tensor_bytes(cand);
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
