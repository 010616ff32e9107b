// A stand-in for libnccl with the same C entry points, for testing the
// loader and the communicator set-up without a GPU (tests/unit/cuda/
// test_nccl.cpp). Ranks are threads of one process; "device" buffers are
// host memory; streams are ignored.
//
// Communicators made by ncclCommInitRankConfig with blocking = 0 behave like
// NCCL's non-blocking ones: set-up and every collective return ncclInProgress
// at once and finish on a thread of their own; ncclCommGetAsyncError reports
// ncclInProgress until then, and a call made before that is refused
// (ncclInvalidUsage). ncclCommAbort may come at any time. Otherwise every
// call completes before returning.
//
// Knobs (environment, read at each call):
//   FAKE_NCCL_VERSION      version code ncclGetVersion reports (default
//                          21803, or 21304 in the legacy build)
//   FAKE_NCCL_ASYNC_ERROR  code ncclCommGetAsyncError reports for a ready
//                          communicator (default 0)
//   FAKE_NCCL_INIT_ERROR   code a non-blocking set-up ends with once every
//                          rank joined (default 0)
// Built twice: fake_nccl, and fake_nccl_legacy (FAKE_NCCL_LEGACY) without
// ncclCommInitRankConfig, like NCCL before 2.14. A symbol cannot come and go
// with the environment in a library that is already loaded, hence the
// second build.
//
// For the tests, beside NCCL's API: fake_nccl_aborts() counts ncclCommAbort
// calls, fake_nccl_nonblocking_inits() non-blocking set-ups begun.
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#ifndef FAKE_NCCL_DEFAULT_VERSION
#define FAKE_NCCL_DEFAULT_VERSION 21803
#endif

namespace {

constexpr int kSuccess = 0;
constexpr int kInvalidArgument = 4;
constexpr int kInvalidUsage = 5;
constexpr int kRemoteError = 6;
constexpr int kInProgress = 7;
constexpr auto kPeerWait = std::chrono::seconds(10);

struct Id {
  char internal[128];
};

// NCCL 2.17's ncclConfig_t, the layout NCCL_CONFIG_INITIALIZER fills; 2.14's
// ended after `blocking` (24 bytes with padding).
struct Config {
  std::size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
};

struct Group {
  int size = 0;
  int joined = 0;
  // One collective at a time: each rank posts its buffers, the last one to
  // arrive computes every rank's output, then all leave.
  std::vector<const void*> inputs;
  std::vector<void*> outputs;
  int arrived = 0;
  uint64_t generation = 0;
  std::condition_variable cv;
};

struct FakeComm {
  Group* group;
  int rank;
  bool nonblocking = false;
  int state = kSuccess;  // what ncclCommGetAsyncError reports (before the knob)
  bool busy = false;  // a background thread of ours still uses it
  bool joining = false;  // counted in group->joined, set-up not finished
  bool aborted = false;  // ncclCommAbort while busy: the thread frees it
};

std::mutex mu;
std::map<std::string, Group*> groups;  // leaked on purpose: tests are short
uint64_t ids = 0;
int aborts = 0;
int nonblocking_inits = 0;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

// The group of `id` (created by its first rank), or null if `nranks`
// disagrees with it. `mu` held.
Group* group_for(const Id& id, int nranks) {
  Group*& g = groups[std::string(id.internal, sizeof(id.internal))];
  if (!g) {
    g = new Group();
    g->size = nranks;
    g->inputs.resize(nranks);
    g->outputs.resize(nranks);
  }
  return g->size == nranks ? g : nullptr;
}

// A background job on `c` ended with `result`. `mu` held.
void finish(FakeComm* c, int result) {
  c->busy = false;
  c->joining = false;
  if (c->aborted) {
    delete c;
    return;
  }
  c->state = result;
}

// Runs the background part of a non-blocking call: `job` (called with `mu`
// held) gives the final state of `c`.
void in_background(FakeComm* c, std::function<int(std::unique_lock<std::mutex>&)> job) {
  c->busy = true;
  c->state = kInProgress;
  std::thread([c, job = std::move(job)] {
    std::unique_lock<std::mutex> lock(mu);
    finish(c, job(lock));
  }).detach();
}

template <typename T>
void reduce(const std::vector<const void*>& in, void* out, std::size_t count, int op) {
  auto* o = static_cast<T*>(out);
  for (std::size_t i = 0; i < count; ++i) {
    T acc = static_cast<const T*>(in[0])[i];
    for (std::size_t r = 1; r < in.size(); ++r) {
      T x = static_cast<const T*>(in[r])[i];
      switch (op) {
        case 0: acc = acc + x; break;
        case 1: acc = acc * x; break;
        case 2: acc = x > acc ? x : acc; break;
        case 3: acc = x < acc ? x : acc; break;
      }
    }
    o[i] = acc;
  }
}

using Work = std::function<void(const std::vector<const void*>&, const std::vector<void*>&)>;

// Every rank calls with its buffers; `work(inputs, outputs)` runs once, by
// the last rank to arrive, while the others wait. `mu` held.
int rendezvous(std::unique_lock<std::mutex>& lock, FakeComm* c, const void* in, void* out, const Work& work) {
  Group& g = *c->group;
  const uint64_t gen = g.generation;
  g.inputs[c->rank] = in;
  g.outputs[c->rank] = out;
  if (++g.arrived == g.size) {
    work(g.inputs, g.outputs);
    g.arrived = 0;
    ++g.generation;
    g.cv.notify_all();
    return kSuccess;
  }
  g.cv.wait_for(lock, kPeerWait, [&] { return g.generation != gen || c->aborted; });
  if (g.generation != gen) return kSuccess;
  --g.arrived;
  return kRemoteError;
}

int collective(FakeComm* c, const void* in, void* out, Work work) {
  std::unique_lock<std::mutex> lock(mu);
  if (!c->nonblocking) return rendezvous(lock, c, in, out, work);
  if (c->busy) return kInvalidUsage;  // NCCL: the previous call has not finished
  in_background(c, [c, in, out, work = std::move(work)](std::unique_lock<std::mutex>& l) {
    return rendezvous(l, c, in, out, work);
  });
  return kInProgress;
}

}  // namespace

extern "C" {

int ncclGetVersion(int* version) {
  *version = env_int("FAKE_NCCL_VERSION", FAKE_NCCL_DEFAULT_VERSION);
  return kSuccess;
}

const char* ncclGetErrorString(int code) {
  switch (code) {
    case 0: return "no error";
    case 3: return "internal error (fake)";
    case 4: return "invalid argument (fake)";
    case 5: return "invalid usage (fake)";
    case 6: return "remote process exited or there was a network error (fake)";
    case 7: return "NCCL operation in progress (fake)";
    default: return "unhandled error (fake)";
  }
}

int ncclGetUniqueId(Id* id) {
  std::lock_guard<std::mutex> lock(mu);
  std::memset(id->internal, 0, sizeof(id->internal));
  std::string text = "fake-nccl-id-" + std::to_string(++ids);
  std::memcpy(id->internal, text.data(), text.size());
  return kSuccess;
}

int ncclCommInitRank(void** comm, int nranks, Id id, int rank) {
  if (nranks < 1 || rank < 0 || rank >= nranks) return kInvalidArgument;
  std::unique_lock<std::mutex> lock(mu);
  Group* g = group_for(id, nranks);
  if (!g) return kInvalidArgument;
  ++g->joined;
  g->cv.notify_all();
  // Like NCCL: init returns once every rank joined.
  if (!g->cv.wait_for(lock, kPeerWait, [&] { return g->joined >= g->size; })) return kRemoteError;
  *comm = new FakeComm{g, rank};
  return kSuccess;
}

#ifndef FAKE_NCCL_LEGACY
int ncclCommInitRankConfig(void** comm, int nranks, Id id, int rank, Config* config) {
  // What NCCL checks, and that every field but `blocking` is still
  // NCCL_CONFIG_INITIALIZER's "undefined".
  if (!config || config->magic != 0xcafebeef || config->version < 21400 || config->size < 24) {
    return kInvalidArgument;
  }
  if (config->size >= sizeof(Config) && (config->cgaClusterSize != INT_MIN || config->minCTAs != INT_MIN ||
                                         config->maxCTAs != INT_MIN || config->netName != nullptr)) {
    return kInvalidArgument;
  }
  if (config->blocking != 0) return ncclCommInitRank(comm, nranks, id, rank);
  if (nranks < 1 || rank < 0 || rank >= nranks) return kInvalidArgument;
  std::unique_lock<std::mutex> lock(mu);
  Group* g = group_for(id, nranks);
  if (!g) return kInvalidArgument;
  auto* c = new FakeComm{g, rank};
  c->nonblocking = true;
  c->joining = true;
  ++g->joined;
  ++nonblocking_inits;
  g->cv.notify_all();
  in_background(c, [c, g](std::unique_lock<std::mutex>& l) {
    const bool all = g->cv.wait_for(l, kPeerWait, [&] { return g->joined >= g->size || c->aborted; });
    if (c->aborted) return kRemoteError;
    return all ? env_int("FAKE_NCCL_INIT_ERROR", kSuccess) : kRemoteError;
  });
  *comm = c;
  return kInProgress;
}
#endif

int ncclCommDestroy(void* comm) {
  std::lock_guard<std::mutex> lock(mu);
  auto* c = static_cast<FakeComm*>(comm);
  if (c->busy) return kInvalidUsage;  // NCCL wants the communicator ready first
  delete c;
  return kSuccess;
}

int ncclCommAbort(void* comm) {
  std::lock_guard<std::mutex> lock(mu);
  ++aborts;
  auto* c = static_cast<FakeComm*>(comm);
  if (!c->busy) {
    delete c;
    return kSuccess;
  }
  // Its background thread wakes, sees `aborted` and frees it.
  c->aborted = true;
  if (c->joining) --c->group->joined;
  c->joining = false;
  c->group->cv.notify_all();
  return kSuccess;
}

int ncclCommGetAsyncError(void* comm, int* state) {
  std::lock_guard<std::mutex> lock(mu);
  auto* c = static_cast<FakeComm*>(comm);
  *state = c->state != kSuccess ? c->state : env_int("FAKE_NCCL_ASYNC_ERROR", kSuccess);
  return kSuccess;
}

int ncclAllReduce(const void* in, void* out, std::size_t count, int dtype, int op, void* comm, void*) {
  auto* c = static_cast<FakeComm*>(comm);
  return collective(c, in, out, [=](const std::vector<const void*>& ins, const std::vector<void*>& outs) {
    // Reduce into a scratch copy first: outputs may alias inputs.
    std::size_t es = dtype == 7 || dtype == 2 ? 4 : dtype == 8 || dtype == 4 ? 8 : 1;
    std::vector<unsigned char> result(count * es);
    switch (dtype) {
      case 7: reduce<float>(ins, result.data(), count, op); break;
      case 8: reduce<double>(ins, result.data(), count, op); break;
      case 2: reduce<int32_t>(ins, result.data(), count, op); break;
      case 4: reduce<int64_t>(ins, result.data(), count, op); break;
      case 1: reduce<uint8_t>(ins, result.data(), count, op); break;
      case 0: reduce<int8_t>(ins, result.data(), count, op); break;
      default: return;  // the test uses the types above only
    }
    for (void* o : outs) std::memcpy(o, result.data(), result.size());
  });
}

int ncclBroadcast(const void* in, void* out, std::size_t count, int dtype, int root, void* comm, void*) {
  if (dtype != 1 && dtype != 0) return kInvalidArgument;  // hvd broadcasts bytes
  auto* c = static_cast<FakeComm*>(comm);
  return collective(c, in, out, [=](const std::vector<const void*>& ins, const std::vector<void*>& outs) {
    std::vector<unsigned char> data(static_cast<const unsigned char*>(ins[root]),
                                    static_cast<const unsigned char*>(ins[root]) + count);
    for (void* o : outs) std::memcpy(o, data.data(), count);
  });
}

int fake_nccl_aborts() {
  std::lock_guard<std::mutex> lock(mu);
  return aborts;
}

int fake_nccl_nonblocking_inits() {
  std::lock_guard<std::mutex> lock(mu);
  return nonblocking_inits;
}

}  // extern "C"
