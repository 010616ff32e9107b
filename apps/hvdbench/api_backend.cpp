// hvdbench --api: the same measurements through the public named-tensor API
// (hvd::init, background negotiation, fusion, response cache), so the table
// shows what a training program sees. Allgather copies the handle's output
// into the benchmark buffer (inside the timed region, as a program would).
#include "api_backend.h"

#include "hvd/collective/hvd.h"

#include <cstring>

namespace hvd::bench {

ApiBackend::ApiBackend() { hvd::init(); }

ApiBackend::~ApiBackend() {
  try {
    hvd::shutdown();
  } catch (...) {
  }
}

int ApiBackend::rank() const { return hvd::rank(); }
int ApiBackend::size() const { return hvd::size(); }

void ApiBackend::allreduce(void* data, std::size_t count, collective::DataType dtype, collective::ReduceOp op) {
  collective::AllreduceArgs a;
  a.name = "hvdbench.allreduce." + std::to_string(count);
  a.input = data;
  a.output = data;
  a.dtype = dtype;
  a.shape = {static_cast<int64_t>(count)};
  a.op = op;
  hvd::allreduce(a);
}

void ApiBackend::allgather(const void* send, std::size_t send_bytes, void* recv) {
  collective::AllgatherArgs a;
  a.name = "hvdbench.allgather." + std::to_string(send_bytes);
  a.input = send;
  a.dtype = collective::DataType::UInt8;
  a.shape = {static_cast<int64_t>(send_bytes)};
  collective::Handle h = hvd::allgather(a);
  std::memcpy(recv, h.output(), h.output_bytes());
}

void ApiBackend::broadcast(void* data, std::size_t bytes, int root) {
  collective::BroadcastArgs a;
  a.name = "hvdbench.broadcast." + std::to_string(bytes);
  a.input = data;
  a.output = data;
  a.dtype = collective::DataType::UInt8;
  a.shape = {static_cast<int64_t>(bytes)};
  a.root = root;
  hvd::broadcast(a);
}

}  // namespace hvd::bench
