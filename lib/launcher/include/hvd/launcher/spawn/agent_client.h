#pragma once
/// The launcher's side of one agent connection (agent_protocol.h), shared
/// by the local spawner (a socket and a pipe; srun's streams) and the SSH
/// spawner (one channel per host): it frames what hvdrun sends and turns
/// what the agent sends into EventSink calls. No I/O of its own: the
/// spawner reads and writes, on its one reader thread.
#include "hvd/launcher/plan/job_plan.h"
#include "hvd/launcher/spawn/agent_protocol.h"
#include "hvd/launcher/spawn/spawner.h"

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace hvd::launcher {

/// Hello, one Spawn per worker (id = its rank, or serial in elastic jobs),
/// Done: what hvdrun sends an agent first. Throws LaunchError naming
/// `host` and the rank when a worker cannot be framed (over 16 MiB).
std::string agent_launch_frames(const std::string& host, const std::vector<WorkerSpec>& workers,
                                std::chrono::milliseconds kill_grace);

/// The Signal frame for one worker, or "" when the protocol cannot carry
/// `sig` (only SIGINT, SIGTERM, SIGHUP, SIGKILL travel).
std::string agent_signal_frame(int rank, int sig);

class AgentClient {
 public:
  /// `where` names the agent in lost reasons ("localhost", a host name).
  AgentClient(std::string where, EventSink& sink, const std::vector<WorkerSpec>& workers);

  /// Bytes from the agent's stdout: delivers Output and Exit to the sink.
  /// Returns false once the stream is unusable (a frame that does not
  /// decode, an Error frame, a protocol version hvdrun does not speak): the
  /// caller then closes the agent's stdin, which stops its workers, and
  /// calls finish(). error() says why.
  bool on_bytes(const char* data, std::size_t len);

  /// The agent's stream ended (it exited, or the connection is gone): every
  /// worker not yet reported exits with `status` (and `signal`) and a lost
  /// reason built from `why` and error(). Idempotent.
  void finish(int status, int signal, const std::string& why);

  bool all_reported() const { return unreported_ == 0; }
  bool reported(int rank) const;
  /// Empty while the stream is fine.
  const std::string& error() const { return error_; }

 private:
  std::string where_;
  EventSink& sink_;
  AgentFrameReader reader_;
  std::map<int, bool> reported_;  // rank -> Exit delivered
  std::size_t unreported_ = 0;
  bool hello_ = false;
  std::string error_;
};

}  // namespace hvd::launcher
