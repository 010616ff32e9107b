#pragma once
// What each local rank publishes through the Store so that its peers can map
// its device exchange buffer and wait on its IPC events (private; plain C++:
// CUDA IPC handles are 64 opaque bytes here, checked against
// sizeof(cudaIpcMemHandle_t) where CUDA is compiled in).
//
// Key scheme: <prefix>ipc/rank_<local_rank>. The prefix carries the
// communicator generation and host, so a re-formed job never maps a stale
// (freed) buffer. The store is the job's authenticated store; the record
// itself starts with a magic and version and every length is checked, so a
// stray or truncated value is an IoError, never a wild mapping.
#include "hvd/store/store.h"

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hvd::collective::cuda::detail {

inline constexpr std::size_t kIpcHandleBytes = 64;
using IpcHandle = std::array<uint8_t, kIpcHandleBytes>;

struct IpcRecord {
  int32_t local_rank = 0;
  int32_t device = 0;
  int32_t pid = 0;
  /// cudaDeviceProp::uuid: tells whether two ranks share a GPU.
  std::array<uint8_t, 16> device_uuid{};
  /// The exchange buffer: `slots` slots of `slot_bytes` each.
  IpcHandle buffer{};
  uint64_t slot_bytes = 0;
  int32_t slots = 0;
  /// One interprocess event per slot: "my copy into this slot is done".
  std::vector<IpcHandle> ready_events;
  /// One per slot: "I finished reading every rank's slot".
  std::vector<IpcHandle> done_events;
  /// POSIX shared-memory name of the control block (local rank 0's record).
  std::string control_name;
};

store::Bytes serialize(const IpcRecord& record);
/// Throws hvd::IoError naming `what` on a malformed value.
IpcRecord parse_ipc_record(const store::Bytes& bytes, const std::string& what);

std::string ipc_record_key(const std::string& prefix, int local_rank);

void publish_ipc_record(store::Store& store, const std::string& prefix, const IpcRecord& record);

/// Waits for every local rank's record (TimeoutError naming the missing
/// keys), parses them and checks each is for the rank its key names and has
/// the same slot layout as `mine`.
std::vector<IpcRecord> gather_ipc_records(store::Store& store, const std::string& prefix, const IpcRecord& mine,
                                          int local_size, std::chrono::milliseconds timeout);

}  // namespace hvd::collective::cuda::detail
