#include "device_plan.h"

#include "hvd/common/error.h"

#include <fmt/format.h>

#include <algorithm>

namespace hvd::collective::cuda::detail {

const char* path_name(AllreducePath path) {
  switch (path) {
    case AllreducePath::IntraHost: return "intra-host";
    case AllreducePath::Staged: return "staged";
    case AllreducePath::Hierarchical: return "hierarchical";
  }
  return "unknown";
}

AllreducePath choose_allreduce_path(const JobShape& job) {
  const bool one_host = job.cross_size == 1 && job.local_size == job.size;
  if (one_host && job.local_size <= kMaxIntraHostRanks) return AllreducePath::IntraHost;
  return AllreducePath::Staged;
}

std::vector<int> cross_group(const std::vector<RankPlace>& places, int rank, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return std::vector<int>{};
  };
  const int size = static_cast<int>(places.size());
  if (rank < 0 || rank >= size) return no(fmt::format("rank {} is not in a job of size {}", rank, size));
  const int local_size = places[0].local_size;
  if (local_size < 1 || local_size > kMaxIntraHostRanks) {
    return no(fmt::format("{} ranks per host (the intra-host path takes 1..{})", local_size, kMaxIntraHostRanks));
  }
  if (size % local_size != 0 || size / local_size < 2) {
    return no(fmt::format("{} ranks are not several hosts of {} ranks", size, local_size));
  }
  const int hosts = size / local_size;
  // by_local[l][c]: the rank with local rank l on the host of cross rank c.
  std::vector<std::vector<int>> by_local(local_size, std::vector<int>(hosts, -1));
  for (int r = 0; r < size; ++r) {
    const RankPlace& p = places[r];
    if (p.local_size != local_size) {
      return no(fmt::format("ranks 0 and {} have different local sizes ({} vs {})", r, local_size, p.local_size));
    }
    if (p.local_rank < 0 || p.local_rank >= local_size || p.cross_rank < 0 || p.cross_rank >= hosts ||
        by_local[p.local_rank][p.cross_rank] != -1) {
      return no(fmt::format("rank {} (local rank {}, cross rank {}) does not fit {} hosts of {} ranks", r, p.local_rank,
                            p.cross_rank, hosts, local_size));
    }
    by_local[p.local_rank][p.cross_rank] = r;
  }
  if (why) why->clear();
  return by_local[places[rank].local_rank];
}

std::pair<std::size_t, std::size_t> hierarchical_slice(std::size_t count, int local_rank, int local_size,
                                                       std::size_t align) {
  if (local_size < 1 || local_rank < 0 || local_rank >= local_size) return {0, 0};
  if (align == 0) align = 1;
  std::size_t per = (count + static_cast<std::size_t>(local_size) - 1) / static_cast<std::size_t>(local_size);
  per = (per + align - 1) / align * align;
  const std::size_t first = std::min(count, per * static_cast<std::size_t>(local_rank));
  return {first, std::min(count, first + per)};
}

std::string intra_host_prefix(const std::string& comm_prefix, int cross_rank, uint64_t index) {
  return fmt::format("{}cuda/host_{}/{}/", comm_prefix, cross_rank, index);
}

void check_devices(const std::vector<int32_t>& devices, const JobShape& job) {
  if (static_cast<int>(devices.size()) != job.size) {
    throw InvalidArgument(
        fmt::format("device operation lists {} devices for a job of size {}", devices.size(), job.size));
  }
  for (std::size_t r = 0; r < devices.size(); ++r) {
    if (devices[r] < 0) {
      throw InvalidArgument(fmt::format("device operation: rank {} passed host buffers (device {})", r, devices[r]));
    }
  }
}

}  // namespace hvd::collective::cuda::detail
