// Drives run_mpi_job directly (the path `hvdrun --mpi` takes once wired), so
// the real Open MPI path is tested independently of the CLI:
//   mpi_job_driver -np N -H host:slots[,host:slots] [--dry-run] -- command...
#include "hvd/launcher/plan/worker_env.h"
#include "hvd/launcher/job/modes.h"
#include "hvd/launcher/spawn/mpi/mpi_launch.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>

using namespace hvd::launcher;

int main(int argc, char** argv) {
  Options o;
  o.engine = Engine::Mpi;
  o.kill_grace = std::chrono::milliseconds(1000);
  int np = 0;
  bool dry = false;
  std::string hosts = "localhost:1";
  int i = 1;
  for (; i < argc && std::strcmp(argv[i], "--") != 0; ++i) {
    if (std::strcmp(argv[i], "-np") == 0 && i + 1 < argc)
      np = std::atoi(argv[++i]);
    else if (std::strcmp(argv[i], "-H") == 0 && i + 1 < argc)
      hosts = argv[++i];
    else if (std::strcmp(argv[i], "--dry-run") == 0)
      dry = true;
    else if (std::strcmp(argv[i], "--mpi-args") == 0 && i + 1 < argc)
      o.mpi_args = argv[++i];
  }
  for (++i; i < argc; ++i) o.command.push_back(argv[i]);
  JobPlan plan;
  std::stringstream hs(hosts);
  std::string item;
  while (std::getline(hs, item, ',')) {
    auto c = item.rfind(':');
    plan.hosts.push_back({item.substr(0, c), std::stoi(item.substr(c + 1))});
  }
  int rank = 0;
  for (const auto& h : plan.hosts) {
    for (int s = 0; s < h.slots && rank < np; ++s, ++rank) {
      WorkerSpec w;
      w.slot.hostname = h.name;
      w.slot.rank = rank;
      w.slot.local_rank = s;
      plan.workers.push_back(w);
    }
  }
  try {
    auto env = mpi_job_env(o, current_environment());
    if (dry) {
      std::fputs(render_mpi_dry_run(probe_mpirun(), o, plan, env, geteuid() == 0).c_str(), stdout);
      return 0;
    }
    return run_mpi_job(o, plan, env);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_job_driver: error: %s\n", e.what());
    return 2;
  }
}
