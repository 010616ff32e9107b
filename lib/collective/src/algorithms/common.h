#pragma once
// Helpers shared by the algorithm files (private to the library).
#include "hvd/collective/comm.h"
#include "hvd/common/error.h"
#include "hvd/transport/link.h"

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace hvd::collective::detail {

/// Messages up to this many bytes per rank take the latency-optimised
/// (single round, everyone-to-everyone) paths when the world is small.
inline constexpr std::size_t kSmallBytes = 64 * 1024;
inline constexpr int kSmallMaxRanks = 8;
/// Received data is reduced in segments of this size while more arrives,
/// so reduction overlaps the transfer and stays in cache.
inline constexpr std::size_t kSegmentBytes = 256 * 1024;

inline int mod(int a, int n) { return ((a % n) + n) % n; }

/// The IoError a failed collective throws: the communicator's first failure
/// (Comm::report_failure), then what this rank saw when that differs.
inline IoError first_failure_error(Comm& comm, const std::string& mine, const std::string& seen) {
  const std::string first = comm.report_failure(mine);
  return IoError(first == mine ? first : fmt::format("{}; here: {}", first, seen));
}

/// Runs one collective's communication. A transport failure aborts the Comm
/// (shutting every link, so peers blocked on *us* fail too: that is the
/// cascade that bounds failure detection) and then surfaces as IoError.
/// Before the abort, the failure is recorded as the communicator's first
/// (Comm::report_failure) unless a rank recorded one already: a rank whose
/// link to a live peer closed because that peer aborted after losing rank
/// K then names rank K, as every survivor does ("rank K failed (seen first
/// by rank J: ...); here: ...").
template <class F>
void guarded(Comm& comm, const char* op, F&& body) {
  if (comm.aborted()) {
    throw IoError(fmt::format("rank {}: {} on an aborted communicator ({})", comm.rank(), op, comm.abort_reason()));
  }
  try {
    body();
  } catch (const transport::LinkError& e) {
    const std::string seen = fmt::format("rank {}: {} failed: {}", comm.rank(), op, e.what());
    IoError error = first_failure_error(comm, fmt::format("rank {} failed (seen first by {})", e.peer(), seen), seen);
    comm.abort(fmt::format("{} failed: {}", op, e.what()));
    throw error;
  } catch (const IoError& e) {
    const std::string seen = fmt::format("rank {}: {} failed: {}", comm.rank(), op, e.what());
    IoError error = first_failure_error(comm, seen, seen);
    comm.abort(fmt::format("{} failed: {}", op, e.what()));
    throw error;
  } catch (const TimeoutError& e) {
    comm.report_failure(fmt::format("rank {} timed out ({}: {})", comm.rank(), op, e.what()));
    comm.abort(fmt::format("{} timed out: {}", op, e.what()));
    throw;
  }
}

/// Byte offsets of back-to-back blocks.
inline std::vector<std::size_t> offsets_of(const std::vector<std::size_t>& bytes) {
  std::vector<std::size_t> off(bytes.size() + 1, 0);
  for (std::size_t i = 0; i < bytes.size(); ++i) off[i + 1] = off[i] + bytes[i];
  return off;
}

inline void check_per_rank(const Comm& comm, const std::vector<std::size_t>& v, const char* op, const char* what) {
  if (v.size() != static_cast<std::size_t>(comm.size())) {
    throw InvalidArgument(
        fmt::format("{}: {} has {} entries, the communicator has {} ranks", op, what, v.size(), comm.size()));
  }
}

}  // namespace hvd::collective::detail
