#pragma once
// Decisions the Context takes for operations on device buffers (private to
// the collective library; plain C++, tested without a GPU in
// tests/unit/cuda). Every input is identical on every rank, so every rank
// decides the same -- which is what keeps collective creation in step.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hvd::collective::cuda::detail {

/// The topology of the job (hvd::collective::Settings' six numbers).
struct JobShape {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
};

/// How a device allreduce runs.
enum class AllreducePath {
  /// Every rank is on this host: cuda::DeviceAllreducer (CUDA IPC between
  /// the local ranks; the data never leaves the GPUs).
  IntraHost,
  /// Ranks on several hosts (or more local ranks than one reduce launch
  /// takes): cuda::StagedAllreducer, i.e. device -> pinned host chunks ->
  /// the CPU ring allreduce of all ranks over the Comm -> device.
  Staged,
  /// Several hosts with the same number of ranks each
  /// (HVD_CUDA_ALLREDUCE_PATH=hierarchical): IntraHost among each host's
  /// ranks, then every local rank carries its slice across hosts (Staged
  /// among the ranks of its local rank), then IntraHost again to give every
  /// local rank every slice.
  Hierarchical,
};

const char* path_name(AllreducePath path);

/// IntraHost when the job is one host (cross_size == 1, local_size == size)
/// and local_size <= kMaxIntraHostRanks; otherwise Staged.
AllreducePath choose_allreduce_path(const JobShape& job);

/// Where one rank is: Settings' local_rank, local_size and cross_rank.
struct RankPlace {
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
};

/// The hierarchical path's group of `rank`: every rank with its local rank,
/// ordered by cross rank -- when the job spans several hosts that each
/// have the same number of ranks (<= kMaxIntraHostRanks) with local ranks
/// 0..local_size-1 and distinct cross ranks. Otherwise empty, with the
/// reason in `why` (may be null). places[r] is rank r's place.
std::vector<int> cross_group(const std::vector<RankPlace>& places, int rank, std::string* why);

/// Elements [first, second) of `count` that local rank `local_rank` of
/// `local_size` carries across hosts in the hierarchical path: contiguous
/// slices of ceil(count / local_size) elements rounded up to `align`
/// elements (so every slice starts 16-byte aligned), the last ones shorter
/// or empty. Equal on every rank of one local rank.
std::pair<std::size_t, std::size_t> hierarchical_slice(std::size_t count, int local_rank, int local_size,
                                                       std::size_t align);

/// The most local ranks the intra-host path reduces in one kernel launch
/// (cuda kernels' kMaxReduceInputs).
inline constexpr int kMaxIntraHostRanks = 16;

/// Store prefix of the `index`-th intra-host allreducer a Context creates:
/// "<comm_prefix>cuda/host_<cross_rank>/<index>/" -- unique per
/// communicator generation (elastic worlds get new comm prefixes), host and
/// creation.
std::string intra_host_prefix(const std::string& comm_prefix, int cross_rank, uint64_t index);

/// Checks an agreed device response before any CUDA call: one device per
/// rank, each >= 0. `devices[r]` is rank r's device. Throws
/// hvd::InvalidArgument (a desynchronised or malformed response) otherwise.
void check_devices(const std::vector<int32_t>& devices, const JobShape& job);

}  // namespace hvd::collective::cuda::detail
