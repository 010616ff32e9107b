#include "hvd/launcher/job/check_build.h"

#include "hvd/common/error.h"
#include "hvd/launcher/process/capture.h"
#include "hvd/launcher/process/subprocess.h"

#include <fmt/format.h>

#include <cerrno>
#include <chrono>

#ifndef HVDRUN_VERSION
#error "HVDRUN_VERSION comes from the project version (lib/launcher/CMakeLists.txt)"
#endif
// Set by the top-level CMakeLists.txt from what the build tree contains.
#ifndef HVD_BUILT_PYTORCH
#define HVD_BUILT_PYTORCH 0
#endif
#ifndef HVD_BUILT_CUDA
#define HVD_BUILT_CUDA 0
#endif
#ifndef HVD_BUILT_NCCL_FOUND
#define HVD_BUILT_NCCL_FOUND 0
#endif

namespace hvd::launcher {

BuiltComponents built_components() {
  BuiltComponents b;
  b.pytorch_binding = HVD_BUILT_PYTORCH != 0;
  b.cuda = HVD_BUILT_CUDA != 0;
  b.nccl_found = HVD_BUILT_NCCL_FOUND != 0;
  return b;
}

WorkerPython probe_worker_python() {
  // One line back: "OK <path>" or "ERR <exception: first line>".
  static const char* const kScript =
      "import sys\n"
      "try:\n"
      "    import horovod.torch as m\n"
      "    print('OK', m.__file__)\n"
      "except BaseException as e:\n"
      "    text = str(e).splitlines()\n"
      "    print('ERR', type(e).__name__ + (': ' + text[0] if text else ''))\n";
  WorkerPython py;
  for (const char* name : {"python3", "python"}) {
    try {
      // Importing torch takes a few seconds on a cold cache; bounded all the same.
      const Captured run = run_captured({name, "-c", kScript}, Deadline::after(std::chrono::seconds(60)),
                                        fmt::format("'{} -c \"import horovod.torch\"'", name), 64 * 1024);
      py.interpreter = name;
      std::string last;  // the script's line is the last one (a warning may come first)
      for (std::size_t start = 0; start < run.output.size();) {
        const std::size_t nl = run.output.find('\n', start);
        const std::string line = run.output.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
        if (line.rfind("OK ", 0) == 0 || line.rfind("ERR ", 0) == 0) last = line;
        if (nl == std::string::npos) break;
        start = nl + 1;
      }
      if (last.rfind("OK ", 0) == 0) {
        py.imports_torch_binding = true;
        py.module_path = last.substr(3);
      } else if (!last.empty()) {
        py.problem = last.substr(4);
      } else {
        py.problem = fmt::format("it exited with status {} and said nothing", exit_status_of(run.wait_status));
      }
      return py;
    } catch (const SpawnError& e) {
      if (e.error_number() == ENOENT) continue;  // not on PATH: the next name
      py.interpreter = name;
      py.problem = e.what();
      return py;
    } catch (const TimeoutError& e) {
      py.interpreter = name;
      py.problem = e.what();
      return py;
    }
  }
  py.problem = "neither python3 nor python is on PATH";
  return py;
}

// Kept truthful: a box is ticked only for what this build really provides
// and the worker interpreter can use.
std::string render_check_build(const BuiltComponents& built, const WorkerPython& python) {
  auto box = [](bool on) { return on ? "[X]" : "[ ]"; };
  std::string s = "hvdrun v" HVDRUN_VERSION ":\n\n";
  s += "Available Frameworks:\n";
  s += "    [ ] TensorFlow\n";
  const std::string who = python.interpreter.empty() ? std::string("the worker interpreter") : python.interpreter;
  if (python.imports_torch_binding) {
    s += fmt::format("    [X] PyTorch ({} imports horovod.torch from {})\n", who, python.module_path);
  } else if (built.pytorch_binding) {
    s += fmt::format(
        "    [ ] PyTorch (built, but {} cannot import horovod.torch: {}; set PYTHONPATH as the install printed, "
        "docs/python.md)\n",
        who, python.problem);
  } else {
    s += "    [ ] PyTorch\n";
  }
  s += "    [ ] MXNet\n\n";
  s += "Available Controllers:\n";
  s += "    [X] MPI (hvdrun --mpi drives an installed mpirun: Open MPI, MPICH, Intel MPI)\n";
  s += "    [X] Gloo (hvdrun's native controller: Gloo-compatible rendezvous, HOROVOD_CONTROLLER=gloo)\n\n";
  s += "Available Tensor Operations:\n";
  // The CUDA component loads libnccl at run time (docs/cuda.md, "NCCL"):
  // ticked when it was also found at build time, i.e. present here.
  if (built.cuda && built.nccl_found) {
    s += "    [X] NCCL (device allreduce/broadcast for ranks on distinct GPUs; libnccl loaded at run time)\n";
  } else if (built.cuda) {
    s += "    [ ] NCCL (not found at build time; the CUDA component loads libnccl.so.2 at run time if present)\n";
  } else {
    s += "    [ ] NCCL\n";
  }
  s += "    [ ] DDL\n";
  s += "    [ ] CCL\n";
  s += "    [ ] MPI\n";
  s += "    [X] Gloo (hvdrun's Gloo-compatible CPU collectives over TCP, libhvd_collective)\n";
  s += std::string("    ") + box(built.cuda) +
       (built.cuda ? " CUDA (component built: own device reduction kernels, CUDA IPC; docs/cuda.md)\n" : " CUDA\n");
  s += "\nLauncher:\n";
  s += "    [X] local workers\n";
  s += "    [X] SSH (libssh2)\n";
  s += "    [X] elastic mode (--host-discovery-script)\n";
  return s;
}

std::string render_check_build() { return render_check_build(built_components(), probe_worker_python()); }

}  // namespace hvd::launcher
