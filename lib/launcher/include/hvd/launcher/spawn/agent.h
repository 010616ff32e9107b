#pragma once
/// The hvdrun agent (`hvdrun-agent`, apps/hvdrun_agent): one per host and
/// launch, it starts all of that launch's workers and guarantees they die
/// when the launcher goes away. Spawners start it with stdin and stdout
/// connected to hvdrun (a socket and a pipe locally, srun's streams under
/// --launcher srun, one SSH channel remotely) and speak agent_protocol.h
/// over them: Hello, one Spawn per worker, Done; Signal frames for single
/// workers; the agent answers with each worker's Output and Exit.
///
/// Guarantees, per worker: its own process group; PR_SET_PDEATHSIG SIGKILL
/// tied to the agent (an agent killed with SIGKILL still takes its workers'
/// leaders along); stdin /dev/null, stdout and stderr separate pipes read
/// by the agent; whatever the worker leaves in its group is killed when it
/// exits. EOF on stdin (hvdrun exited, crashed, was SIGKILLed, the SSH
/// connection was lost) or SIGINT/SIGTERM/SIGHUP to the agent: SIGTERM to
/// every worker's group, SIGKILL after the grace that hvdrun's Hello gave.
/// A worker's status is its exit code, 128+N when signal N killed it, 127
/// with "hvdrun: <cmd>: command not found" on its stderr when exec failed
/// with ENOENT, 126 for other exec failures, 1 for a missing directory.
///
/// The agent is lean on purpose: it links only this file, the protocol, the
/// process module (Subprocess, signals) and lib/common's fd helpers, with
/// fmt header-only and no spdlog, statically -- its start-up costs about
/// what a bare exec does (docs/performance.md, "Launcher start-up").
namespace hvd::launcher {

int agent_main(int argc, char** argv);

/// The agent's file name; spawners look for it beside the running hvdrun.
inline constexpr const char* kAgentProgram = "hvdrun-agent";

}  // namespace hvd::launcher
