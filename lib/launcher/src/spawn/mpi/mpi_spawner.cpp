// mpirun as a spawner, and the `mpirun --version` probe: the process half of
// hvdrun --mpi (contracts in mpi_spawner.h and mpi_launch.h).
#include "hvd/launcher/spawn/mpi/mpi_spawner.h"

#include "hvd/common/error.h"
#include "hvd/common/job_env.h"
#include "hvd/launcher/plan/worker_env.h"
#include "hvd/launcher/process/capture.h"
#include "hvd/launcher/process/group_guard.h"
#include "hvd/launcher/process/subprocess.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>

namespace hvd::launcher {

namespace {

std::vector<std::string> env_strings(const std::map<std::string, std::string>& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (const auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

std::string not_found_message(const std::string& mpirun) {
  return mpirun == "mpirun" ? std::string("mpirun not found on PATH; install Open MPI or drop --mpi")
                            : fmt::format("{} not found; install Open MPI or drop --mpi", mpirun);
}

/// Spawn failures of mpirun in the words users need.
std::string spawn_failure(const std::string& mpirun, const SpawnError& e) {
  if (e.error_number() == ENOENT) return not_found_message(mpirun);
  return fmt::format("cannot run {}: {}", mpirun, std::strerror(e.error_number()));
}

/// Where mpirun `pid` keeps its session directory on this host, given its
/// environment: Open MPI 4's <tmp>/ompi.<node>.<uid>/pid.<pid> and PRRTE's
/// (Open MPI 5) <tmp>/prte.<node>.<uid>/dvm.<pid>; <tmp> is
/// OMPI_MCA_orte_tmpdir_base / PRTE_MCA_prte_tmpdir_base, else TMPDIR,
/// TEMP, TMP, else /tmp; <node> the host name up to its first dot.
std::vector<std::string> mpirun_session_dirs(const std::map<std::string, std::string>& env, pid_t pid) {
  auto first = [&](std::initializer_list<const char*> names) -> std::string {
    for (const char* n : names) {
      auto it = env.find(n);
      if (it != env.end() && !it->second.empty() && it->second.front() == '/') return it->second;
    }
    return "/tmp";
  };
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0 || !host[0]) return {};
  std::string node(host);
  if (std::any_of(node.begin(), node.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); })) {
    node = node.substr(0, node.find('.'));
  }
  const unsigned uid = ::getuid();
  std::vector<std::string> out;
  std::string ompi = first({"OMPI_MCA_orte_tmpdir_base", "TMPDIR", "TEMP", "TMP"});
  std::string prte = first({"PRTE_MCA_prte_tmpdir_base", "TMPDIR", "TEMP", "TMP"});
  while (ompi.size() > 1 && ompi.back() == '/') ompi.pop_back();
  while (prte.size() > 1 && prte.back() == '/') prte.pop_back();
  if (ompi == "/") ompi.clear();
  if (prte == "/") prte.clear();
  out.push_back(fmt::format("{}/ompi.{}.{}/pid.{}", ompi, node, uid, pid));
  out.push_back(fmt::format("{}/prte.{}.{}/dvm.{}", prte, node, uid, pid));
  return out;
}

class MpiSpawner final : public Spawner {
 public:
  explicit MpiSpawner(MpiSpawnerOptions options) : options_(options) {}
  ~MpiSpawner() override { shutdown(); }

  void launch(const std::vector<WorkerSpec>& workers, EventSink& sink, Deadline) override {
    HVD_ENFORCE(workers.size() == 1, "MpiSpawner::launch takes the one mpirun command");
    HVD_ENFORCE(!thread_.joinable(), "MpiSpawner::launch may be called once");
    const WorkerSpec& spec = workers.front();
    rank_ = spec.slot.rank;
    SpawnOptions so;
    so.argv = spec.argv;
    so.env = env_strings(spec.env);
    so.parent_death_signal = SIGTERM;
    so.stdin_fd = ChildFd::dev_null();
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      proc_ = Subprocess::spawn(so);
    } catch (const SpawnError& e) {
      throw LaunchError(spec.slot.hostname, spawn_failure(spec.argv.front(), e));
    } catch (const Error& e) {
      throw LaunchError(spec.slot.hostname, e.what());
    }
    // PDEATHSIG reaches mpirun alone; its ranks (in its process group) and
    // whatever mpirun leaves behind when it dies of that signal need the
    // guard to go with hvdrun, even after kill -9 (group_guard.h).
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      // Open MPI puts each rank in a process group of its own: the ranks are
      // found by the job secret in their environment (mpirun passes it on).
      auto secret = spec.env.find(job_env::kSecret);
      // When the guard has to act, mpirun died without cleaning up (its
      // parent-death signal, then a broken pipe to hvdrun): the guard
      // removes its session directory too.
      guard_ = GroupGuard::start(proc_.pid(), options_.guard_grace,
                                 secret == spec.env.end() || secret->second.empty()
                                     ? std::string()
                                     : std::string(job_env::kSecret) + "=" + secret->second,
                                 mpirun_session_dirs(spec.env, proc_.pid()));
    } catch (const Error& e) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        proc_.kill_group_and_reap();
      }
      throw LaunchError(spec.slot.hostname,
                        fmt::format("cannot start the guard of mpirun's process group: {}", e.what()));
    }
    thread_ = std::thread([this, &sink] { wait_for_exit(sink); });
  }

  void signal(int rank, int sig) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (rank != rank_ || !proc_.valid() || proc_.reaped()) return;
    if (sig == SIGKILL) {
      proc_.signal_group(SIGKILL);
    } else {
      proc_.signal(sig);
    }
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (proc_.valid() && !proc_.reaped()) proc_.signal_group(SIGKILL);
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  void wait_for_exit(EventSink& sink) {
    for (;;) {
      if (proc_.pidfd() >= 0) {
        pollfd p{proc_.pidfd(), POLLIN, 0};
        ::poll(&p, 1, 200);
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      if (proc_.exited()) break;
    }
    int status;
    {
      // What mpirun left goes with it: nothing outlives the job. Its ranks
      // are in process groups of their own, so the guard acts now (on the
      // group and on every process with the job's secret), while mpirun is
      // an unreaped zombie and its group id cannot be reused.
      std::lock_guard<std::mutex> lock(mutex_);
      guard_.fire(std::chrono::seconds(5));
      status = proc_.kill_group_and_reap();
    }
    WorkerExit e;
    e.rank = rank_;
    e.signal = signal_of(status);
    e.status = exit_status_of(status);
    sink.on_exit(e);
  }

  MpiSpawnerOptions options_;
  std::mutex mutex_;  // proc_'s signal/reap vs the waiter
  Subprocess proc_;
  GroupGuard guard_;  ///< kills mpirun's group should hvdrun die
  int rank_ = 0;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Spawner> make_mpi_spawner(MpiSpawnerOptions options) { return std::make_unique<MpiSpawner>(options); }

MpiInfo identify_mpirun(const std::string& mpirun, Deadline deadline) {
  Captured run;
  try {
    run = run_captured({mpirun, "--version"}, deadline, fmt::format("'{} --version'", mpirun));
  } catch (const SpawnError& e) {
    throw InvalidArgument(spawn_failure(mpirun, e));
  } catch (const TimeoutError& e) {
    throw TimeoutError(fmt::format("{}; is {} working?", e.what(), mpirun));
  }
  const std::string& text = run.output;
  const int status = run.wait_status;
  MpiInfo info;
  info.mpirun = mpirun;
  info.impl = detect_mpi_impl(text);
  info.version_line = mpi_version_line(text);
  const int code = exit_status_of(status);
  if (code != 0) {
    throw InvalidArgument(fmt::format("'{} --version' failed with status {}: {}", mpirun, code, info.version_line));
  }
  return info;
}

MpiInfo probe_mpirun(const std::string& mpirun, Deadline deadline) {
  MpiInfo info = identify_mpirun(mpirun, deadline);
  if (info.impl == MpiImpl::Unknown) {
    throw InvalidArgument(
        fmt::format("unsupported MPI implementation '{}'; hvdrun --mpi supports Open MPI, "
                    "MPICH and Intel MPI (or drop --mpi)",
                    info.version_line));
  }
  return info;
}

}  // namespace hvd::launcher
