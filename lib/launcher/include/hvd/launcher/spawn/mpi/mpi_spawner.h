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
///
/// Should hvdrun die without tearing the job down (kill -9, the OOM killer),
/// a GroupGuard (process/group_guard.h) sends mpirun's process group SIGTERM,
/// and SIGKILL after `guard_grace`: PDEATHSIG alone reaches mpirun only, and
/// its ranks are its children (issue 21: ranks outlived a SIGKILLed hvdrun).
#include "hvd/common/io.h"
#include "hvd/launcher/spawn/mpi/mpi_launch.h"
#include "hvd/launcher/spawn/spawner.h"

#include <chrono>
#include <memory>

namespace hvd::launcher {

struct MpiSpawnerOptions {
  /// After hvdrun's death: SIGTERM to mpirun's group, SIGKILL this much later
  /// if anything of it is left (mpirun tears its ranks down in between).
  std::chrono::milliseconds guard_grace{3000};
};

std::unique_ptr<Spawner> make_mpi_spawner(MpiSpawnerOptions options = {});

}  // namespace hvd::launcher
