#include "hvd/launcher/job/check_build.h"

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

// Kept truthful: a box is ticked only for what this build really provides.
std::string render_check_build(const BuiltComponents& built) {
  auto box = [](bool on) { return on ? "[X]" : "[ ]"; };
  std::string s = "hvdrun v" HVDRUN_VERSION ":\n\n";
  s += "Available Frameworks:\n";
  s += "    [ ] TensorFlow\n";
  s += std::string("    ") + box(built.pytorch_binding) +
       (built.pytorch_binding ? " PyTorch (hvdcomm.torch binding; horovod.torch compatible)\n" : " PyTorch\n");
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

std::string render_check_build() { return render_check_build(built_components()); }

}  // namespace hvd::launcher
