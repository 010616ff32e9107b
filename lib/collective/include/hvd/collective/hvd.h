#pragma once
/// The process-wide C++ API, shaped like Horovod's (hvd.init(), hvd.rank(),
/// hvd.allreduce(...)): a thin wrapper over one Context built from the
/// environment hvdrun sets. Programs run without hvdrun get a job of size 1.
/// Everything here throws NotInitializedError before init() / after
/// shutdown(); operation errors are as documented in context.h.
#include "hvd/collective/context.h"

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

namespace hvd {

/// Reads the environment, rendezvouses and starts the background thread.
/// No-op when already initialised. Throws hvd::InvalidArgument for bad
/// variables, hvd::TimeoutError / hvd::IoError when peers or the store
/// cannot be reached within HOROVOD_START_TIMEOUT.
void init();
/// init() that also registers static process sets (Horovod's
/// init(process_sets=[...]); Context::add_process_set): set i gets id i + 1.
/// In an elastic job every new world registers them again (docs/elastic.md).
/// Ignored, like init(), when already initialised.
void init(const std::vector<std::vector<int>>& process_sets);
/// Stops the background thread and closes the communicator; init() may be
/// called again afterwards (all ranks must do the same number of inits).
void shutdown();
bool is_initialized();

int rank();
int size();
int local_rank();
int local_size();
int cross_rank();
int cross_size();

/// Process sets of the process-wide Context (Context::add_process_set ...);
/// ops take the id in their Args' process_set.
int32_t add_process_set(const std::vector<int>& ranks);
void remove_process_set(int32_t id);

/// The timeline of the process-wide Context (Context::start_timeline):
/// written by rank 0, a no-op on the other ranks.
void start_timeline(const std::string& path, bool mark_cycles = false);
void stop_timeline();

/// The process-wide Context, for the full API (stats, abort, ...).
collective::Context& context();

collective::Handle allreduce_async(const collective::AllreduceArgs& args);
collective::Handle allgather_async(const collective::AllgatherArgs& args);
collective::Handle broadcast_async(const collective::BroadcastArgs& args);
collective::Handle alltoall_async(const collective::AlltoallArgs& args);
collective::Handle reducescatter_async(const collective::ReducescatterArgs& args);
collective::Handle barrier_async(const collective::BarrierArgs& args = {});

void allreduce(const collective::AllreduceArgs& args);
collective::Handle allgather(const collective::AllgatherArgs& args);
void broadcast(const collective::BroadcastArgs& args);
collective::Handle alltoall(const collective::AlltoallArgs& args);
collective::Handle reducescatter(const collective::ReducescatterArgs& args);
void barrier(const collective::BarrierArgs& args = {});
/// Horovod's join (collective::Context::join): returns the rank that joined last.
int join();
collective::Handle join_async();

/// The DataType of a C++ element type (uint8_t, int8_t, int32_t, int64_t,
/// float, double). Half types have no C++ type here; use DataType directly.
template <typename T>
constexpr collective::DataType dtype_of() {
  using collective::DataType;
  if constexpr (std::is_same_v<T, uint8_t>)
    return DataType::UInt8;
  else if constexpr (std::is_same_v<T, int8_t>)
    return DataType::Int8;
  else if constexpr (std::is_same_v<T, int32_t>)
    return DataType::Int32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DataType::Int64;
  else if constexpr (std::is_same_v<T, float>)
    return DataType::Float32;
  else if constexpr (std::is_same_v<T, double>)
    return DataType::Float64;
  else
    static_assert(!sizeof(T), "no hvd DataType for this element type");
}

/// In-place allreduce of a vector.
template <typename T>
void allreduce(const std::string& name, std::vector<T>& data, collective::ReduceOp op = collective::ReduceOp::Sum) {
  allreduce(collective::AllreduceArgs{
      name, data.data(), data.data(), dtype_of<T>(), {static_cast<int64_t>(data.size())}, op});
}

/// Concatenation of every rank's vector, in rank order.
template <typename T>
std::vector<T> allgather(const std::string& name, const std::vector<T>& data) {
  collective::Handle h =
      allgather(collective::AllgatherArgs{name, data.data(), dtype_of<T>(), {static_cast<int64_t>(data.size())}, {}});
  const T* out = static_cast<const T*>(h.output());
  return std::vector<T>(out, out + h.output_bytes() / sizeof(T));
}

/// In-place broadcast of a vector from `root`.
template <typename T>
void broadcast(const std::string& name, std::vector<T>& data, int root) {
  broadcast(collective::BroadcastArgs{
      name, data.data(), data.data(), dtype_of<T>(), {static_cast<int64_t>(data.size())}, root});
}

}  // namespace hvd
