#include "hvd/launcher/spawn/srun/srun_launch.h"

namespace hvd::launcher {

std::vector<std::string> srun_agent_command(const std::string& node, const std::vector<std::string>& agent) {
  std::vector<std::string> cmd = {"srun",     "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=" + node,
                                  "--mpi=none", "--quiet",   "--unbuffered", "--job-name=hvdrun-agent"};
  cmd.insert(cmd.end(), agent.begin(), agent.end());
  return cmd;
}

}  // namespace hvd::launcher
