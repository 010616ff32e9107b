#include "device_plan.h"

#include "hvd/common/error.h"

#include <fmt/format.h>

namespace hvd::collective::cuda::detail {

const char* path_name(AllreducePath path) {
  switch (path) {
    case AllreducePath::IntraHost: return "intra-host";
    case AllreducePath::Staged: return "staged";
  }
  return "unknown";
}

AllreducePath choose_allreduce_path(const JobShape& job) {
  const bool one_host = job.cross_size == 1 && job.local_size == job.size;
  if (one_host && job.local_size <= kMaxIntraHostRanks) return AllreducePath::IntraHost;
  return AllreducePath::Staged;
}

std::string intra_host_prefix(const std::string& comm_prefix, int cross_rank, uint64_t index) {
  return fmt::format("{}cuda/host_{}/{}/", comm_prefix, cross_rank, index);
}

void check_devices(const std::vector<int32_t>& devices, const JobShape& job) {
  if (static_cast<int>(devices.size()) != job.size) {
    throw InvalidArgument(fmt::format("device operation lists {} devices for a job of size {}", devices.size(),
                                      job.size));
  }
  for (std::size_t r = 0; r < devices.size(); ++r) {
    if (devices[r] < 0) {
      throw InvalidArgument(fmt::format("device operation: rank {} passed host buffers (device {})", r, devices[r]));
    }
  }
}

}  // namespace hvd::collective::cuda::detail
