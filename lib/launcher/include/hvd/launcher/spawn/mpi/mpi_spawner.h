#pragma once
/// hvdrun --mpi's spawner: one mpirun starts every rank (mpi_launch.h builds
/// its command line), supervised like any other spawner.
///
/// To the Supervisor the whole mpirun is one worker: launch() takes exactly
/// one WorkerSpec whose argv is the mpirun command and whose env is mpirun's
/// complete environment. mpirun runs in its own process group, stdin from
/// /dev/null, with PR_SET_PDEATHSIG (SIGTERM) tied to the launching thread;
/// its output is passed through untouched (mpirun multiplexes and tags the
/// ranks' lines itself). signal() sends SIGKILL to mpirun's whole process
/// group and any other signal to mpirun alone, which tears its ranks down.
/// When mpirun exits, whatever it left in its process group is killed, then
/// on_exit reports mpirun's status as the worker's.
#include "hvd/common/io.h"
#include "hvd/launcher/spawn/mpi/mpi_launch.h"
#include "hvd/launcher/spawn/spawner.h"

#include <memory>

namespace hvd::launcher {

std::unique_ptr<Spawner> make_mpi_spawner();

}  // namespace hvd::launcher
