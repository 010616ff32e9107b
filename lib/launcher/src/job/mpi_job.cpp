// The mpirun mode: the job's services, one mpirun as the only "worker" of
// the Supervisor (spawn/mpi/mpi_spawner.h; contracts in
// spawn/mpi/mpi_launch.h). Its --dry-run is the DryRun mode's (job/modes.cpp).
#include "hvd/common/error.h"
#include "hvd/launcher/job/job_services.h"
#include "hvd/launcher/job/modes.h"
#include "hvd/launcher/plan/worker_env.h"
#include "hvd/launcher/process/report.h"
#include "hvd/launcher/process/shell.h"
#include "hvd/launcher/spawn/mpi/mpi_launch.h"
#include "hvd/launcher/spawn/mpi/mpi_spawner.h"
#include "hvd/launcher/supervise/output.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <chrono>

namespace hvd::launcher {

namespace {

/// The mpirun mode inside JobServices::run: a set-up step that fails throws
/// JobError.
int mpi_job(JobServices& job, const Options& options, const JobPlan& plan,
            const std::map<std::string, std::string>& job_env, const MpiInfo* probed) {
  if (plan.workers.empty()) {
    spdlog::warn("nothing to run: the job has no workers");
    return exit_code::kOk;
  }
  MpiInfo info;
  try {
    info = probed ? *probed : probe_mpirun("mpirun");
  } catch (const Error& e) {
    throw JobError(exit_code::kLaunch, e.what());
  }
  job.open_events();
  // Ranks may be on any host mpirun reaches; when every host is local the
  // address is 127.0.0.1 and the store stays on loopback.
  const std::string driver_addr = job.choose_address(plan.hosts);
  job.start_store(driver_addr);

  std::map<std::string, std::string> exported = job_env;
  for (const auto& [k, v] : job.rendezvous_env(driver_addr)) exported[k] = v;
  std::vector<std::string> cmd;
  std::map<std::string, std::string> launcher_env;
  try {
    cmd = build_mpirun_command(info, options, plan, exported, geteuid() == 0);
    launcher_env = mpirun_launcher_env(info, options);
  } catch (const InvalidArgument& e) {
    throw JobError(exit_code::kUsage, e.what());
  }
  for (const auto& line : mpi_unapplied_options(info, options)) spdlog::warn("{}", line);
  // No output router: mpirun multiplexes the ranks' output itself (and
  // honours --output-filename through its own flag). Its directories are
  // made here first (after the command line, so a usage error leaves
  // nothing behind): Open MPI 4.1 hangs when it cannot make the directory,
  // and Hydra (MPICH, Intel MPI) makes none and aborts on the first line a
  // rank writes (mpi_launch.h: mpi_output_directories).
  if (options.output_filename) {
    try {
      for (const auto& dir : mpi_output_directories(info, *options.output_filename, plan.workers.size())) {
        make_output_directories(dir);
      }
    } catch (const IoError& e) {
      throw JobError(exit_code::kUsage, std::string("--output-filename: ") + e.what());
    }
  }
  WorkerSpec mpirun;
  mpirun.label = "mpirun";
  mpirun.slot.hostname = "localhost";
  mpirun.argv = cmd;
  mpirun.env = current_environment();
  for (const auto& [k, v] : exported) mpirun.env[k] = v;
  for (const auto& [k, v] : launcher_env) mpirun.env[k] = v;
  // Open MPI refuses root without these even when the flag is given by an
  // older mpirun; harmless elsewhere.
  if (geteuid() == 0 && info.impl == MpiImpl::OpenMpi) {
    mpirun.env.emplace("OMPI_ALLOW_RUN_AS_ROOT", "1");
    mpirun.env.emplace("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  }
  spdlog::info("{} ranks through {} on {} host{} (store {}:{})", plan.workers.size(), mpi_impl_name(info.impl),
               plan.hosts.size(), plan.hosts.size() == 1 ? "" : "s", driver_addr, job.store_port());
  spdlog::debug("mpirun command: {}", shell_join(cmd));
  job.emit("job_start", {{"mode", "mpi"},
                         {"np", static_cast<int>(plan.workers.size())},
                         {"mpi_implementation", mpi_impl_name(info.impl)},
                         {"store", driver_addr + ":" + std::to_string(job.store_port())}});

  std::vector<HostLaunch> hosts(1);
  hosts[0].host = "localhost";
  hosts[0].spawner = make_mpi_spawner({options.kill_grace});
  hosts[0].workers = {std::move(mpirun)};
  // The lines count ranks, not the one mpirun process.
  hosts[0].stands_for = fmt::format("mpirun ({} rank{} on {} host{})", plan.workers.size(),
                                    plan.workers.size() == 1 ? "" : "s", plan.hosts.size(),
                                    plan.hosts.size() == 1 ? "" : "s");
  // PR_SET_PDEATHSIG follows the thread that spawned mpirun: this one.
  hosts[0].launch_on_caller_thread = true;
  // mpirun needs time to tear its remote ranks down after a forwarded signal.
  return job.supervise(std::move(hosts), options.kill_grace + std::chrono::seconds(5));
}

}  // namespace

int run_mpi_job(const Options& options, const JobPlan& plan, const std::map<std::string, std::string>& job_env,
                const MpiInfo* probed) {
  JobServices job(job_services_options(options));
  return job.run([&] { return mpi_job(job, options, plan, job_env, probed); });
}

}  // namespace hvd::launcher
