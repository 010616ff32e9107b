#pragma once
/// What ranks tell each other every negotiation cycle (Horovod's Request /
/// RequestList, reshaped for an all-gather instead of a coordinator).
///
/// A rank announces each tensor it submits exactly once: either as a full
/// Request, or -- when the response cache already holds an identical entry --
/// as one bit of a bitset (the cache fast path). Every rank receives every
/// other rank's message, so every rank builds the same message table and
/// reaches the same decisions without a coordinator round trip.
#include "hvd/collective/types.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hvd::collective::detail {

/// Values travel on the wire: never renumber.
enum class OpType : uint8_t {
  Allreduce = 0,
  Allgather = 1,
  Broadcast = 2,
  Alltoall = 3,
  Reducescatter = 4,
  Barrier = 5,
  /// Horovod's join: this rank has no more data. Until every rank joined,
  /// allreduces the others submit run with zeros from the joined ranks.
  Join = 6,
};

/// The name every rank's join request carries.
inline constexpr const char* kJoinName = "__hvd_join__";

const char* op_type_name(OpType type);

/// One rank's description of one named tensor operation.
struct Request {
  std::string name;
  OpType type = OpType::Allreduce;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  int32_t root = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<int64_t> shape;
  /// Alltoall only: rows (first-dimension slices) sent to each rank; empty
  /// means an even split.
  std::vector<int64_t> splits;
  /// CUDA device of this rank's buffers, or -1 (kHostDevice) for host
  /// memory. Set at submit from what the caller said (never probed in a
  /// CPU-only worker). Ranks may use different devices for one tensor; host
  /// and device buffers for one tensor are a mismatch.
  int32_t device = -1;
  /// Local only (never on the wire, not compared): the controller made this
  /// request up for a rank that has joined; that rank contributes zeros.
  bool joined = false;

  bool operator==(const Request& o) const;
  bool operator!=(const Request& o) const { return !(*this == o); }
};

/// Elements in a shape (1 for a scalar shape {}).
int64_t num_elements(const std::vector<int64_t>& shape);
/// "float32[4,5]"
std::string describe_tensor(DataType dtype, const std::vector<int64_t>& shape);

/// One rank's contribution to one negotiation cycle.
struct RankMessage {
  /// This rank is shutting down; every rank leaves the loop after this cycle.
  bool shutdown = false;
  /// Tensors newly submitted on this rank, described in full.
  std::vector<Request> requests;
  /// Tensors newly submitted on this rank that match response-cache entries:
  /// the ids of those entries (sent as a bitset).
  std::vector<uint32_t> cache_hits;
  /// Rank 0 only: names whose stall exceeded the shutdown limit; every rank
  /// fails them in this cycle (rank 0's clock decides, so all agree).
  std::vector<std::string> stalled;
};

/// Compact little-endian encoding. decode() throws hvd::IoError on bytes that
/// do not parse (a peer speaking another protocol, a torn stream).
std::vector<uint8_t> encode(const RankMessage& message);
RankMessage decode(const uint8_t* data, std::size_t size);

}  // namespace hvd::collective::detail
