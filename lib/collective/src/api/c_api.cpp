// The C ABI: exceptions become error codes plus a thread-local message.
#include "hvd/collective/c_api.h"

#include "hvd/collective/cuda.h"
#include "hvd/collective/elastic.h"
#include "hvd/collective/errors.h"
#include "hvd/collective/hvd.h"

#include <fmt/format.h>

#include <exception>
#include <functional>
#include <string>
#include <vector>

struct hvd_handle {
  hvd::collective::Handle handle;
};

namespace {

thread_local std::string t_last_error;

int set_error(int code, const std::string& message) {
  t_last_error = message;
  return code;
}

/// Runs f, mapping the hvd exception hierarchy onto HVD_ERR_* codes.
template <typename F>
int guarded(F&& f) {
  try {
    f();
    return HVD_OK;
  } catch (const hvd::collective::MismatchError& e) {
    return set_error(HVD_ERR_MISMATCH, e.what());
  } catch (const hvd::collective::JoinedError& e) {
    return set_error(HVD_ERR_JOINED, e.what());
  } catch (const hvd::collective::NotInitializedError& e) {
    return set_error(HVD_ERR_NOT_INITIALIZED, e.what());
  } catch (const hvd::collective::ShutdownError& e) {
    return set_error(HVD_ERR_SHUTDOWN, e.what());
  } catch (const hvd::InvalidArgument& e) {
    return set_error(HVD_ERR_INVALID, e.what());
  } catch (const hvd::elastic::PeerFailureError& e) {
    return set_error(HVD_ERR_PEER_FAILURE, e.what());
  } catch (const hvd::elastic::HostsUpdatedInterrupt& e) {
    return set_error(HVD_ERR_HOSTS_UPDATED, e.what());
  } catch (const hvd::elastic::WorkerRemovedError& e) {
    return set_error(HVD_ERR_REMOVED, e.what());
  } catch (const hvd::IoError& e) {
    return set_error(HVD_ERR_IO, e.what());
  } catch (const hvd::TimeoutError& e) {
    return set_error(HVD_ERR_TIMEOUT, e.what());
  } catch (const std::exception& e) {
    return set_error(HVD_ERR_INTERNAL, e.what());
  } catch (...) {
    return set_error(HVD_ERR_INTERNAL, "unknown error");
  }
}

int topology(int (*get)()) {
  int value = -1;
  guarded([&] { value = get(); });
  return value;
}

int invalid(const char* what) { return set_error(HVD_ERR_INVALID, what); }

std::vector<int64_t> shape_of(int ndim, const int64_t* shape) {
  if (ndim < 0 || ndim > 64) throw hvd::InvalidArgument(fmt::format("ndim {} is out of range [0, 64]", ndim));
  if (ndim > 0 && shape == nullptr) throw hvd::InvalidArgument("shape is NULL but ndim > 0");
  return std::vector<int64_t>(shape, shape + ndim);
}

std::vector<int64_t> count_shape(int64_t count) {
  if (count < 0) throw hvd::InvalidArgument(fmt::format("count {} is negative", count));
  return {count};
}

hvd::collective::Allocator allocator_of(hvd_alloc_fn fn, void* user) {
  if (fn == nullptr) return {};
  return [fn, user](const std::vector<int64_t>& shape, std::size_t bytes) -> void* {
    return fn(user, static_cast<int>(shape.size()), shape.data(), bytes);
  };
}

std::string name_of(const char* name) { return name ? std::string(name) : std::string(); }

int submit(hvd_handle_t* out, const std::function<hvd::collective::Handle()>& f) {
  if (out == nullptr) return invalid("out_handle is NULL");
  *out = nullptr;
  return guarded([&] { *out = new hvd_handle{f()}; });
}

}  // namespace

extern "C" {

int hvd_init(void) {
  return guarded([] { hvd::init(); });
}
int hvd_shutdown(void) {
  return guarded([] { hvd::shutdown(); });
}
int hvd_is_initialized(void) { return hvd::is_initialized() ? 1 : 0; }
int hvd_rank(void) { return topology(hvd::rank); }
int hvd_size(void) { return topology(hvd::size); }
int hvd_local_rank(void) { return topology(hvd::local_rank); }
int hvd_local_size(void) { return topology(hvd::local_size); }
int hvd_cross_rank(void) { return topology(hvd::cross_rank); }
int hvd_cross_size(void) { return topology(hvd::cross_size); }
const char* hvd_last_error(void) { return t_last_error.c_str(); }

int hvd_allreduce_async(const char* name, const void* in, void* out, int64_t count, int dtype, int op, double prescale,
                        double postscale, hvd_handle_t* out_handle) {
  return hvd_allreduce_async_ex(name, in, out, count, dtype, op, prescale, postscale, HVD_DEVICE_HOST, nullptr,
                                out_handle);
}

int hvd_allreduce_async_ex(const char* name, const void* in, void* out, int64_t count, int dtype, int op,
                           double prescale, double postscale, int device, void* cuda_stream, hvd_handle_t* out_handle) {
  return hvd_allreduce_async_ps(name, in, out, count, dtype, op, prescale, postscale, device, cuda_stream,
                                HVD_GLOBAL_PROCESS_SET, out_handle);
}

int hvd_allreduce_async_ps(const char* name, const void* in, void* out, int64_t count, int dtype, int op,
                           double prescale, double postscale, int device, void* cuda_stream, int process_set,
                           hvd_handle_t* out_handle) {
  return submit(out_handle, [&] {
    hvd::collective::AllreduceArgs a{name_of(name),
                                     in,
                                     out,
                                     static_cast<hvd::collective::DataType>(dtype),
                                     count_shape(count),
                                     static_cast<hvd::collective::ReduceOp>(op),
                                     prescale,
                                     postscale,
                                     device,
                                     static_cast<CUstream_st*>(cuda_stream)};
    a.process_set = process_set;
    return hvd::allreduce_async(a);
  });
}

int hvd_allgather_async(const char* name, const void* in, int ndim, const int64_t* shape, int dtype, hvd_alloc_fn alloc,
                        void* alloc_user, hvd_handle_t* out_handle) {
  return hvd_allgather_async_ex(name, in, ndim, shape, dtype, alloc, alloc_user, HVD_DEVICE_HOST, nullptr, out_handle);
}

int hvd_allgather_async_ex(const char* name, const void* in, int ndim, const int64_t* shape, int dtype,
                           hvd_alloc_fn alloc, void* alloc_user, int device, void* cuda_stream,
                           hvd_handle_t* out_handle) {
  return hvd_allgather_async_ps(name, in, ndim, shape, dtype, alloc, alloc_user, device, cuda_stream,
                                HVD_GLOBAL_PROCESS_SET, out_handle);
}

int hvd_allgather_async_ps(const char* name, const void* in, int ndim, const int64_t* shape, int dtype,
                           hvd_alloc_fn alloc, void* alloc_user, int device, void* cuda_stream, int process_set,
                           hvd_handle_t* out_handle) {
  return submit(out_handle, [&] {
    hvd::collective::AllgatherArgs a{name_of(name), in, static_cast<hvd::collective::DataType>(dtype),
                                     shape_of(ndim, shape), allocator_of(alloc, alloc_user)};
    a.device = device;
    a.stream = static_cast<CUstream_st*>(cuda_stream);
    a.process_set = process_set;
    return hvd::allgather_async(a);
  });
}

int hvd_broadcast_async(const char* name, const void* in, void* out, int64_t count, int dtype, int root,
                        hvd_handle_t* out_handle) {
  return hvd_broadcast_async_ex(name, in, out, count, dtype, root, HVD_DEVICE_HOST, nullptr, out_handle);
}

int hvd_broadcast_async_ex(const char* name, const void* in, void* out, int64_t count, int dtype, int root, int device,
                           void* cuda_stream, hvd_handle_t* out_handle) {
  return hvd_broadcast_async_ps(name, in, out, count, dtype, root, device, cuda_stream, HVD_GLOBAL_PROCESS_SET,
                                out_handle);
}

int hvd_broadcast_async_ps(const char* name, const void* in, void* out, int64_t count, int dtype, int root, int device,
                           void* cuda_stream, int process_set, hvd_handle_t* out_handle) {
  return submit(out_handle, [&] {
    hvd::collective::BroadcastArgs a{name_of(name),      in,   out,    static_cast<hvd::collective::DataType>(dtype),
                                     count_shape(count), root, device, static_cast<CUstream_st*>(cuda_stream)};
    a.process_set = process_set;
    return hvd::broadcast_async(a);
  });
}

int hvd_cuda_built(void) { return hvd::collective::cuda::cuda_built() ? 1 : 0; }

int hvd_cuda_device_count(void) { return hvd::collective::cuda::device_count(); }

int hvd_alltoall_async(const char* name, const void* in, int ndim, const int64_t* shape, int dtype,
                       const int64_t* splits, hvd_alloc_fn alloc, void* alloc_user, hvd_handle_t* out_handle) {
  return hvd_alltoall_async_ex(name, in, ndim, shape, dtype, splits, alloc, alloc_user, HVD_DEVICE_HOST, nullptr,
                               out_handle);
}

int hvd_alltoall_async_ex(const char* name, const void* in, int ndim, const int64_t* shape, int dtype,
                          const int64_t* splits, hvd_alloc_fn alloc, void* alloc_user, int device, void* cuda_stream,
                          hvd_handle_t* out_handle) {
  return hvd_alltoall_async_ps(name, in, ndim, shape, dtype, splits, alloc, alloc_user, device, cuda_stream,
                               HVD_GLOBAL_PROCESS_SET, out_handle);
}

int hvd_alltoall_async_ps(const char* name, const void* in, int ndim, const int64_t* shape, int dtype,
                          const int64_t* splits, hvd_alloc_fn alloc, void* alloc_user, int device, void* cuda_stream,
                          int process_set, hvd_handle_t* out_handle) {
  return submit(out_handle, [&] {
    std::vector<int64_t> split_vec;
    if (splits != nullptr) split_vec.assign(splits, splits + hvd::context().process_set_size(process_set));
    hvd::collective::AlltoallArgs a{name_of(name),         in,        static_cast<hvd::collective::DataType>(dtype),
                                    shape_of(ndim, shape), split_vec, allocator_of(alloc, alloc_user)};
    a.device = device;
    a.stream = static_cast<CUstream_st*>(cuda_stream);
    a.process_set = process_set;
    return hvd::alltoall_async(a);
  });
}

int hvd_reducescatter_async(const char* name, const void* in, int ndim, const int64_t* shape, int dtype, int op,
                            double prescale, double postscale, hvd_alloc_fn alloc, void* alloc_user,
                            hvd_handle_t* out_handle) {
  return hvd_reducescatter_async_ex(name, in, ndim, shape, dtype, op, prescale, postscale, alloc, alloc_user,
                                    HVD_DEVICE_HOST, nullptr, out_handle);
}

int hvd_reducescatter_async_ex(const char* name, const void* in, int ndim, const int64_t* shape, int dtype, int op,
                               double prescale, double postscale, hvd_alloc_fn alloc, void* alloc_user, int device,
                               void* cuda_stream, hvd_handle_t* out_handle) {
  return hvd_reducescatter_async_ps(name, in, ndim, shape, dtype, op, prescale, postscale, alloc, alloc_user, device,
                                    cuda_stream, HVD_GLOBAL_PROCESS_SET, out_handle);
}

int hvd_reducescatter_async_ps(const char* name, const void* in, int ndim, const int64_t* shape, int dtype, int op,
                               double prescale, double postscale, hvd_alloc_fn alloc, void* alloc_user, int device,
                               void* cuda_stream, int process_set, hvd_handle_t* out_handle) {
  return submit(out_handle, [&] {
    hvd::collective::ReducescatterArgs a{name_of(name),
                                         in,
                                         static_cast<hvd::collective::DataType>(dtype),
                                         shape_of(ndim, shape),
                                         static_cast<hvd::collective::ReduceOp>(op),
                                         prescale,
                                         postscale,
                                         allocator_of(alloc, alloc_user)};
    a.device = device;
    a.stream = static_cast<CUstream_st*>(cuda_stream);
    a.process_set = process_set;
    return hvd::reducescatter_async(a);
  });
}

int hvd_join(int* last_rank) {
  return guarded([&] {
    int last = hvd::join();
    if (last_rank) *last_rank = last;
  });
}

int hvd_barrier_async(const char* name, hvd_handle_t* out_handle) {
  return hvd_barrier_async_ps(name, HVD_GLOBAL_PROCESS_SET, out_handle);
}

int hvd_barrier_async_ps(const char* name, int process_set, hvd_handle_t* out_handle) {
  return submit(out_handle, [&] {
    hvd::collective::BarrierArgs a{name_of(name)};
    a.process_set = process_set;
    return hvd::barrier_async(a);
  });
}

int hvd_init_process_sets(const int* ranks, const int* sizes, int nsets) {
  if (nsets < 0) return invalid("nsets is negative");
  if (nsets > 0 && sizes == nullptr) return invalid("sizes is NULL but nsets > 0");
  return guarded([&] {
    std::vector<std::vector<int>> sets;
    const int* next = ranks;
    for (int i = 0; i < nsets; ++i) {
      if (sizes[i] < 0) throw hvd::InvalidArgument(fmt::format("sizes[{}] = {} is negative", i, sizes[i]));
      if (sizes[i] > 0 && next == nullptr) throw hvd::InvalidArgument("ranks is NULL but a set has ranks");
      sets.emplace_back(next, next + sizes[i]);
      next += sizes[i];
    }
    hvd::init(sets);
  });
}

int hvd_add_process_set(const int* ranks, int nranks) {
  if (nranks < 0) return invalid("nranks is negative");
  if (nranks > 0 && ranks == nullptr) return invalid("ranks is NULL but nranks > 0");
  int id = -1;
  int rc = guarded([&] { id = hvd::add_process_set(std::vector<int>(ranks, ranks + nranks)); });
  return rc == HVD_OK ? id : rc;
}

int hvd_remove_process_set(int id) {
  return guarded([&] { hvd::remove_process_set(id); });
}

int hvd_start_timeline(const char* path, int mark_cycles) {
  return guarded([&] { hvd::start_timeline(path ? path : "", mark_cycles != 0); });
}

int hvd_stop_timeline(void) {
  return guarded([&] { hvd::stop_timeline(); });
}

int hvd_process_set_size(int id) {
  int v = -1;
  int rc = guarded([&] { v = hvd::context().process_set_size(id); });
  return rc == HVD_OK ? v : rc;
}

int hvd_process_set_rank(int id) {
  int v = -1;
  int rc = guarded([&] { v = hvd::context().process_set_rank(id); });
  return rc == HVD_OK ? v : rc;
}

int hvd_process_set_included(int id) {
  int v = -1;
  int rc = guarded([&] { v = hvd::context().process_set_included(id) ? 1 : 0; });
  return rc == HVD_OK ? v : rc;
}

int hvd_process_set_ids(int* ids, int capacity) {
  int n = -1;
  int rc = guarded([&] {
    const auto all = hvd::context().process_set_ids();
    n = static_cast<int>(all.size());
    for (int i = 0; i < capacity && i < n; ++i) ids[i] = all[static_cast<std::size_t>(i)];
  });
  return rc == HVD_OK ? n : rc;
}

int hvd_process_set_ranks(int id, int* ranks, int capacity) {
  int n = -1;
  int rc = guarded([&] {
    const auto all = hvd::context().process_set_ranks(id);
    n = static_cast<int>(all.size());
    for (int i = 0; i < capacity && i < n; ++i) ranks[i] = all[static_cast<std::size_t>(i)];
  });
  return rc == HVD_OK ? n : rc;
}

int hvd_poll(hvd_handle_t handle) {
  if (handle == nullptr) return invalid("handle is NULL");
  int done = 0;
  int rc = guarded([&] { done = handle->handle.poll() ? 1 : 0; });
  return rc == HVD_OK ? done : rc;
}

int hvd_wait(hvd_handle_t handle) {
  if (handle == nullptr) return invalid("handle is NULL");
  return guarded([&] { handle->handle.wait(); });
}

int hvd_handle_output(hvd_handle_t handle, const void** data, size_t* bytes) {
  if (handle == nullptr) return invalid("handle is NULL");
  return guarded([&] {
    const void* d = handle->handle.output();
    std::size_t b = handle->handle.output_bytes();
    if (data) *data = d;
    if (bytes) *bytes = b;
  });
}

int hvd_handle_output_device(hvd_handle_t handle, int* device) {
  if (handle == nullptr) return invalid("handle is NULL");
  return guarded([&] {
    const int d = handle->handle.output_device();
    if (device) *device = d;
  });
}

int hvd_handle_output_shape(hvd_handle_t handle, int64_t* shape, int capacity, int* ndim) {
  if (handle == nullptr) return invalid("handle is NULL");
  return guarded([&] {
    const auto& s = handle->handle.output_shape();
    if (ndim) *ndim = static_cast<int>(s.size());
    for (int i = 0; i < capacity && i < static_cast<int>(s.size()); ++i) shape[i] = s[i];
  });
}

int hvd_handle_recv_splits(hvd_handle_t handle, int64_t* splits, int capacity) {
  if (handle == nullptr) return invalid("handle is NULL");
  return guarded([&] {
    const auto& s = handle->handle.recv_splits();
    if (capacity < static_cast<int>(s.size())) {
      throw hvd::InvalidArgument(fmt::format("capacity {} is smaller than the {} ranks", capacity, s.size()));
    }
    for (std::size_t i = 0; i < s.size(); ++i) splits[i] = s[i];
  });
}

void hvd_release(hvd_handle_t handle) { delete handle; }

int hvd_allreduce(const char* name, const void* in, void* out, int64_t count, int dtype, int op) {
  hvd_handle_t h = nullptr;
  int rc = hvd_allreduce_async(name, in, out, count, dtype, op, 1.0, 1.0, &h);
  if (rc == HVD_OK) rc = hvd_wait(h);
  hvd_release(h);
  return rc;
}

int hvd_broadcast(const char* name, const void* in, void* out, int64_t count, int dtype, int root) {
  hvd_handle_t h = nullptr;
  int rc = hvd_broadcast_async(name, in, out, count, dtype, root, &h);
  if (rc == HVD_OK) rc = hvd_wait(h);
  hvd_release(h);
  return rc;
}

int hvd_barrier(void) {
  hvd_handle_t h = nullptr;
  int rc = hvd_barrier_async(nullptr, &h);
  if (rc == HVD_OK) rc = hvd_wait(h);
  hvd_release(h);
  return rc;
}

int hvd_elastic_enabled(void) {
  int value = 0;
  guarded([&] { value = hvd::elastic::enabled() ? 1 : 0; });
  return value;
}

int hvd_elastic_hosts_updated(void) {
  int value = 0;
  guarded([&] { value = hvd::elastic::hosts_updated() ? 1 : 0; });
  return value;
}

int64_t hvd_elastic_world_version(void) {
  int64_t value = 0;
  guarded([&] { value = static_cast<int64_t>(hvd::elastic::world_version()); });
  return value;
}

int hvd_elastic_check_host_updates(void) {
  return guarded([] { hvd::elastic::check_host_updates(); });
}

int hvd_elastic_reset(void) {
  return guarded([] { hvd::elastic::reset(); });
}

int hvd_elastic_state_synced(void) {
  return guarded([] { hvd::elastic::state_synced(); });
}

}  // extern "C"
