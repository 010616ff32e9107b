#pragma once
/// Workers started through srun inside a Slurm allocation (--launcher srun,
/// docs/platforms.md#workers-through-srun): a node's agent (one per node and
/// launch: one srun step) is a local `srun ... hvdrun-agent` process. srun
/// carries its stdin, stdout and stderr to the node, so the agent protocol
/// (spawn/agent_protocol.h) is the one spoken locally and over SSH -- Spawn
/// frames, Signal frames, EOF teardown -- and no SSH is needed between nodes. The local spawner runs it, with
/// its process group and parent-death signal.
#include <string>
#include <vector>

namespace hvd::launcher {

/// The agent command for `node`: one task of an overlapping step on that
/// node (`--overlap`: it shares the allocation's CPUs, memory and GPUs with
/// the batch step and the other workers instead of waiting for them; no
/// PMI, which the agent does not use; srun's own messages quiet;
/// --unbuffered, or slurmstepd would hold the agent's binary frames until a
/// newline byte happens to pass), then
/// `agent` ("/usr/bin/hvdrun-agent"). The cluster's CPU binding policy
/// applies to the step as to any srun (SLURM_CPU_BIND=none in hvdrun's
/// environment turns it off).
std::vector<std::string> srun_agent_command(const std::string& node, const std::vector<std::string>& agent);

}  // namespace hvd::launcher
