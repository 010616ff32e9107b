#pragma once
/// The one place hvdrun starts and stops processes (ninja's Subprocess):
/// the local spawner's agents, the agent's worker, mpirun, the discovery
/// script and `mpirun --version` all go through Subprocess::spawn.
///
/// Between fork and exec the child only makes async-signal-safe calls, in a
/// fixed order: new process group, parent-death signal (and a check that the
/// parent is still the one that forked it), signal mask and dispositions back
/// to defaults, stdin/stdout/stderr wired as asked, every other descriptor
/// closed, chdir, exec. Everything the child needs (argv, envp, the list of
/// paths a PATH search tries) is built before fork, so spawning is safe from
/// a multi-threaded launcher. A chdir or exec failure is reported back
/// through a close-on-exec pipe and thrown as SpawnError; the failed child
/// is reaped before spawn returns. Descriptors are closed with close_range
/// (Linux >= 5.9), else one close() per descriptor up to RLIMIT_NOFILE.
///
/// Why not Boost.Process: docs/design.md ("process/").
#include "hvd/common/error.h"
#include "hvd/common/io.h"

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

/// What a child's standard descriptor is connected to.
struct ChildFd {
  enum class Kind { Inherit, DevNull, Fd };
  Kind kind = Kind::Inherit;
  int fd = -1;  ///< with Kind::Fd: dup2'ed onto the standard descriptor (the caller keeps its copy)
  static ChildFd inherit() { return {}; }
  static ChildFd dev_null() { return {Kind::DevNull, -1}; }
  static ChildFd from(int fd) { return {Kind::Fd, fd}; }
};

struct SpawnOptions {
  /// argv[0] is the program: a path (contains '/') or a name searched in
  /// `search_path`. Must not be empty (InvalidArgument).
  std::vector<std::string> argv;
  /// The file to execute when it is not argv[0] (execve's path; argv[0] is
  /// then only the name the process shows, as a login shell's "-sh"). A
  /// path or a name searched as argv[0] would be. Empty: argv[0].
  std::string program;
  /// The child's environment as NAME=value strings; nullopt: this process's.
  std::optional<std::vector<std::string>> env;
  /// PATH searched for a program name without '/': nullopt means the PATH of
  /// `env` when given, else this process's PATH (execvp's default list,
  /// "/bin:/usr/bin", when unset). An empty entry is the current directory.
  /// As with execvp, a candidate that is not there or not permitted (EACCES)
  /// is skipped; EACCES is reported only if nothing else was found; any other
  /// error stops the search. A script without a #! line is run with /bin/sh.
  std::optional<std::string> search_path;
  /// chdir before exec ("" = stay); a failure is SpawnError{Stage::Chdir}.
  std::string cwd;
  /// Leads its own process group (pgid == pid), set on both sides of fork so
  /// signal_group works as soon as spawn returns. Keeps a terminal's Ctrl-C
  /// from reaching the child directly: hvdrun forwards signals itself.
  /// Without it, the *_group calls act on the child alone.
  bool new_process_group = true;
  /// PR_SET_PDEATHSIG: sent to the child when the *thread* that spawned it
  /// exits (0 = none). The child exits at once if its parent already died.
  int parent_death_signal = 0;
  /// Kind::Fd descriptors must be open (checked before fork:
  /// InvalidArgument); their close-on-exec flag does not matter.
  ChildFd stdin_fd = ChildFd::dev_null();
  ChildFd stdout_fd = ChildFd::inherit();
  ChildFd stderr_fd = ChildFd::inherit();
  /// Descriptors the child keeps besides 0, 1, 2 (the others are closed even
  /// when they lack O_CLOEXEC). The child clears their close-on-exec flag, so
  /// the caller can create every descriptor with O_CLOEXEC (no leak into a
  /// child another thread spawns) and name here the ones this child gets.
  /// Must be open (checked before fork: InvalidArgument).
  std::vector<int> keep_fds;
};

/// Wiring the descriptors, chdir or exec failed in the child.
class SpawnError : public Error {
 public:
  /// Setup: a dup2/fcntl on the standard descriptors or keep_fds failed
  /// (not expected once the descriptors were checked before fork).
  enum class Stage { Setup, Chdir, Exec };
  SpawnError(Stage stage, int error_number, const std::string& message)
      : Error(message), stage_(stage), errno_(error_number) {}
  Stage stage() const { return stage_; }
  int error_number() const { return errno_; }
  /// 127 for a program that was not found, 126 for other exec failures (the
  /// shell's convention), 1 for a chdir or setup failure.
  int exit_status() const;

 private:
  Stage stage_;
  int errno_;
};

/// One child process. Move-only. Destroying a Subprocess that was not reaped
/// kills its process group with SIGKILL and reaps it: a forgotten child never
/// outlives its owner.
class Subprocess {
 public:
  /// Starts the child. Throws SpawnError (chdir/exec failed; the child is
  /// already reaped), IoError (pipe/fork failed: "fork failed: <reason>") or
  /// InvalidArgument (empty argv, a descriptor that is not open).
  static Subprocess spawn(const SpawnOptions& options);

  Subprocess() = default;
  Subprocess(Subprocess&& other) noexcept;
  Subprocess& operator=(Subprocess&& other) noexcept;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess();

  pid_t pid() const { return pid_; }
  bool valid() const { return pid_ > 0; }
  /// A pidfd (readable once the child exits) for poll(), or -1 where the
  /// kernel has none (or once reaped); then poll exited() on a short timer.
  int pidfd() const { return pidfd_.get(); }

  /// True once the child has exited. Does not reap it: an unreaped child
  /// keeps its pid, and so its process-group id, from being reused.
  bool exited() const;
  /// Reaps the child if it has exited; returns its wait status. A child that
  /// someone else reaped (waitpid(-1) elsewhere, SIGCHLD ignored) counts as
  /// reaped with status 0, and a warning says its status was lost.
  std::optional<int> try_reap();
  /// Blocks until the child exits; returns its wait status.
  int reap();
  /// Waits until `deadline` for the child to exit and reaps it; nullopt if
  /// it is still running then.
  std::optional<int> reap_until(Deadline deadline);
  bool reaped() const { return reaped_; }
  /// The wait status once reaped.
  int wait_status() const { return status_; }

  /// Sends `sig` to the child only. No-op once reaped.
  void signal(int sig) const;
  /// Sends `sig` to the child's process group (its pgid is its pid). No-op
  /// once reaped, so a reused pid is never hit.
  void signal_group(int sig) const;
  /// SIGKILL to the whole group, then reaps the leader and, without
  /// blocking, any other member that is our child. Returns the leader's wait
  /// status. Idempotent.
  int kill_group_and_reap();
  /// SIGTERM to the group; once the leader has exited, or `grace` is over,
  /// SIGKILL to whatever is left of the group, then reaps (as
  /// kill_group_and_reap); returns the leader's wait status.
  int terminate_group(std::chrono::milliseconds grace);

 private:
  /// Waits (without reaping) until the child has exited or `deadline`.
  bool wait_exited_until(Deadline deadline) const;
  void record(int status);

  pid_t pid_ = -1;
  UniqueFd pidfd_;
  bool group_leader_ = false;  ///< spawned with new_process_group
  bool reaped_ = false;
  int status_ = 0;
};

/// A wait status as a shell reports it: the exit code, or 128+N for signal N
/// (1 for a stopped/continued status, which reap() never returns).
int exit_status_of(int wait_status);
/// The terminating signal of a wait status, or 0.
int signal_of(int wait_status);

}  // namespace hvd::launcher
