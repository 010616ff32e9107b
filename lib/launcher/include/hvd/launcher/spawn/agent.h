#pragma once
/// The hvdrun agent: `hvdrun --agent` runs one worker and guarantees it dies
/// when the launcher goes away. Spawners start it with stdin connected to the
/// launcher (a pipe locally, the SSH channel remotely); the worker inherits
/// the agent's stdout and stderr.
///
/// Protocol on the agent's stdin:
///  1. one frame (hvd::write_frame: 4-byte LE length + payload, at most
///     16 MiB) holding JSON {"argv": [...], "env": {"NAME": "value", ...},
///     "cwd": "..."}. The environment travels here, never on a command line
///     that `ps` shows.
///  2. then single control bytes: 'I' SIGINT, 'T' SIGTERM, 'H' SIGHUP,
///     'K' SIGKILL -- delivered to the worker's process group.
///  3. EOF on stdin (launcher died, channel closed): SIGTERM to the group,
///     SIGKILL after the grace period (HVDRUN_KILL_GRACE_MS, default 3000).
/// Exit status: the worker's exit code; 128+N if it was killed by signal N;
/// 127 with "hvdrun: <cmd>: command not found" on stderr if exec failed
/// with ENOENT (126 for other exec failures).
#include "hvd/launcher/plan/job_plan.h"

#include <csignal>
#include <string>

namespace hvd::launcher {

int agent_main(int argc, char** argv);

/// The JSON payload of the spec frame for `worker` (argv, env, cwd), as the
/// agent expects it; spawners send it with hvd::write_frame. Environment
/// values that are not valid UTF-8 have the bad bytes replaced by U+FFFD.
std::string encode_agent_spec(const WorkerSpec& worker);

/// The agent's exit status when the agent itself failed (unreadable spec,
/// fork failure) -- distinct from the worker statuses it passes through.
inline constexpr int kAgentFailureStatus = 125;

/// The control bytes of the protocol (step 2): one table for both sides.
struct AgentControlByte {
  char byte;
  int sig;
};
inline constexpr AgentControlByte kAgentControlBytes[] = {{'I', SIGINT}, {'T', SIGTERM}, {'H', SIGHUP}, {'K', SIGKILL}};

/// Launcher side: the control byte for `sig`, or 0 when the protocol cannot
/// carry it.
constexpr char control_byte_for(int sig) {
  for (const auto& c : kAgentControlBytes) {
    if (c.sig == sig) return c.byte;
  }
  return 0;
}

/// Agent side: the signal a control byte asks for, or 0 for any other byte.
constexpr int control_signal(char byte) {
  for (const auto& c : kAgentControlBytes) {
    if (c.byte == byte) return c.sig;
  }
  return 0;
}

}  // namespace hvd::launcher
