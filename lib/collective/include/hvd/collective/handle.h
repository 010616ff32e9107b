#pragma once
/// The result of an asynchronous operation. Cheap to copy (copies share one
/// state). The operation's input and output memory must stay valid until the
/// handle is finished (poll() true or wait() returned).
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hvd::collective {

namespace detail {
struct OpState;
}

/// Allocates the output of an operation whose size is only known after
/// negotiation (allgather, alltoall, reducescatter). Called on the library's
/// background thread with the output shape and byte count; returns memory
/// that stays valid until the caller frees it (a framework tensor's storage,
/// say). Returning nullptr (for bytes > 0) or throwing fails the operation.
/// Without an allocator the handle owns the output.
using Allocator = std::function<void*(const std::vector<int64_t>& shape, std::size_t bytes)>;

class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<detail::OpState> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  /// True once the operation finished (successfully or not). Never blocks.
  bool poll() const;
  /// Blocks until finished; rethrows the operation's error (hvd::IoError,
  /// MismatchError, ...).
  void wait() const;
  /// Like wait() with a bound; false if still running after `timeout`.
  bool wait_for(std::chrono::milliseconds timeout) const;

  /// Output of allgather / alltoall / reducescatter after a successful wait:
  /// the library-owned buffer or the allocator's memory (device memory for
  /// an operation on device buffers: see output_device()).
  const void* output() const;
  /// Where output() is: the CUDA device of an operation on device buffers,
  /// else -1 (host memory). cuda::copy() copies from either.
  int32_t output_device() const;
  std::size_t output_bytes() const;
  const std::vector<int64_t>& output_shape() const;
  /// Alltoall: rows received from each rank.
  const std::vector<int64_t>& recv_splits() const;
  const std::string& name() const;

 private:
  std::shared_ptr<detail::OpState> state_;
};

}  // namespace hvd::collective
