#include "engine/operations.h"

#include "device_executor.h"
#include "engine/timeline.h"
#include "engine/hierarchy.h"

#include "hvd/collective/algorithms.h"
#include "hvd/collective/context.h"
#include "hvd/collective/cuda.h"
#include "hvd/collective/errors.h"
#include "hvd/common/error.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <numeric>

namespace hvd::collective {

// ---- Handle ---------------------------------------------------------------

namespace {
detail::OpState& state_of(const std::shared_ptr<detail::OpState>& s) {
  if (!s) throw InvalidArgument("hvd: operation on an empty Handle");
  return *s;
}
const detail::OpState& finished_state(const std::shared_ptr<detail::OpState>& s) {
  detail::OpState& st = state_of(s);
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.done) throw InvalidArgument(fmt::format("hvd: tensor '{}' has not finished; wait() first", st.request.name));
  if (st.error) std::rethrow_exception(st.error);
  return st;
}
}  // namespace

bool Handle::poll() const {
  detail::OpState& st = state_of(state_);
  std::lock_guard<std::mutex> lock(st.mu);
  return st.done;
}

void Handle::wait() const {
  detail::OpState& st = state_of(state_);
  std::unique_lock<std::mutex> lock(st.mu);
  st.cv.wait(lock, [&] { return st.done; });
  if (st.error) std::rethrow_exception(st.error);
}

bool Handle::wait_for(std::chrono::milliseconds timeout) const {
  detail::OpState& st = state_of(state_);
  std::unique_lock<std::mutex> lock(st.mu);
  if (!st.cv.wait_for(lock, timeout, [&] { return st.done; })) return false;
  if (st.error) std::rethrow_exception(st.error);
  return true;
}

const void* Handle::output() const { return finished_state(state_).out_data; }
std::size_t Handle::output_bytes() const { return finished_state(state_).out_bytes; }
const std::vector<int64_t>& Handle::output_shape() const { return finished_state(state_).out_shape; }
int32_t Handle::output_device() const {
  const detail::OpState& st = finished_state(state_);
  return st.request.device >= 0 ? st.request.device : -1;
}
const std::vector<int64_t>& Handle::recv_splits() const { return finished_state(state_).recv_splits; }
const std::string& Handle::name() const { return state_of(state_).request.name; }

int64_t reducescatter_rows(int64_t rows, int rank, int size) { return rows / size + (rank < rows % size ? 1 : 0); }

}  // namespace hvd::collective

namespace hvd::collective::detail {

void OpState::finish(std::exception_ptr e) {
  {
    std::lock_guard<std::mutex> lock(mu);
    if (done) return;
    done = true;
    error = std::move(e);
  }
  cv.notify_all();
}

namespace {

int64_t row_elements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (std::size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

void copy_bytes(void* dst, const void* src, std::size_t bytes) {
  if (bytes > 0 && dst != src) std::memcpy(dst, src, bytes);
}

/// Calls the caller's allocator for op.out_shape / op.out_bytes. On failure
/// (null for bytes > 0, or a throw) records the operation's local error and
/// returns false: that fails only this operation, after the collective.
bool call_allocator(OpState& op, void** out) {
  const std::size_t bytes = op.out_bytes;
  try {
    void* p = op.allocator(op.out_shape, bytes);
    if (p != nullptr || bytes == 0) {
      *out = p;
      return true;
    }
    op.local_error = std::make_exception_ptr(
        Error(fmt::format("tensor '{}': the output allocator returned null for {} bytes", op.request.name, bytes)));
  } catch (const std::exception& e) {
    op.local_error = std::make_exception_ptr(
        Error(fmt::format("tensor '{}': the output allocator failed: {}", op.request.name, e.what())));
  } catch (...) {
    op.local_error =
        std::make_exception_ptr(Error(fmt::format("tensor '{}': the output allocator threw", op.request.name)));
  }
  return false;
}

/// Output memory from the caller's allocator, or owned by the handle. An
/// allocator failure fails only this operation: the rank still takes part in
/// the collective (into a scratch buffer) so its peers are not desynchronised.
void* allocate_output(OpState& op, std::vector<int64_t> shape, std::size_t bytes) {
  op.out_shape = std::move(shape);
  op.out_bytes = bytes;
  void* p = nullptr;
  if (op.allocator && call_allocator(op, &p)) {
    op.out_data = p;
    return p;
  }
  op.owned.reset(new uint8_t[bytes > 0 ? bytes : 1]);
  op.out_data = op.owned.get();
  return op.out_data;
}

/// Allgather, alltoall and reducescatter of device buffers (docs/cuda.md):
/// the input comes down to host memory after the work queued on the
/// caller's stream, `run` executes the host algorithm into a handle-owned
/// host buffer (every rank takes part, whatever happens to its allocator),
/// and the result goes up into the allocator's device memory, or into
/// device memory the handle owns.
template <class Run>
void run_through_host(Executors& ex, OpState& op, Run run) {
  const int device = op.request.device;
  cuda::detail::DeviceExecutor& dev = ex.device();
  std::vector<uint8_t> host_in(tensor_bytes(op.request));
  dev.to_host(device, {op.input, nullptr, host_in.size(), op.stream, op.ready.get()}, host_in.data());
  const void* user_input = op.input;
  Allocator user_allocator = std::move(op.allocator);
  op.input = host_in.data();
  op.allocator = nullptr;
  auto restore = [&] {
    op.input = user_input;
    op.allocator = std::move(user_allocator);
  };
  try {
    run();
  } catch (...) {
    restore();
    throw;
  }
  restore();

  std::unique_ptr<uint8_t[]> host_out = std::move(op.owned);
  void* dst = nullptr;
  op.out_data = nullptr;
  // The allocator's memory may still be in use by work the caller queued on
  // its stream (a caching allocator hands back freed blocks at once): the
  // result goes up only after that work.
  std::shared_ptr<CUevent_st> after_alloc;
  if (op.allocator) {
    bool allocated = false;
    dev.with_device(device, [&] {
      allocated = call_allocator(op, &dst);
      if (allocated) after_alloc = cuda::detail::record_ready_event(device, op.stream);
    });
    if (!allocated) return;  // this operation fails alone
    if (op.out_bytes > 0 && cuda::pointer_device(dst) != device) {
      op.local_error = std::make_exception_ptr(Error(fmt::format(
          "tensor '{}': the output allocator returned memory that is not on CUDA device {}", op.request.name, device)));
      return;
    }
  } else {
    try {
      op.owned_device = cuda::detail::allocate_device_memory(device, op.out_bytes);
    } catch (const CudaError&) {  // out of device memory, say: this operation alone
      op.local_error = std::current_exception();
      return;
    }
    dst = op.owned_device.get();
  }
  dev.to_device(device, host_out.get(), dst, op.out_bytes, after_alloc.get());
  op.out_data = dst;
}

/// Every rank's device for the first tensor of `resp` (fusion groups only
/// tensors with the same device per rank).
std::vector<int32_t> devices_of(const Response& resp) {
  std::vector<int32_t> devices;
  for (const Request& q : resp.tensors[0]) devices.push_back(q.device);
  return devices;
}

void run_device_allreduce(const Response& resp, Executors& ex, const std::vector<OpState*>& ops) {
  Comm& comm = ex.comm;
  const Request& head = resp.tensors[0][comm.rank()];
  std::vector<cuda::detail::DeviceTensor> mine;
  for (OpState* op : ops) {
    mine.push_back({op->input, op->output, tensor_bytes(op->request), op->stream, op->ready.get()});
  }
  const DataType dtype = head.dtype;
  const ReduceOp rop = head.op;
  const double pre = head.prescale, post = head.postscale;
  ex.device().allreduce(
      devices_of(resp), mine, dtype, rop, pre, post,
      [&](void* host, std::size_t count) { allreduce(comm, host, count, dtype, rop, pre, post); },
      [&](void* host, std::size_t count, ReduceOp gop, const std::vector<int>& members) {
        allreduce(ex.group(members), host, count, dtype, gop, 1.0, 1.0);
      });
}

/// Every tensor of a response enters `activity` (null: leaves the current one).
void activity(Executors& ex, const std::vector<OpState*>& ops, const char* name) {
  if (ex.timeline == nullptr) return;
  for (OpState* op : ops) {
    if (name) {
      ex.timeline->activity_start(op->request.name, name);
    } else {
      ex.timeline->activity_end(op->request.name);
    }
  }
}

/// A host-buffer allreduce: hierarchical when configured, else flat.
void host_allreduce(Executors& ex, void* data, std::size_t count, const Request& head) {
  if (ex.hierarchy && ex.hierarchy->allreduce(ex, data, count, head.dtype, head.op, head.prescale, head.postscale)) {
    return;
  }
  allreduce(ex.comm, data, count, head.dtype, head.op, head.prescale, head.postscale);
}

void run_allreduce(const Response& resp, Executors& ex, const std::vector<OpState*>& ops) {
  Comm& comm = ex.comm;
  FusionBuffer& fusion = ex.fusion;
  const Request& head = resp.tensors[0][comm.rank()];
  if (head.device >= 0) {
    activity(ex, ops, "ALLREDUCE");
    run_device_allreduce(resp, ex, ops);
    activity(ex, ops, nullptr);
    return;
  }
  if (head.op == ReduceOp::Adasum) {
    // Fused or not, each tensor keeps its own Adasum coefficients.
    activity(ex, ops, "ALLREDUCE");
    std::vector<std::size_t> counts;
    uint8_t* data = nullptr;
    if (ops.size() == 1) {
      copy_bytes(ops[0]->output, ops[0]->input, tensor_bytes(ops[0]->request));
      data = static_cast<uint8_t*>(ops[0]->output);
    } else {
      std::size_t total = 0;
      for (OpState* op : ops) total += tensor_bytes(op->request);
      data = fusion.get(total);
      std::size_t offset = 0;
      for (OpState* op : ops) {
        copy_bytes(data + offset, op->input, tensor_bytes(op->request));
        offset += tensor_bytes(op->request);
      }
    }
    for (OpState* op : ops) counts.push_back(static_cast<std::size_t>(num_elements(op->request.shape)));
    adasum_allreduce(comm, data, counts, head.dtype, head.prescale, head.postscale);
    if (ops.size() > 1) {
      std::size_t offset = 0;
      for (OpState* op : ops) {
        copy_bytes(op->output, data + offset, tensor_bytes(op->request));
        offset += tensor_bytes(op->request);
      }
    }
    activity(ex, ops, nullptr);
    return;
  }
  if (ops.size() == 1) {
    OpState& op = *ops[0];
    std::size_t bytes = tensor_bytes(op.request);
    activity(ex, ops, "ALLREDUCE");
    copy_bytes(op.output, op.input, bytes);
    host_allreduce(ex, op.output, static_cast<std::size_t>(num_elements(op.request.shape)), head);
    activity(ex, ops, nullptr);
    return;
  }
  std::size_t total = 0;
  for (OpState* op : ops) total += tensor_bytes(op->request);
  activity(ex, ops, "MEMCPY_IN_FUSION_BUFFER");
  uint8_t* buffer = fusion.get(total);
  std::size_t offset = 0;
  for (OpState* op : ops) {
    std::size_t b = tensor_bytes(op->request);
    copy_bytes(buffer + offset, op->input, b);
    offset += b;
  }
  activity(ex, ops, "ALLREDUCE");
  host_allreduce(ex, buffer, total / dtype_size(head.dtype), head);
  activity(ex, ops, "MEMCPY_OUT_FUSION_BUFFER");
  offset = 0;
  for (OpState* op : ops) {
    std::size_t b = tensor_bytes(op->request);
    copy_bytes(op->output, buffer + offset, b);
    offset += b;
  }
  activity(ex, ops, nullptr);
}

void run_allgather(const Response& resp, Executors& ex, OpState& op) {
  Comm& comm = ex.comm;
  const TensorRequests& t = resp.tensors[0];
  const std::size_t row_bytes = static_cast<std::size_t>(row_elements(op.request.shape)) * dtype_size(op.request.dtype);
  std::vector<std::size_t> recv_bytes(t.size());
  int64_t rows = 0;
  for (std::size_t r = 0; r < t.size(); ++r) {
    recv_bytes[r] = static_cast<std::size_t>(t[r].shape[0]) * row_bytes;
    rows += t[r].shape[0];
  }
  std::vector<int64_t> shape = op.request.shape;
  shape[0] = rows;
  std::size_t total = static_cast<std::size_t>(rows) * row_bytes;
  void* out = allocate_output(op, shape, total);
  if (ex.hierarchy && ex.hierarchy->allgatherv(ex, op.input, recv_bytes[comm.rank()], out, recv_bytes)) return;
  allgatherv(comm, op.input, recv_bytes[comm.rank()], out, recv_bytes);
}

void run_broadcast(const Response& resp, Executors& ex, OpState& op) {
  Comm& comm = ex.comm;
  std::size_t bytes = tensor_bytes(op.request);
  if (op.request.device >= 0) {
    const int root = op.request.root;
    ex.device().broadcast(devices_of(resp), {op.input, op.output, bytes, op.stream, op.ready.get()}, root,
                          [&](void* host, std::size_t b) { broadcast(comm, host, b, root); });
    return;
  }
  if (comm.rank() == op.request.root && op.input != nullptr) copy_bytes(op.output, op.input, bytes);
  broadcast(comm, op.output, bytes, op.request.root);
}

void run_alltoall(const Response& resp, Comm& comm, OpState& op) {
  const TensorRequests& t = resp.tensors[0];
  const int size = comm.size();
  const std::size_t row_bytes = static_cast<std::size_t>(row_elements(op.request.shape)) * dtype_size(op.request.dtype);
  std::vector<int64_t> mine = alltoall_splits(op.request, size);
  std::vector<std::size_t> send_bytes(size), recv_bytes(size);
  op.recv_splits.assign(size, 0);
  int64_t rows = 0;
  for (int r = 0; r < size; ++r) {
    send_bytes[r] = static_cast<std::size_t>(mine[r]) * row_bytes;
    int64_t from_r = alltoall_splits(t[r], size)[comm.rank()];
    op.recv_splits[r] = from_r;
    recv_bytes[r] = static_cast<std::size_t>(from_r) * row_bytes;
    rows += from_r;
  }
  std::vector<int64_t> shape = op.request.shape;
  shape[0] = rows;
  void* out = allocate_output(op, shape, static_cast<std::size_t>(rows) * row_bytes);
  alltoallv(comm, op.input, send_bytes, out, recv_bytes);
}

void run_reducescatter(const Response& resp, Comm& comm, OpState& op) {
  const Request& q = op.request;
  const int size = comm.size();
  const int64_t row_elems = row_elements(q.shape);
  std::vector<std::size_t> counts(size);
  for (int r = 0; r < size; ++r) {
    counts[r] = static_cast<std::size_t>(reducescatter_rows(q.shape[0], r, size) * row_elems);
  }
  std::vector<int64_t> shape = q.shape;
  shape[0] = reducescatter_rows(q.shape[0], comm.rank(), size);
  void* out = allocate_output(op, shape, counts[comm.rank()] * dtype_size(q.dtype));
  reducescatter(comm, op.input, out, counts, q.dtype, q.op, q.prescale, q.postscale);
}

}  // namespace

std::vector<int64_t> alltoall_splits(const Request& request, int size) {
  if (!request.splits.empty()) return request.splits;
  int64_t rows = request.shape.empty() ? 0 : request.shape[0];
  return std::vector<int64_t>(size, rows / size);
}

void check_request(const OpState& op, int size) {
  const Request& q = op.request;
  auto bad = [&](const std::string& what) {
    throw InvalidArgument(fmt::format("hvd {} of tensor '{}': {}", op_type_name(q.type), q.name, what));
  };
  if (q.name.size() > 4096) bad("name longer than 4096 bytes");
  if (static_cast<int32_t>(q.dtype) < 0 || static_cast<int32_t>(q.dtype) > static_cast<int32_t>(DataType::Int16)) {
    bad(fmt::format("unknown dtype {}", static_cast<int32_t>(q.dtype)));
  }
  if (q.dtype == DataType::Bool && (q.type == OpType::Allreduce || q.type == OpType::Reducescatter)) {
    bad("bool tensors cannot be reduced (allgather, broadcast and alltoall accept them; cast to an integer type "
        "to sum or take the min/max)");
  }
  if (static_cast<int32_t>(q.op) < 0 || static_cast<int32_t>(q.op) > static_cast<int32_t>(ReduceOp::Adasum)) {
    bad(fmt::format("unknown reduce op {}", static_cast<int32_t>(q.op)));
  }
  if (q.op == ReduceOp::Adasum && (q.type == OpType::Allreduce || q.type == OpType::Reducescatter)) {
    // Horovod's rules (docs/collective.md, "Adasum").
    if (q.type != OpType::Allreduce) bad("Adasum is an allreduce-only operation");
    if (q.dtype != DataType::Float16 && q.dtype != DataType::Float32 && q.dtype != DataType::Float64) {
      bad(fmt::format("Adasum supports float16, float32 and float64 tensors (got {})", dtype_name(q.dtype)));
    }
    if (q.device >= 0) bad("Adasum of CUDA tensors is not supported; reduce a host copy of the tensor");
    if (!adasum_supported_size(size)) {
      bad(fmt::format("Adasum needs a power-of-two number of ranks, as Horovod's; the job (or process set) has {}",
                      size));
    }
  }
  for (int64_t d : q.shape) {
    if (d < 0) bad(fmt::format("negative dimension in shape [{}]", fmt::join(q.shape, ",")));
  }
  if (q.shape.size() > 64) bad("more than 64 dimensions");
  if (q.device < -1) bad(fmt::format("device {} is not valid (-1: host memory, >= 0: a CUDA device)", q.device));
  if (q.device >= 0 && (q.type == OpType::Barrier || q.type == OpType::Join)) bad("takes no buffers");
  const bool empty = num_elements(q.shape) == 0;
  if (q.type == OpType::Barrier || q.type == OpType::Join) return;
  if (!empty && op.input == nullptr && !(q.type == OpType::Broadcast && op.output != nullptr)) bad("input is null");
  if (!empty && op.output == nullptr && (q.type == OpType::Allreduce || q.type == OpType::Broadcast)) {
    bad("output is null");
  }
  if (q.type == OpType::Broadcast && (q.root < 0 || q.root >= size)) {
    bad(fmt::format("root rank {} is out of range for a job of size {}", q.root, size));
  }
  if ((q.type == OpType::Allgather || q.type == OpType::Alltoall || q.type == OpType::Reducescatter) &&
      q.shape.empty()) {
    bad("needs a tensor with at least one dimension (got a scalar)");
  }
  if (!std::isfinite(q.prescale) || !std::isfinite(q.postscale)) bad("prescale/postscale must be finite");
  if (q.type == OpType::Alltoall) {
    const int64_t rows = q.shape[0];
    if (q.splits.empty()) {
      if (rows % size != 0) {
        bad(fmt::format("first dimension {} does not divide evenly among {} ranks; pass splits", rows, size));
      }
    } else {
      if (static_cast<int>(q.splits.size()) != size) {
        bad(fmt::format("{} splits given for a job of size {}", q.splits.size(), size));
      }
      int64_t sum = 0;
      for (int64_t s : q.splits) {
        if (s < 0) bad("negative split");
        sum += s;
      }
      if (sum != rows) bad(fmt::format("splits sum to {} but the first dimension is {}", sum, rows));
    }
  }
}

void execute(const Response& response, const std::vector<OpState*>& ops, Executors& ex) {
  Comm& comm = ex.comm;
  // A device operation whose stream could not be captured at submit (no
  // such device, say) fails here like any data-plane error.
  for (OpState* op : ops) {
    if (op->submit_error) std::rethrow_exception(op->submit_error);
  }
  if (response.type != OpType::Allreduce) activity(ex, ops, timeline_op_name(response.type));
  switch (response.type) {
    case OpType::Allreduce: run_allreduce(response, ex, ops); return;
    case OpType::Broadcast: run_broadcast(response, ex, *ops[0]); return;
    case OpType::Allgather:
    case OpType::Alltoall:
    case OpType::Reducescatter: break;
    case OpType::Barrier: barrier(comm); return;
    case OpType::Join: return;  // no data: every rank announced it (the Context hands out the result)
  }
  OpState& op = *ops[0];
  auto run = [&] {
    switch (response.type) {
      case OpType::Allgather: run_allgather(response, ex, op); return;
      case OpType::Alltoall: run_alltoall(response, comm, op); return;
      default: run_reducescatter(response, comm, op); return;
    }
  };
  if (op.request.device >= 0) {
    run_through_host(ex, op, run);
  } else {
    run();
  }
}

}  // namespace hvd::collective::detail
