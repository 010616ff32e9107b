#pragma once
/// The seam between supervision and process launching (cf. ninja's
/// CommandRunner): the Supervisor drives Spawners and never knows whether a
/// worker is a local child, an SSH channel or a fake in a unit test.
///
/// Every real worker runs under an hvdrun agent (`hvdrun-agent`, one per
/// host and launch, see agent.h), locally over a socket and a pipe and
/// remotely over one SSH channel, so that "the launcher went away"
/// (EOF) always kills every worker's whole process group: no orphans, even
/// after `kill -9 hvdrun`. `rank` below is the worker's id for its agent
/// (its serial in elastic jobs).
#include "hvd/common/io.h"
#include "hvd/launcher/plan/job_plan.h"

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace hvd::launcher {

enum class Stream { Stdout, Stderr };

struct WorkerExit {
  int rank = -1;
  /// Exit status as a shell reports it: the code, or 128+signal when the
  /// worker was killed by a signal.
  int status = 0;
  /// The signal that killed it (0 if it exited).
  int signal = 0;
  /// Non-empty when the launcher lost the worker rather than seeing it exit
  /// (e.g. "SSH connection to node2 lost").
  std::string lost_reason;
};

/// Receives worker output and exits. Called from spawner threads; must be
/// thread-safe. Output chunks are arbitrary byte ranges, not lines.
class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void on_output(int rank, Stream stream, const char* data, std::size_t len) = 0;
  /// Exactly once per started worker, after its last on_output.
  virtual void on_exit(const WorkerExit& exit) = 0;
};

/// Thrown by Spawner::launch when a host cannot be used. The message is one
/// line naming the host and the cause ("node2: connection refused on port 22").
class LaunchError : public std::runtime_error {
 public:
  LaunchError(std::string host, const std::string& message) : std::runtime_error(message), host_(std::move(host)) {}
  const std::string& host() const { return host_; }

 private:
  std::string host_;
};

class Spawner {
 public:
  virtual ~Spawner() = default;
  /// Starts the workers (all on hosts this spawner serves) and returns once
  /// each is running; output and exits then arrive on `sink`. Throws
  /// LaunchError within `deadline` when a host cannot be reached.
  virtual void launch(const std::vector<WorkerSpec>& workers, EventSink& sink, Deadline deadline) = 0;
  /// Delivers `sig` to the worker's process group (no-op if it has exited).
  virtual void signal(int rank, int sig) = 0;
  /// Tears down connections and reaps; after this no worker of this spawner
  /// runs. Idempotent.
  virtual void shutdown() = 0;
  /// Makes a launch() that is still connecting (on another thread) give up
  /// within about 100 ms by throwing LaunchError, and a later launch() throw
  /// at once. Thread-safe; workers already running are not affected (call
  /// shutdown() for them). hvdrun calls it when it receives a signal.
  virtual void cancel_launch() {}
};

}  // namespace hvd::launcher
