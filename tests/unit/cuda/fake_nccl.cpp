// A stand-in for libnccl with the same C entry points, for testing the
// loader and the communicator set-up without a GPU (tests/unit/cuda/
// test_nccl.cpp). Ranks are threads of one process; "device" buffers are
// host memory; streams are ignored (every call completes before returning).
//
// Knobs (environment, read at each call):
//   FAKE_NCCL_VERSION      version code ncclGetVersion reports (default 21803)
//   FAKE_NCCL_ASYNC_ERROR  code ncclCommGetAsyncError reports (default 0)
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct Id {
  char internal[128];
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
};

std::mutex mu;
std::map<std::string, Group*> groups;  // leaked on purpose: tests are short
uint64_t ids = 0;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
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

// Every rank calls with its buffers; `work(inputs, outputs)` runs once, by
// the last rank to arrive, while the others wait.
template <typename Work>
int collective(FakeComm* c, const void* in, void* out, Work work) {
  std::unique_lock<std::mutex> lock(mu);
  Group& g = *c->group;
  const uint64_t gen = g.generation;
  g.inputs[c->rank] = in;
  g.outputs[c->rank] = out;
  if (++g.arrived == g.size) {
    work(g.inputs, g.outputs);
    g.arrived = 0;
    ++g.generation;
    g.cv.notify_all();
    return 0;
  }
  if (!g.cv.wait_for(lock, std::chrono::seconds(10), [&] { return g.generation != gen; })) return 6;
  return 0;
}

}  // namespace

extern "C" {

int ncclGetVersion(int* version) {
  *version = env_int("FAKE_NCCL_VERSION", 21803);
  return 0;
}

const char* ncclGetErrorString(int code) {
  switch (code) {
    case 0: return "no error";
    case 3: return "internal error (fake)";
    case 6: return "remote process exited or there was a network error (fake)";
    default: return "unhandled error (fake)";
  }
}

int ncclGetUniqueId(Id* id) {
  std::lock_guard<std::mutex> lock(mu);
  std::memset(id->internal, 0, sizeof(id->internal));
  std::string text = "fake-nccl-id-" + std::to_string(++ids);
  std::memcpy(id->internal, text.data(), text.size());
  return 0;
}

int ncclCommInitRank(void** comm, int nranks, Id id, int rank) {
  if (nranks < 1 || rank < 0 || rank >= nranks) return 4;  // ncclInvalidArgument
  std::unique_lock<std::mutex> lock(mu);
  std::string key(id.internal, sizeof(id.internal));
  Group*& g = groups[key];
  if (!g) {
    g = new Group();
    g->size = nranks;
    g->inputs.resize(nranks);
    g->outputs.resize(nranks);
  }
  if (g->size != nranks) return 4;
  ++g->joined;
  g->cv.notify_all();
  // Like NCCL: init returns once every rank joined.
  if (!g->cv.wait_for(lock, std::chrono::seconds(10), [&] { return g->joined >= g->size; })) return 6;
  *comm = new FakeComm{g, rank};
  return 0;
}

int ncclCommDestroy(void* comm) {
  delete static_cast<FakeComm*>(comm);
  return 0;
}

int ncclCommAbort(void* comm) {
  delete static_cast<FakeComm*>(comm);
  return 0;
}

int ncclCommGetAsyncError(void*, int* state) {
  *state = env_int("FAKE_NCCL_ASYNC_ERROR", 0);
  return 0;
}

int ncclAllReduce(const void* in, void* out, std::size_t count, int dtype, int op, void* comm, void*) {
  auto* c = static_cast<FakeComm*>(comm);
  return collective(c, in, out, [&](const std::vector<const void*>& ins, const std::vector<void*>& outs) {
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
  if (dtype != 1 && dtype != 0) return 4;  // hvd broadcasts bytes
  auto* c = static_cast<FakeComm*>(comm);
  return collective(c, in, out, [&](const std::vector<const void*>& ins, const std::vector<void*>& outs) {
    std::vector<unsigned char> data(static_cast<const unsigned char*>(ins[root]),
                                    static_cast<const unsigned char*>(ins[root]) + count);
    for (void* o : outs) std::memcpy(o, data.data(), count);
  });
}

}  // extern "C"
