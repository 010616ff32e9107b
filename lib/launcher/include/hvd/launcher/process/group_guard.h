#pragma once
/// A watchdog that kills a child's whole process group when hvdrun dies,
/// even by SIGKILL (issue 21: `kill -9 hvdrun` left mpirun's ranks and hung
/// discovery scripts running, reparented to PID 1).
///
/// Why it is needed: PR_SET_PDEATHSIG reaches only hvdrun's direct child
/// (mpirun, the discovery shell); their children -- mpirun's ranks, a
/// script's `curl` -- get nothing, and a leader that dies at once (or
/// ignores the signal) leaves its group behind. Nothing in hvdrun itself
/// runs after SIGKILL, so the guard is a separate process: a `/bin/sh` that
/// blocks reading a pipe whose only write end hvdrun holds (close-on-exec,
/// and Subprocess closes every other descriptor in children). When hvdrun
/// goes away for any reason the read returns EOF and the guard sends SIGTERM
/// to the group, waits up to `grace` while it still exists, then SIGKILLs it.
///
/// Processes that leave the group are found by an environment entry: Open
/// MPI 4.1's mpirun puts every rank in a process group of its own (setpgid),
/// and when mpirun dies of its parent-death signal the ranks are reparented
/// to PID 1. With `env_entry` ("NAME=value", e.g. the job secret that only
/// this job's mpirun and ranks carry), every process whose environment holds
/// exactly that entry is signalled along with the group. The entry reaches
/// the guard through the pipe and grep reads it from stdin, so it is never
/// on a command line.
///
/// On the normal path the owner dismisses the guard (SIGKILL to the guard,
/// reaped) *before* reaping the group's leader: while the leader is an
/// unreaped zombie its pid, and so the group id, cannot be reused, so a
/// guard can never hit an unrelated group.
#include "hvd/common/io.h"
#include "hvd/launcher/process/subprocess.h"

#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

namespace hvd::launcher {

class GroupGuard {
 public:
  GroupGuard() = default;
  /// Starts a guard for process group `pgid` (the pid of a Subprocess leader
  /// its owner has not reaped). Throws as Subprocess::spawn does.
  /// `env_entry`: also signal every process whose environment holds exactly
  /// this "NAME=value" entry (one line; empty: the group only).
  /// `remove_after`: absolute paths the guard removes (rm -rf) once it has
  /// killed the group, each followed by an rmdir of its parent when that is
  /// left empty -- state the leader would have removed had it exited on its
  /// own (mpirun's session directory: when hvdrun dies, mpirun dies of its
  /// parent-death signal or a broken pipe and leaves it in /tmp). Only when
  /// the guard acts: a dismissed guard removes nothing.
  static GroupGuard start(pid_t pgid, std::chrono::milliseconds grace, const std::string& env_entry = {},
                          const std::vector<std::string>& remove_after = {});

  GroupGuard(GroupGuard&&) = default;
  GroupGuard& operator=(GroupGuard&& other) noexcept;
  GroupGuard(const GroupGuard&) = delete;
  GroupGuard& operator=(const GroupGuard&) = delete;
  /// Dismisses the guard.
  ~GroupGuard() { dismiss(); }

  bool active() const { return proc_.valid() && !proc_.reaped(); }
  /// The guard's own pid (tests), -1 when none.
  pid_t pid() const { return proc_.valid() ? proc_.pid() : -1; }
  /// Stops the guard without touching the guarded group. Idempotent.
  void dismiss();
  /// Lets the guard act now, without grace: SIGTERM then SIGKILL to the
  /// group and the marked processes; waits up to `timeout` for it to finish
  /// (then kills it). Call while the group's leader is still unreaped.
  void fire(std::chrono::milliseconds timeout);

 private:
  Subprocess proc_;
  UniqueFd lifeline_;  ///< our end of the guard's stdin; EOF there is hvdrun's death
};

}  // namespace hvd::launcher
