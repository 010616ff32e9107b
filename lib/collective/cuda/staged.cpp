#include "staged.h"

namespace hvd::collective::cuda::detail {

void run_staged(const std::vector<Chunk>& chunks, StagedDevice& device, const HostReduce& host_reduce) {
  if (chunks.empty()) return;
  device.begin();
  device.d2h(chunks[0], 0);
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    const int slot = static_cast<int>(k % 2);
    if (k + 1 < chunks.size()) device.d2h(chunks[k + 1], 1 - slot);
    device.wait_d2h(slot);
    host_reduce(device.staging(slot), chunks[k].bytes);
    device.h2d(chunks[k], slot);
  }
  device.finish();
}

}  // namespace hvd::collective::cuda::detail
