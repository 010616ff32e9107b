#pragma once
/// The Supervisor owns the job's failure policy (PRRTE's errmgr, ninja's
/// build loop) and never knows which kind of Spawner it drives, so unit tests
/// run it against a FakeSpawner without starting a process.
///
/// Policy (docs/launching.md):
///  * every host's spawner is launched in parallel within the start timeout;
///    a LaunchError prints "hvdrun: error: <host>: <cause>", stops whatever
///    started and ends the job with exit_code::kLaunch;
///  * the first worker that exits non-zero, is killed by a signal, or is lost
///    is reported (rank, host, plain-words status, its last stderr lines);
///    every other worker then gets SIGTERM and, after `kill_grace`, SIGKILL;
///    hvdrun exits with that worker's status (128+N for signal N), or
///    kLaunch for a lost worker (its real status is unknown);
///  * a signal hvdrun receives while hosts are still connecting cancels their
///    launch (Spawner::cancel_launch), stops what started and gives 128+N;
///  * a signal hvdrun receives (interrupt()) is forwarded to every worker;
///    SIGKILL follows after `kill_grace`, or at once on a second signal; the
///    exit code is 128+N (130 SIGINT, 143 SIGTERM, 129 SIGHUP);
///  * every worker exiting 0 gives 0.
#include "hvd/launcher/spawn/spawner.h"
#include "hvd/launcher/supervise/output.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hvd::launcher {

class EventLog;

/// One host's share of the job and the spawner that starts it.
struct HostLaunch {
  std::string host;
  std::unique_ptr<Spawner> spawner;
  std::vector<WorkerSpec> workers;
  /// Launch on the thread that calls Supervisor::run instead of a helper
  /// thread: the local spawner ties its agents' lifetime (PDEATHSIG) to the
  /// launching thread.
  bool launch_on_caller_thread = false;
  /// What the workers stand for in the start and success lines when they
  /// are not ranks themselves: "mpirun (4 ranks on 2 hosts)". Empty: the
  /// lines count workers ("started 4 workers on HOST").
  std::string stands_for;
};

struct SupervisorOptions {
  /// --start-timeout: every host must be up within this.
  std::chrono::milliseconds start_timeout{30000};
  /// SIGTERM -> SIGKILL grace on teardown.
  std::chrono::milliseconds kill_grace{3000};
  /// After SIGKILL, how long to wait for exits before giving up on a worker
  /// (its spawner's shutdown() still guarantees it is gone).
  std::chrono::milliseconds kill_wait{5000};
  /// --events-file (may be null; must outlive run()).
  EventLog* events = nullptr;
};

class Supervisor final : public EventSink {
 public:
  /// `output` (may be null) receives worker output and supplies the stderr
  /// tails for failure reports; it must outlive run().
  Supervisor(SupervisorOptions options, OutputRouter* output);

  /// Launches, supervises to the end, shuts every spawner down; returns
  /// hvdrun's exit code. Call once.
  int run(std::vector<HostLaunch> hosts);

  /// A signal hvdrun received (SIGINT, SIGTERM, SIGHUP). Thread-safe; may be
  /// called before or during run().
  void interrupt(int sig);

  // EventSink (called from spawner threads).
  void on_output(int rank, Stream stream, const char* data, std::size_t len) override;
  void on_exit(const WorkerExit& exit) override;

 private:
  struct Event {
    bool is_exit = false;
    WorkerExit exit;
    int sig = 0;
  };

  void launch_all(std::vector<HostLaunch>& hosts, std::vector<std::string>& errors);
  void shutdown_all(std::vector<HostLaunch>& hosts);
  void report_failure(const WorkerExit& e, const std::string& who);

  SupervisorOptions options_;
  OutputRouter* output_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  /// The spawners whose launch() is in progress: a signal cancels them
  /// (Spawner::cancel_launch), so hvdrun stops within a second even while a
  /// host is still connecting.
  std::vector<Spawner*> launching_;
  int signal_during_launch_ = 0;
};

}  // namespace hvd::launcher
