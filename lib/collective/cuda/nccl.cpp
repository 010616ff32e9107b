// NCCL loaded at run time (nccl.h in this directory explains why).
#include "nccl.h"

#include "hvd/common/env.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <limits>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
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

// ncclConfig_t for ncclCommInitRankConfig (NCCL >= 2.14), laid out as
// NCCL 2.17's header declares it (ncclConfig_v21700). NCCL reads `size` and
// `version` to learn which fields the caller's header had: since 2.17 it
// copies min(size, its own sizeof) bytes over its defaults and ignores the
// fields a lower `version` did not have; newer headers only append fields
// after netName (2.28 has 17), which keep NCCL's defaults. NCCL 2.14-2.16
// read `blocking` alone, at the same offset. NCCL_CONFIG_INITIALIZER leaves
// every field but the first three undefined (INT_MIN / NULL); we set only
// `blocking`.
struct Config {
  std::size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cga_cluster_size;
  int min_ctas;
  int max_ctas;
  const char* net_name;
};
static_assert(offsetof(Config, blocking) == 16 && offsetof(Config, net_name) == 32 && sizeof(Config) == 40,
              "ncclConfig_v21700 layout (LP64)");
constexpr unsigned int kConfigMagic = 0xcafebeef;
constexpr int kConfigUndefInt = std::numeric_limits<int>::min();  // NCCL_CONFIG_UNDEF_INT
constexpr int kConfigLayoutVersion = 21700;  // the header whose layout Config is

/// NCCL_CONFIG_INITIALIZER for Config. `version` is our layout's, or the
/// library's own when that is older (2.14-2.16 never see a newer header).
Config config_initializer(int library_version) {
  Config c{};
  c.size = sizeof(Config);
  c.magic = kConfigMagic;
  c.version = static_cast<unsigned int>(std::min(library_version, kConfigLayoutVersion));
  c.blocking = kConfigUndefInt;
  c.cga_cluster_size = kConfigUndefInt;
  c.min_ctas = kConfigUndefInt;
  c.max_ctas = kConfigUndefInt;
  c.net_name = nullptr;
  return c;
}

}  // namespace

struct NcclLibrary::Api {
  void* handle = nullptr;
  int (*get_version)(int*) = nullptr;
  int (*get_unique_id)(UniqueId*) = nullptr;
  int (*comm_init_rank)(Comm*, int, UniqueId, int) = nullptr;
  // Optional (NCCL >= 2.14): null means set-up through comm_init_rank.
  int (*comm_init_rank_config)(Comm*, int, UniqueId, int, Config*) = nullptr;
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
  /// NcclError unless `code` is ncclSuccess, or ncclInProgress where the
  /// caller polls the communicator's state afterwards (`may_be_in_progress`:
  /// calls on a non-blocking communicator).
  void check(int code, const char* call, bool may_be_in_progress = false) const {
    if (code == kNcclSuccess || (may_be_in_progress && code == kNcclInProgress)) return;
    throw NcclError(fmt::format("{} failed: {}", call, describe(code)), code);
  }
  /// Polls the state of `comm` (ncclCommGetAsyncError) while it is
  /// ncclInProgress: returns it once it is not, or ncclInProgress at
  /// `deadline`. A failing query returns its own code.
  int wait_state(Comm comm, std::chrono::steady_clock::time_point deadline) const {
    auto pause = std::chrono::microseconds(10);
    for (;;) {
      int state = kNcclInProgress;
      const int rc = comm_get_async_error(comm, &state);
      if (rc != kNcclSuccess) return rc;
      if (state != kNcclInProgress) return state;
      if (std::chrono::steady_clock::now() >= deadline) return kNcclInProgress;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(1000));
    }
  }
};

namespace {
/// NCCL's ncclDataType_t for `dtype`, or -1 when NCCL has none.
int nccl_dtype_or_none(DataType dtype) {
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
    case DataType::Bool: break;  // never reduced (check_request refuses it)
    case DataType::Int16: break;  // NCCL has no 16-bit integer type
  }
  return -1;
}
}  // namespace

int nccl_dtype(DataType dtype) {
  const int code = nccl_dtype_or_none(dtype);
  if (code < 0) throw InvalidArgument(fmt::format("NCCL: unsupported dtype {}", static_cast<int>(dtype)));
  return code;
}

bool nccl_reduces(DataType dtype) { return nccl_dtype_or_none(dtype) >= 0; }

int nccl_op(ReduceOp op) {
  // ncclSum 0, ncclProd 1, ncclMax 2, ncclMin 3
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Average: return 0;
    case ReduceOp::Product: return 1;
    case ReduceOp::Max: return 2;
    case ReduceOp::Min: return 3;
    case ReduceOp::Adasum: break;  // host tensors only (check_request refuses device ones)
  }
  throw InvalidArgument(fmt::format("NCCL: unsupported reduce op {}", static_cast<int>(op)));
}

NcclLibrary::NcclLibrary() : api_(std::make_unique<Api>()) {}

NcclLibrary::~NcclLibrary() = default;  // the handle stays open (RTLD_NODELETE)

std::string NcclLibrary::version() const {
  if (!available()) return "";
  return fmt::format("{}.{}.{}", version_ / 10000, (version_ / 100) % 100, version_ % 100);
}

bool NcclLibrary::bounded_setup() const { return available() && api_->comm_init_rank_config != nullptr; }

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
  api_->comm_init_rank_config =
      reinterpret_cast<decltype(api_->comm_init_rank_config)>(dlsym(api_->handle, "ncclCommInitRankConfig"));
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
  std::string reach = fmt::format("{}", fmt::join(reachable, ","));
  return fmt::format("v2 {} {} {} {} {} {} {} {} {}", gpu.empty() ? "-" : gpu, available ? 1 : 0, version,
                     static_cast<int>(setting), reach.empty() ? "-" : reach, place.local_rank, place.local_size,
                     place.cross_rank, reason);
}

NcclRankInfo NcclRankInfo::decode(const std::string& text) {
  std::istringstream in(text);
  std::string tag;
  std::string reach;
  NcclRankInfo r;
  int avail = -1;
  int setting = -1;
  if (!(in >> tag >> r.gpu >> avail >> r.version >> setting >> reach >> r.place.local_rank >> r.place.local_size >>
        r.place.cross_rank) ||
      tag != "v2" || (avail != 0 && avail != 1) || setting < 0 ||
      setting > static_cast<int>(DevicePathSetting::Hierarchical)) {
    throw IoError(fmt::format("malformed NCCL rank record '{}'", text.substr(0, 200)));
  }
  if (r.gpu == "-") r.gpu.clear();
  r.available = avail == 1;
  if (reach != "-") {
    std::istringstream parts(reach);
    for (std::string u; std::getline(parts, u, ',');) {
      if (!u.empty()) r.reachable.push_back(u);
    }
  }
  r.setting = static_cast<DevicePathSetting>(setting);
  std::getline(in >> std::ws, r.reason);
  return r;
}

DevicePathSetting parse_device_path_setting(const std::string& value) {
  if (value == "auto" || value.empty()) return DevicePathSetting::Auto;
  if (value == "nccl") return DevicePathSetting::Nccl;
  if (value == "intra-host" || value == "ipc") return DevicePathSetting::IntraHost;
  if (value == "staged") return DevicePathSetting::Staged;
  if (value == "hierarchical") return DevicePathSetting::Hierarchical;
  throw InvalidArgument(
      fmt::format("HVD_CUDA_ALLREDUCE_PATH='{}': expected auto, nccl, intra-host, staged or hierarchical", value));
}

bool all_peer_access(const std::vector<NcclRankInfo>& ranks, std::string* why) {
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    for (std::size_t q = 0; q < ranks.size(); ++q) {
      const NcclRankInfo& a = ranks[r];
      const NcclRankInfo& b = ranks[q];
      if (q == r || a.place.cross_rank != b.place.cross_rank || a.gpu == b.gpu) continue;
      if (std::find(a.reachable.begin(), a.reachable.end(), b.gpu) == a.reachable.end()) {
        if (why) {
          *why = fmt::format(
              "rank {}'s GPU cannot access rank {}'s GPU directly (no peer access, or each process sees only its "
              "own GPU through CUDA_VISIBLE_DEVICES)",
              r, q);
        }
        return false;
      }
    }
  }
  return true;
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
  } else if (setting == DevicePathSetting::IntraHost || setting == DevicePathSetting::Staged ||
             setting == DevicePathSetting::Hierarchical) {
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
        reason = fmt::format("ranks 0 and {} load different NCCL versions ({} vs {})", r, ranks[0].version, i.version);
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
    : lib_(lib), rank_(rank), timeout_(timeout) {
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
  if (!api.comm_init_rank_config) {
    static std::once_flag logged;
    std::call_once(logged, [&] {
      spdlog::debug(
          "NCCL {} has no ncclCommInitRankConfig (NCCL >= 2.14): NCCL communicator set-up is not bounded "
          "by a timeout, a peer that dies before joining hangs it",
          lib.version());
    });
    api.check(api.comm_init_rank(&c, size, id, rank), "ncclCommInitRank");
    comm_ = c;
    return;
  }
  // Non-blocking: the call returns at once (ncclInProgress) and NCCL forms
  // the communicator in the background; we poll its state until the
  // deadline. A communicator that failed or is still forming is aborted,
  // which NCCL allows at any time.
  Config config = config_initializer(lib.version_code());
  config.blocking = 0;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  api.check(api.comm_init_rank_config(&c, size, id, rank, &config), "ncclCommInitRankConfig",
            /*may_be_in_progress=*/true);
  HVD_ENFORCE(c != nullptr, "ncclCommInitRankConfig returned no communicator");
  const int state = api.wait_state(c, deadline);
  if (state == kNcclSuccess) {
    comm_ = c;
    return;
  }
  api.comm_abort(c);
  if (state == kNcclInProgress) {
    throw TimeoutError(
        fmt::format("rank {}: the NCCL communicator of {} ranks did not form within {} ms "
                    "(HOROVOD_START_TIMEOUT): a peer may have died before joining the NCCL "
                    "communicator; see the other ranks' logs",
                    rank, size, timeout.count()));
  }
  throw NcclError(fmt::format("ncclCommInitRankConfig failed: {}", api.describe(state)), state);
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

void NcclComm::settle(int code, const char* call) {
  const auto& api = lib_.api();
  int state = code;
  if (code == kNcclInProgress) state = api.wait_state(comm_, std::chrono::steady_clock::now() + timeout_);
  if (state == kNcclSuccess) return;
  aborted_ = true;  // NCCL's rule: a communicator in error is aborted, not destroyed
  if (state == kNcclInProgress) {
    throw TimeoutError(
        fmt::format("rank {}: NCCL did not enqueue {} within {} ms (HOROVOD_START_TIMEOUT): a peer "
                    "may have died while NCCL connected to it",
                    rank_, call, timeout_.count()));
  }
  api.check(state, call);
}

void NcclComm::allreduce(const void* in, void* out, std::size_t count, DataType dtype, ReduceOp op,
                         CUstream_st* stream) {
  const auto& api = lib_.api();
  settle(api.all_reduce(in, out, count, nccl_dtype(dtype), nccl_op(op), comm_, stream), "ncclAllReduce");
}

void NcclComm::broadcast(const void* in, void* out, std::size_t bytes, int root, CUstream_st* stream) {
  const auto& api = lib_.api();
  settle(api.broadcast(in, out, bytes, nccl_dtype(DataType::UInt8), root, comm_, stream), "ncclBroadcast");
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
