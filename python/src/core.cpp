// hvdcomm._core: raw-buffer binding of the process-wide collective API
// (hvd/collective/hvd.h). Python passes (name, data pointer, dtype code,
// shape); outputs whose size is known only after negotiation stay owned by
// the handle and are copied out by Python (Handle.copy_output).
#include "hvd/collective/cuda.h"
#include "hvd/collective/elastic.h"
#include "hvd/collective/hvd.h"
#include "hvd/collective/init_env.h"
#include "hvd/common/job_env.h"

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace py = pybind11;
using namespace hvd::collective;

namespace {

/// Waits in short slices with the GIL released, so Ctrl-C interrupts it.
void wait_interruptible(const Handle& h) {
  for (;;) {
    bool done;
    {
      py::gil_scoped_release nogil;
      done = h.wait_for(std::chrono::milliseconds(50));
    }
    if (done) break;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
  py::gil_scoped_release nogil;
  h.wait();  // rethrows the operation's error
}

// Blocking library calls left running by an interrupted run_interruptible.
// Never destroyed (a joinable std::thread destroyed at exit would
// terminate the process); shutdown() joins them.
std::mutex g_background_mu;
std::vector<std::thread>* g_background = new std::vector<std::thread>();

/// Runs a blocking collective library call (add/remove_process_set) on a
/// thread of its own and waits for it in short slices, running Python's
/// signal handlers in between, so Ctrl-C or a SIGALRM handler interrupts the
/// wait as it does synchronize(). When a handler raises, the call goes on in
/// the background -- it is collective, the other ranks are in it too -- and
/// the exception propagates; shutdown() ends the library and then joins it.
template <class R, class F>
R run_interruptible(F f) {
  auto task = std::make_shared<std::packaged_task<R()>>(std::move(f));
  std::future<R> result = task->get_future();
  std::thread worker([task] { (*task)(); });
  for (;;) {
    bool done;
    {
      py::gil_scoped_release nogil;
      done = result.wait_for(std::chrono::milliseconds(50)) == std::future_status::ready;
    }
    if (done) break;
    if (PyErr_CheckSignals() != 0) {
      std::lock_guard<std::mutex> lock(g_background_mu);
      g_background->push_back(std::move(worker));
      throw py::error_already_set();
    }
  }
  worker.join();
  return result.get();  // rethrows the call's error
}

void join_background_calls() {
  std::vector<std::thread> calls;
  {
    std::lock_guard<std::mutex> lock(g_background_mu);
    calls.swap(*g_background);
  }
  for (auto& t : calls) t.join();
}

// Tags that name the Python-only exception classes below.
struct HostsUpdatedTag {};
struct WorkerRemovedTag {};
struct PeerFailureTag {};

const void* cptr(uintptr_t p) { return reinterpret_cast<const void*>(p); }
void* mptr(uintptr_t p) { return reinterpret_cast<void*>(p); }
CUstream_st* sptr(uintptr_t p) { return reinterpret_cast<CUstream_st*>(p); }

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "hvdcomm native core (raw buffers; see docs/python.md)";

  static py::exception<hvd::Error> internal_error(m, "HorovodInternalError", PyExc_RuntimeError);
  // Ranks disagree about a tensor (shape, dtype, op, root...): Horovod raises
  // HorovodInternalError (a RuntimeError) there, so this is one.
  static py::exception<MismatchError> mismatch_error(m, "MismatchError", internal_error);
  // Elastic (docs/python.md, "Elastic"): a new world was published; every
  // rank raises it at the same commit. `skip_sync` is Horovod's attribute;
  // here it is always False (sync after every re-join is never skipped).
  static py::exception<HostsUpdatedTag> hosts_updated(m, "HostsUpdatedInterrupt", PyExc_RuntimeError);
  hosts_updated.attr("skip_sync") = false;
  // This worker is not part of the job any more (removed, or the job ended).
  static py::exception<WorkerRemovedTag> worker_removed(m, "WorkerRemovedError", PyExc_RuntimeError);
  // A peer died or a link dropped (hvd::elastic::PeerFailureError): the one
  // HorovodInternalError elastic run() recovers from by restore + re-join.
  static py::exception<PeerFailureTag> peer_failure(m, "PeerFailureError", internal_error);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const hvd::elastic::HostsUpdatedInterrupt& e) {
      hosts_updated(e.what());
    } catch (const hvd::elastic::WorkerRemovedError& e) {
      worker_removed(e.what());
    } catch (const hvd::elastic::PeerFailureError& e) {
      peer_failure(e.what());
    } catch (const MismatchError& e) {
      mismatch_error(e.what());
    } catch (const hvd::InvalidArgument& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const NotInitializedError& e) {
      // Before hvd.init() (or after shutdown()): Horovod's ValueError.
      const std::string what = std::string("Horovod has not been initialized; use hvd.init() (") + e.what() + ")";
      PyErr_SetString(PyExc_ValueError, what.c_str());
    } catch (const hvd::Error& e) {
      internal_error(e.what());
    }
  });

  // process_sets: static sets (lists of global ranks), ids 1..n in order.
  m.def(
      "init",
      [](const std::vector<std::vector<int>>& process_sets) {
        py::gil_scoped_release nogil;
        hvd::init(process_sets);
      },
      py::arg("process_sets") = std::vector<std::vector<int>>{});
  m.def("shutdown", [] {
    py::gil_scoped_release nogil;
    hvd::shutdown();
    join_background_calls();  // interrupted process-set calls end with the library
  });
  m.def("is_initialized", &hvd::is_initialized);
  // Process sets (docs/python.md, "Process sets"): add/remove are collective.
  // Interruptible waits (run_interruptible), as synchronize()'s.
  m.def("add_process_set", [](const std::vector<int>& ranks) {
    return run_interruptible<int32_t>([ranks] { return hvd::add_process_set(ranks); });
  });
  m.def("remove_process_set", [](int32_t id) {
    run_interruptible<void>([id] { hvd::remove_process_set(id); });
  });
  // The timeline (docs/python.md, "Timeline"): rank 0 writes it.
  m.def("start_timeline", [](const std::string& path, bool mark_cycles) {
    std::string io_error;  // a file that cannot be created: OSError
    {
      py::gil_scoped_release nogil;
      try {
        hvd::start_timeline(path, mark_cycles);
      } catch (const hvd::IoError& e) {
        io_error = e.what();
      }
    }
    if (!io_error.empty()) {
      PyErr_SetString(PyExc_OSError, io_error.c_str());
      throw py::error_already_set();
    }
  });
  m.def("stop_timeline", [] {
    py::gil_scoped_release nogil;
    hvd::stop_timeline();
  });
  m.def("dynamic_process_sets", [] { return hvd::context().settings().dynamic_process_sets; });
  m.attr("dynamic_process_sets_var") = kDynamicProcessSetsVar;
  m.def("process_set_ids", [] { return hvd::context().process_set_ids(); });
  m.def("process_set_ranks", [](int32_t id) { return hvd::context().process_set_ranks(id); });
  m.def("process_set_rank", [](int32_t id) { return hvd::context().process_set_rank(id); });
  m.def("process_set_size", [](int32_t id) { return hvd::context().process_set_size(id); });
  m.def("process_set_included", [](int32_t id) { return hvd::context().process_set_included(id); });
  m.def("rank", &hvd::rank);
  m.def("size", &hvd::size);
  m.def("local_rank", &hvd::local_rank);
  m.def("local_size", &hvd::local_size);
  m.def("cross_rank", &hvd::cross_rank);
  m.def("cross_size", &hvd::cross_size);

  // The launcher<->worker contract (hvd/common/job_env.h), so Python code
  // names variables by the header's constants instead of copying them:
  // job_env.RANK == "HOROVOD_RANK" (the constant kRank without its k, in
  // UPPER_SNAKE case), and job_env.groups maps every name to its part of the
  // contract ("rendezvous", "placement", ...).
  py::module_ job_env = m.def_submodule("job_env", "environment variables of the launcher<->worker contract");
  py::dict groups;
  for (const auto& v : hvd::job_env::kAll) {
    job_env.attr(v.key) = v.name;
    groups[v.name] = hvd::job_env::group_name(v.group);
  }
  job_env.attr("groups") = groups;

  m.def("elastic_enabled", &hvd::elastic::enabled);
  m.def("world_version", &hvd::elastic::world_version);
  m.def("hosts_updated", &hvd::elastic::hosts_updated);
  // Blocks until this worker is in a newer world (HOROVOD_ELASTIC_TIMEOUT);
  // the GIL is released, but Ctrl-C does not cut it short.
  // State.sync completed: hvdrun counts this worker as holding the state.
  m.def("elastic_state_synced", &hvd::elastic::state_synced);
  m.def("elastic_reset", [] {
    py::gil_scoped_release nogil;
    hvd::elastic::reset();
  });

  // Throws the named library error, so tests can check the translation above.
  m.def("_throw_for_test", [](const std::string& kind, const std::string& message) {
    if (kind == "peer_failure") throw hvd::elastic::PeerFailureError(message);
    if (kind == "hosts_updated") throw hvd::elastic::HostsUpdatedInterrupt(message);
    if (kind == "worker_removed") throw hvd::elastic::WorkerRemovedError(message);
    if (kind == "io") throw hvd::IoError(message);
    throw hvd::InvalidArgument("_throw_for_test: unknown kind '" + kind + "'");
  });

  py::class_<Handle>(m, "Handle")
      .def("poll", &Handle::poll)
      .def("wait", &wait_interruptible)
      .def_property_readonly("output_bytes", &Handle::output_bytes)
      .def_property_readonly("output_shape", &Handle::output_shape)
      .def_property_readonly("recv_splits", &Handle::recv_splits)
      .def_property_readonly("name", &Handle::name)
      .def_property_readonly("output_device", &Handle::output_device)
      // dst: host memory, or (device operations) memory on the output's device.
      .def("copy_output", [](const Handle& h, uintptr_t dst, size_t bytes) {
        if (bytes != h.output_bytes()) throw hvd::InvalidArgument("copy_output: destination size mismatch");
        if (bytes == 0) return;
        if (h.output_device() >= 0) {
          py::gil_scoped_release release;
          cuda::copy(mptr(dst), h.output(), bytes);
        } else {
          std::memcpy(mptr(dst), h.output(), bytes);
        }
      });

  // Build facts (docs/cuda.md): the CUDA component, whether device
  // operations can use NCCL (libnccl loaded at run time) and its version,
  // and the devices this process sees.
  m.def("cuda_built", &cuda::cuda_built);
  m.def("nccl_detected", &cuda::nccl_built);
  m.def("nccl_version", &cuda::nccl_version);
  m.def("cuda_device_count", &cuda::device_count);

  // device: -1 host memory, >= 0 the CUDA device of both buffers; stream: a
  // cudaStream_t (0: the legacy default stream) the operation runs after.
  m.def(
      "allreduce_async",
      [](const std::string& name, uintptr_t in, uintptr_t out, int dtype, std::vector<int64_t> shape, int op,
         double pre, double post, int device, uintptr_t stream, int32_t process_set) {
        AllreduceArgs a{name,         cptr(in), mptr(out), DataType(dtype), std::move(shape),
                        ReduceOp(op), pre,      post,      device,          sptr(stream)};
        a.process_set = process_set;
        return hvd::allreduce_async(a);
      },
      py::arg("name"), py::arg("input"), py::arg("output"), py::arg("dtype"), py::arg("shape"), py::arg("op"),
      py::arg("prescale"), py::arg("postscale"), py::arg("device") = kHostDevice, py::arg("stream") = 0,
      py::arg("process_set") = kGlobalProcessSet);
  // allgather, alltoall, reducescatter: device and stream as for allreduce;
  // the output of a device operation is device memory the handle owns
  // (copy_output copies it into a tensor of that device).
  m.def(
      "allgather_async",
      [](const std::string& name, uintptr_t in, int dtype, std::vector<int64_t> shape, int device, uintptr_t stream,
         int32_t process_set) {
        AllgatherArgs a{name, cptr(in), DataType(dtype), std::move(shape), {}, device, sptr(stream)};
        a.process_set = process_set;
        return hvd::allgather_async(a);
      },
      py::arg("name"), py::arg("input"), py::arg("dtype"), py::arg("shape"), py::arg("device") = kHostDevice,
      py::arg("stream") = 0, py::arg("process_set") = kGlobalProcessSet);
  m.def(
      "broadcast_async",
      [](const std::string& name, uintptr_t in, uintptr_t out, int dtype, std::vector<int64_t> shape, int root,
         int device, uintptr_t stream, int32_t process_set) {
        BroadcastArgs a{name, cptr(in), mptr(out), DataType(dtype), std::move(shape), root, device, sptr(stream)};
        a.process_set = process_set;
        return hvd::broadcast_async(a);
      },
      py::arg("name"), py::arg("input"), py::arg("output"), py::arg("dtype"), py::arg("shape"), py::arg("root"),
      py::arg("device") = kHostDevice, py::arg("stream") = 0, py::arg("process_set") = kGlobalProcessSet);
  m.def(
      "alltoall_async",
      [](const std::string& name, uintptr_t in, int dtype, std::vector<int64_t> shape, std::vector<int64_t> splits,
         int device, uintptr_t stream, int32_t process_set) {
        AlltoallArgs a{name, cptr(in), DataType(dtype), std::move(shape), std::move(splits), {}, device, sptr(stream)};
        a.process_set = process_set;
        return hvd::alltoall_async(a);
      },
      py::arg("name"), py::arg("input"), py::arg("dtype"), py::arg("shape"), py::arg("splits"),
      py::arg("device") = kHostDevice, py::arg("stream") = 0, py::arg("process_set") = kGlobalProcessSet);
  m.def(
      "reducescatter_async",
      [](const std::string& name, uintptr_t in, int dtype, std::vector<int64_t> shape, int op, double pre, double post,
         int device, uintptr_t stream, int32_t process_set) {
        ReducescatterArgs a{name, cptr(in), DataType(dtype), std::move(shape), ReduceOp(op), pre,
                            post, {},       device,          sptr(stream)};
        a.process_set = process_set;
        return hvd::reducescatter_async(a);
      },
      py::arg("name"), py::arg("input"), py::arg("dtype"), py::arg("shape"), py::arg("op"), py::arg("prescale"),
      py::arg("postscale"), py::arg("device") = kHostDevice, py::arg("stream") = 0,
      py::arg("process_set") = kGlobalProcessSet);
  m.def(
      "barrier_async",
      [](const std::string& name, int32_t process_set) {
        BarrierArgs a{name};
        a.process_set = process_set;
        return hvd::barrier_async(a);
      },
      py::arg("name"), py::arg("process_set") = kGlobalProcessSet);
  // Horovod's join; the handle's output is the last rank to join (int32).
  m.def("join_async", []() { return hvd::join_async(); });
}
