#pragma once
/// hvdbench --api: measurements through the public API (hvd/collective/hvd.h).
#include "bench.h"

namespace hvd::bench {

/// Initialises the process-wide API from the environment on construction
/// and shuts it down on destruction.
class ApiBackend final : public Backend {
 public:
  ApiBackend();
  ~ApiBackend() override;
  int rank() const override;
  int size() const override;
  void allreduce(void* data, std::size_t count, collective::DataType dtype, collective::ReduceOp op) override;
  void allgather(const void* send, std::size_t send_bytes, void* recv) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
};

}  // namespace hvd::bench
