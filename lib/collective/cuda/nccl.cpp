// NCCL loaded at run time (nccl.h in this directory explains why).
#include "nccl.h"

#include "hvd/common/env.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <mutex>
#include <set>
#include <sstream>
#include <type_traits>

namespace hvd::collective::cuda::detail {

namespace {

// NCCL's C API as documented (nccl.h, stable since 2.x); only what we call.
// ncclResult_t is an enum (int-sized), ncclComm_t an opaque pointer,
// ncclUniqueId a struct of NCCL_UNIQUE_ID_BYTES (128) chars passed by value.
constexpr int kNcclSuccess = 0;
constexpr int kNcclInProgress = 7;  // non-blocking communicators only
constexpr std::size_t kUniqueIdBytes = 128;
struct UniqueId {
  char internal[kUniqueIdBytes];
};
using Comm = void*;

constexpr int kMinVersion = 21000;  // 2.10: bfloat16 and the ABI values below

}  // namespace

struct NcclLibrary::Api {
  void* handle = nullptr;
  int (*get_version)(int*) = nullptr;
  int (*get_unique_id)(UniqueId*) = nullptr;
  int (*comm_init_rank)(Comm*, int, UniqueId, int) = nullptr;
  int (*comm_destroy)(Comm) = nullptr;
  int (*comm_abort)(Comm) = nullptr;
  int (*comm_get_async_error)(Comm, int*) = nullptr;
  const char* (*get_error_string)(int) = nullptr;
  int (*all_reduce)(const void*, void*, std::size_t, int, int, Comm, CUstream_st*) = nullptr;
  int (*broadcast)(const void*, void*, std::size_t, int, int, Comm, CUstream_st*) = nullptr;

  std::string describe(int code) const {
    const char* s = get_error_string ? get_error_string(code) : nullptr;
    return fmt::format("{} ({})", s ? s : "unknown NCCL error", code);
  }
  void check(int code, const char* call) const {
    if (code != kNcclSuccess) throw NcclError(fmt::format("{} failed: {}", call, describe(code)), code);
  }
};

int nccl_dtype(DataType dtype) {
  // ncclInt8 0, ncclUint8 1, ncclInt32 2, ncclUint32 3, ncclInt64 4,
  // ncclUint64 5, ncclFloat16 6, ncclFloat32 7, ncclFloat64 8, ncclBfloat16 9
  switch (dtype) {
    case DataType::Int8: return 0;
    case DataType::UInt8: return 1;
    case DataType::Int32: return 2;
    case DataType::Int64: return 4;
    case DataType::Float16: return 6;
    case DataType::Float32: return 7;
    case DataType::Float64: return 8;
    case DataType::BFloat16: return 9;
  }
  throw InvalidArgument(fmt::format("NCCL: unsupported dtype {}", static_cast<int>(dtype)));
}

int nccl_op(ReduceOp op) {
  // ncclSum 0, ncclProd 1, ncclMax 2, ncclMin 3
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average: return 0;
    case ReduceOp::Product: return 1;
    case ReduceOp::Max: return 2;
    case ReduceOp::Min: return 3;
  }
  throw InvalidArgument(fmt::format("NCCL: unsupported reduce op {}", static_cast<int>(op)));
}

NcclLibrary::NcclLibrary() : api_(std::make_unique<Api>()) {}

NcclLibrary::~NcclLibrary() = default;  // the handle stays open (RTLD_NODELETE)

std::string NcclLibrary::version() const {
  if (!available()) return "";
  return fmt::format("{}.{}.{}", version_ / 10000, (version_ / 100) % 100, version_ % 100);
}

void NcclLibrary::open(const std::string& path) {
  path_ = path;
  dlerror();
  api_->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
  if (!api_->handle) {
    const char* e = dlerror();
    unavailable_ = e ? e : fmt::format("{}: cannot be loaded", path);
    return;
  }
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(api_->handle, name));
    if (!fn && unavailable_.empty()) unavailable_ = fmt::format("{}: {} missing", path, name);
  };
  sym(api_->get_version, "ncclGetVersion");
  sym(api_->get_unique_id, "ncclGetUniqueId");
  sym(api_->comm_init_rank, "ncclCommInitRank");
  sym(api_->comm_destroy, "ncclCommDestroy");
  sym(api_->comm_abort, "ncclCommAbort");
  sym(api_->comm_get_async_error, "ncclCommGetAsyncError");
  sym(api_->get_error_string, "ncclGetErrorString");
  sym(api_->all_reduce, "ncclAllReduce");
  sym(api_->broadcast, "ncclBroadcast");
  if (!unavailable_.empty()) return;
  int v = 0;
  if (api_->get_version(&v) != kNcclSuccess) {
    unavailable_ = fmt::format("{}: ncclGetVersion failed", path);
    return;
  }
  if (v < kMinVersion) {
    unavailable_ = fmt::format("{}: NCCL {}.{}.{} is older than 2.10", path, v / 10000, (v / 100) % 100, v % 100);
    return;
  }
  version_ = v;
}

std::unique_ptr<NcclLibrary> NcclLibrary::load(const std::string& path) {
  std::unique_ptr<NcclLibrary> lib(new NcclLibrary());
  lib->open(path);
  return lib;
}

const NcclLibrary& NcclLibrary::get() {
  static std::once_flag once;
  static std::unique_ptr<NcclLibrary> lib;
  std::call_once(once, [] {
    std::vector<std::string> candidates;
    if (auto p = env::get("HVD_NCCL_LIBRARY"); p && !p->empty()) {
      candidates.push_back(*p);  // what the user asked for, and nothing else
    } else {
#ifdef HVD_NCCL_LIBRARY
      candidates.push_back(HVD_NCCL_LIBRARY);
#endif
      candidates.push_back("libnccl.so.2");
    }
    for (const auto& c : candidates) {
      lib = load(c);
      if (lib->available()) break;
    }
  });
  return *lib;
}

std::string NcclRankInfo::encode() const {
  // One line of text; the reason goes last (it may contain spaces).
  return fmt::format("v1 {} {} {} {} {}", gpu.empty() ? "-" : gpu, available ? 1 : 0, version,
                     static_cast<int>(setting), reason);
}

NcclRankInfo NcclRankInfo::decode(const std::string& text) {
  std::istringstream in(text);
  std::string tag;
  NcclRankInfo r;
  int avail = -1;
  int setting = -1;
  if (!(in >> tag >> r.gpu >> avail >> r.version >> setting) || tag != "v1" || (avail != 0 && avail != 1) ||
      setting < 0 || setting > static_cast<int>(DevicePathSetting::Staged)) {
    throw IoError(fmt::format("malformed NCCL rank record '{}'", text.substr(0, 200)));
  }
  if (r.gpu == "-") r.gpu.clear();
  r.available = avail == 1;
  r.setting = static_cast<DevicePathSetting>(setting);
  std::getline(in >> std::ws, r.reason);
  return r;
}

DevicePathSetting parse_device_path_setting(const std::string& value) {
  if (value == "auto" || value.empty()) return DevicePathSetting::Auto;
  if (value == "nccl") return DevicePathSetting::Nccl;
  if (value == "intra-host" || value == "ipc") return DevicePathSetting::IntraHost;
  if (value == "staged") return DevicePathSetting::Staged;
  throw InvalidArgument(
      fmt::format("HVD_CUDA_ALLREDUCE_PATH='{}': expected auto, nccl, intra-host or staged", value));
}

bool choose_nccl(const std::vector<NcclRankInfo>& ranks, std::string* why) {
  std::string reason;
  const DevicePathSetting setting = ranks.empty() ? DevicePathSetting::Auto : ranks[0].setting;
  for (std::size_t r = 1; r < ranks.size() && reason.empty(); ++r) {
    if (ranks[r].setting != setting) {
      reason = fmt::format("ranks 0 and {} set HVD_CUDA_ALLREDUCE_PATH differently (rank 0's applies)", r);
    }
  }
  if (!reason.empty()) {
  } else if (setting == DevicePathSetting::IntraHost || setting == DevicePathSetting::Staged) {
    reason = "HVD_CUDA_ALLREDUCE_PATH chooses another path";
  } else if (ranks.size() < 2) {
    reason = "a job of one rank";
  } else {
    std::set<std::string> gpus;
    for (std::size_t r = 0; r < ranks.size() && reason.empty(); ++r) {
      const NcclRankInfo& i = ranks[r];
      if (!i.available) {
        reason = fmt::format("rank {} cannot load NCCL ({})", r, i.reason.empty() ? "no reason given" : i.reason);
      } else if (i.version != ranks[0].version) {
        reason = fmt::format("ranks 0 and {} load different NCCL versions ({} vs {})", r, ranks[0].version,
                             i.version);
      } else if (i.gpu.empty()) {
        reason = fmt::format("rank {} did not identify its GPU", r);
      } else if (!gpus.insert(i.gpu).second) {
        reason = fmt::format("rank {} shares a GPU with another rank (NCCL needs one GPU per rank)", r);
      }
    }
  }
  if (reason.empty()) return true;
  if (setting == DevicePathSetting::Nccl) {
    throw InvalidArgument(fmt::format("HVD_CUDA_ALLREDUCE_PATH=nccl, but NCCL cannot be used: {}", reason));
  }
  if (why) *why = reason;
  return false;
}

std::vector<NcclRankInfo> exchange_nccl_info(store::Store& store, const std::string& prefix, int rank, int size,
                                             const NcclRankInfo& mine, std::chrono::milliseconds timeout) {
  store.set_string(fmt::format("{}rank_{}", prefix, rank), mine.encode());
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(fmt::format("{}rank_{}", prefix, r));
  store.wait(keys, timeout);
  std::vector<NcclRankInfo> all;
  for (const auto& k : keys) all.push_back(NcclRankInfo::decode(store.get_string(k, timeout)));
  return all;
}

NcclComm::NcclComm(const NcclLibrary& lib, store::Store& store, const std::string& prefix, int rank, int size,
                   std::chrono::milliseconds timeout)
    : lib_(lib) {
  HVD_ENFORCE(lib.available(), "NcclComm needs a loaded libnccl: {}", lib.unavailable());
  const auto& api = lib.api();
  UniqueId id{};
  const std::string key = prefix + "id";
  if (rank == 0) {
    api.check(api.get_unique_id(&id), "ncclGetUniqueId");
    store.set(key, store::Bytes(id.internal, id.internal + kUniqueIdBytes));
  } else {
    store::Bytes b = store.get(key, timeout);
    if (b.size() != kUniqueIdBytes) {
      throw IoError(fmt::format("NCCL unique id at '{}' has {} bytes, expected {}", key, b.size(), kUniqueIdBytes));
    }
    std::memcpy(id.internal, b.data(), kUniqueIdBytes);
  }
  Comm c = nullptr;
  api.check(api.comm_init_rank(&c, size, id, rank), "ncclCommInitRank");
  comm_ = c;
}

NcclComm::~NcclComm() {
  if (!comm_) return;
  const auto& api = lib_.api();
  if (aborted_) {
    api.comm_abort(comm_);
  } else {
    api.comm_destroy(comm_);
  }
}

void NcclComm::allreduce(const void* in, void* out, std::size_t count, DataType dtype, ReduceOp op,
                         CUstream_st* stream) {
  const auto& api = lib_.api();
  api.check(api.all_reduce(in, out, count, nccl_dtype(dtype), nccl_op(op), comm_, stream), "ncclAllReduce");
}

void NcclComm::broadcast(const void* in, void* out, std::size_t bytes, int root, CUstream_st* stream) {
  const auto& api = lib_.api();
  api.check(api.broadcast(in, out, bytes, nccl_dtype(DataType::UInt8), root, comm_, stream), "ncclBroadcast");
}

void NcclComm::check_async() const {
  const auto& api = lib_.api();
  int state = kNcclSuccess;
  api.check(api.comm_get_async_error(comm_, &state), "ncclCommGetAsyncError");
  if (state != kNcclSuccess && state != kNcclInProgress) {
    throw NcclError(fmt::format("NCCL communicator failed: {}", api.describe(state)), state);
  }
}

void NcclComm::abort() noexcept { aborted_ = true; }

}  // namespace hvd::collective::cuda::detail
