#pragma once
/// Platform host sources (docs/platforms.md): managed platforms hand every
/// machine of a job its cluster description in their own files and
/// environment variables; each detector here turns one platform's
/// description into hvdrun's hosts, this machine's name, the leader (the
/// one machine that launches) and the interface to bind to.
///
/// Detectors are pure functions over an Environment (a file-system root
/// and an environment map), so unit tests write fixture directories and
/// pass maps instead of needing a real platform. A detector returns
/// nullopt when its platform's markers are absent, and throws
/// hvd::InvalidArgument with one line naming the file or variable and the
/// field when they are present but malformed.
///
/// apply_platform (host_source.cpp) decides, from Options and an
/// Environment, whether a platform's hosts are used and merges the rest of
/// its description into the Options (explicit flags win; contradictions
/// are one-line errors). choose_host_source (discovery/choose.h) turns the
/// hosts into the job's HostSource.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "hvd/launcher/hosts/hosts.h"
#include "hvd/launcher/process/environment.h"
#include "hvd/launcher/options/options.h"

namespace hvd::launcher::platform {

/// One platform's view of the job, as seen from this machine.
struct PlatformDescription {
  std::string name;  ///< "sagemaker", "slurm"
  std::vector<HostSpec> hosts;  ///< in placement order; the leader first
  /// This machine's name in `hosts`; empty when the platform does not say
  /// (Slurm outside a node: salloc's shell on the submission host).
  std::string this_host;
  std::string leader;  ///< the host that launches the job
  std::optional<std::string> interface;  ///< the interface to bind to (SageMaker's network_interface_name)
  /// Options for mpirun (SageMaker's sagemaker_mpi_custom_mpi_options).
  std::optional<std::string> custom_mpi_options;
  /// What the description was read from: "/opt/ml/input/config/resourceconfig.json",
  /// "SLURM_JOB_NODELIST=node[1-2]", in the order read.
  std::vector<std::string> evidence;
  /// This machine is part of the platform's job but gets no ranks (Vertex's
  /// reduction servers and evaluators): hvdrun there says `unranked_reason`
  /// in one line and exits 0 without starting anything.
  bool unranked = false;
  std::string unranked_reason;
  /// What the platform's own runner appends to the worker command:
  /// SageMaker's user hyperparameters as `--key value`, sorted, as its
  /// training toolkit passes them (from hyperparameters.json, else
  /// SM_USER_ARGS); `user_args_origin` says where they came from.
  std::vector<std::string> user_args;
  std::string user_args_origin;
  /// Variables the platform's runner gives every rank (SageMaker's
  /// SM_MODEL_DIR, SM_CHANNEL_<NAME>, SM_HPS, ...): set for the workers
  /// only where hvdrun's environment does not have them.
  std::vector<std::pair<std::string, std::string>> job_env;
  /// Per-machine variables, per host (SM_CURRENT_HOST; Vertex's
  /// CLUSTER_SPEC with that host's task): ranks on another host must not
  /// see this machine's values.
  std::map<std::string, std::map<std::string, std::string>> host_env;
  /// Whether this machine starts the job: it is the leader, or it is not
  /// one of the hosts (a launcher outside the allocation).
  bool launches_here() const;
};

/// SageMaker: `<base>/input/config/resourceconfig.json` (<base> =
/// SAGEMAKER_BASE_DIR or /opt/ml), else SM_HOSTS / SM_CURRENT_HOST /
/// SM_NETWORK_INTERFACE_NAME; slots from hyperparameters.json's
/// sagemaker_mpi_num_of_processes_per_host, else SM_NUM_GPUS (> 0), else 1.
std::optional<PlatformDescription> detect_sagemaker(const Environment& ctx);

/// Slurm: inside an allocation (SLURM_JOB_ID), hosts from
/// SLURM_JOB_NODELIST (or SLURM_NODELIST), slots from SLURM_TASKS_PER_NODE,
/// else SLURM_NTASKS_PER_NODE, else 1; this host SLURMD_NODENAME; the leader
/// the first node.
std::optional<PlatformDescription> detect_slurm(const Environment& ctx);

/// Vertex AI / AI Platform (vertex.cpp): CLUSTER_SPEC, else TF_CONFIG (one
/// without a cluster is TensorFlow's single local worker: absent);
/// hosts from the primary pool (workerpool0 / chief / master) then the
/// workers (workerpool1 / worker), without ports; reduction servers and
/// evaluators (workerpool2/3, ps, evaluator) get no ranks; this host from
/// task.type + task.index; the leader workerpool0[0]; slots from this
/// machine's GPU count (0 GPUs: 1).
std::optional<PlatformDescription> detect_vertex(const Environment& ctx);

/// LSF (lsf.cpp): inside a job (LSB_JOBID), hosts and slots from
/// LSB_MCPU_HOSTS ("hostA 4 hostB 4"); the first entry is the launch node
/// (where LSF runs the job script) and the leader; when this machine is
/// that node and has no GPUs it is not one of the hosts (horovodrun's
/// launch node); this host from ctx.host_name().
std::optional<PlatformDescription> detect_lsf(const Environment& ctx);

/// LSB_MCPU_HOSTS's grammar: "hostA 4 hostB 4" -> {{hostA,4},{hostB,4}}.
/// Throws InvalidArgument naming LSB_MCPU_HOSTS.
std::vector<HostSpec> parse_lsb_mcpu_hosts(const std::string& text);

/// This machine's NVIDIA GPUs (gpus.cpp): the entries of
/// /proc/driver/nvidia/gpus under ctx.root, limited by CUDA_VISIBLE_DEVICES
/// when it is set; `evidence` is what was read.
struct GpuCount {
  int count = 0;
  std::vector<std::string> evidence;
};
GpuCount count_nvidia_gpus(const Environment& ctx);

/// SageMaker's sagemaker_mpi_custom_mpi_options, split as the SageMaker
/// training toolkit does (whitespace; argparse's --NCCL_DEBUG, prefixes
/// and --NCCL_DEBUG=X included; the rest goes to mpirun as it is).
struct CustomMpiOptions {
  std::optional<std::string> nccl_debug;  ///< --NCCL_DEBUG X (the last one)
  std::vector<std::string> mpirun_rest;  ///< every other token, in order (what the toolkit appends to mpirun)
  std::vector<std::string> env_exports;  ///< -x NAME=VALUE / -x NAME among them
  std::vector<std::string> not_mapped;  ///< the rest: mpirun options hvdrun's own launcher has no use for
  /// The mpirun arguments the toolkit would add: "-x NCCL_DEBUG=X" then the rest.
  std::string mpirun_args() const;
};
CustomMpiOptions parse_custom_mpi_options(const std::string& text);

/// The named platform's detector ("sagemaker", "slurm").
std::optional<PlatformDescription> detect(const std::string& name, const Environment& ctx);

/// Slurm's compressed host list: "node[01-04,07],gpu-[1-2]", several
/// bracket groups per name ("r[1-2]n[1-2]"), zero padding kept. `origin`
/// names the variable in errors. Throws InvalidArgument.
std::vector<std::string> expand_hostlist(const std::string& text, const std::string& origin = "SLURM_JOB_NODELIST");

/// SLURM_TASKS_PER_NODE's grammar: "2(x3),1" -> {2, 2, 2, 1}. Throws
/// InvalidArgument naming `origin`.
std::vector<int> expand_tasks_per_node(const std::string& text, const std::string& origin = "SLURM_TASKS_PER_NODE");

/// What a platform adds to a job (apply_platform).
struct PlatformDecision {
  /// `options` with the platform's -np (its slots, when -np is not given),
  /// interface and custom MPI options merged in. The hosts are
  /// platform->hosts (with --slots-per-host applied); Options::hosts is
  /// never rewritten.
  Options options;
  std::optional<PlatformDescription> platform;  ///< set when a platform's hosts are used
  std::vector<std::string> info;  ///< one-line notes (which platform, from where)
  std::vector<std::string> warnings;  ///< settings of the platform that are ignored, and why
  /// This machine is a follower (one of the hosts, not the leader): a real
  /// run waits for the leader (job/platform_follower.h).
  bool follower = false;
};

/// --hosts-from: `auto` uses the first implemented platform whose markers
/// are present, unless `explicit_flag` (explicit_host_flag(): -H,
/// --hostfile, --host-discovery-script or --kubernetes-selector) names the
/// hosts; `none` keeps horovodrun's localhost:np; a platform name requires
/// that platform (absent: error) and refuses -H & co. Throws
/// InvalidArgument (exit 2) on contradictions: -np above the platform's
/// slots, a platform named beside -H. Without -np, the platform's total
/// slots (one info line). Called by choose_host_source (discovery/choose.h).
PlatformDecision apply_platform(const Options& options, const std::string& explicit_flag, const Environment& ctx);

/// The --dry-run text block: platform, evidence, this host, leader, role,
/// hosts, interface.
std::string render_platform(const PlatformDescription& p);

/// The same as JSON text (an object), for --dry-run=json.
std::string render_platform_json(const PlatformDescription& p);

}  // namespace hvd::launcher::platform
