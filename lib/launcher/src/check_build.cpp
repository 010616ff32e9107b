#include "hvd/launcher/launcher.h"

#ifndef HVDRUN_VERSION
#define HVDRUN_VERSION "0.1.0"
#endif

namespace hvd::launcher {

// Kept truthful: a box is ticked only for what this build really provides.
std::string render_check_build() {
  return "hvdrun v" HVDRUN_VERSION
         ":\n"
         "\n"
         "Available Frameworks:\n"
         "    [ ] TensorFlow\n"
         "    [ ] PyTorch\n"
         "    [ ] MXNet\n"
         "\n"
         "Available Controllers:\n"
         "    [X] MPI (hvdrun --mpi drives an installed mpirun: Open MPI, MPICH, Intel MPI)\n"
         "    [X] Gloo (hvdrun's native controller: Gloo-compatible rendezvous, HOROVOD_CONTROLLER=gloo)\n"
         "\n"
         "Available Tensor Operations:\n"
         "    [ ] NCCL\n"
         "    [ ] DDL\n"
         "    [ ] CCL\n"
         "    [ ] MPI\n"
         "    [X] Gloo (hvdrun's Gloo-compatible CPU collectives over TCP, libhvd_collective)\n"
         "\n"
         "Launcher:\n"
         "    [X] local workers\n"
         "    [X] SSH (libssh2)\n"
         "    [ ] elastic mode (issue 5)\n";
}

}  // namespace hvd::launcher
