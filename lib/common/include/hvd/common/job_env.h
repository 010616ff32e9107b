#pragma once
/// The launcher<->worker contract: every environment variable that hvdrun
/// (or, in MPI mode, the mpirun it starts) sets for the processes of a job
/// and that those processes read, named once. Both sides use these
/// constants -- hvdrun's plan/spawn code when it builds a worker's
/// environment, the collective library and the store client when they read
/// it -- so the two can never drift apart by a typo, and this file is the
/// list to read when asking "what does a worker get from its launcher?".
///
/// Each constant's comment says who sets it, who reads it and what it means.
/// "Horovod workers" means unmodified Horovod programs started by hvdrun,
/// which read Horovod's own variables; the hvdcomm library ignores the
/// variables marked so (hvdrun still sets them: it is a drop-in horovodrun).
///
/// Not here: one side's own configuration that never crosses the boundary
/// (hvdrun's HVDRUN_REMOTE_AGENT and HOROVOD_MPI_ARGS, the library's HVD_CUDA_*,
/// HVD_TRANSPORT_* and HVD_MPI_BOOTSTRAP_LIB); those live next to their one
/// reader.
///
/// The names are `const char*` (not std::string_view) because every user
/// needs a NUL-terminated string or a std::string key: env::get, std::map
/// keys, getenv, fmt. kAll lists every constant once more, for the Python
/// binding (hvdcomm._core.job_env) and the tests; tests/unit/common/
/// test_job_env.cpp fails when a constant is missing from it, and
/// tests/check_job_env_literals.py fails when a name is spelled as a string
/// literal anywhere else in lib/, apps/ or python/.

namespace hvd::job_env {

// --- Rendezvous: how a worker finds the job's store and proves it belongs --

/// hvdrun: the address of its rendezvous store as workers reach it (static
/// jobs: plan/worker_env.cpp add_rendezvous_env; --mpi: exported through
/// mpirun; elastic: every spawn). Read by store::make_store_from_env (no
/// store when unset), by the library as the route hint that picks the
/// interface peers can reach, and in MPI mode as "hvdrun --mpi runs the
/// store". A job of size > 1 without it is refused.
inline constexpr const char* kRendezvousAddr = "HOROVOD_GLOO_RENDEZVOUS_ADDR";
/// hvdrun, with kRendezvousAddr: the store's TCP port. Read by
/// store::make_store_from_env (1..65535, required when the address is set).
inline constexpr const char* kRendezvousPort = "HOROVOD_GLOO_RENDEZVOUS_PORT";
/// hvdrun, with kRendezvousAddr: the per-job secret it generated (never an
/// inherited one: plan/worker_env.cpp drops that). Read by the store client
/// (authenticates every store request) and the library (proved on every
/// peer link). Also hvd::kSecretEnv (hvd/common/secret.h).
inline constexpr const char* kSecret = "HVDRUN_SECRET";
/// hvdrun, from --start-timeout (seconds); hvdrun itself reads it as that
/// flag's default. Read by the library: how long to reach the store and
/// connect the mesh (Settings::start_timeout, default 30).
inline constexpr const char* kStartTimeout = "HOROVOD_START_TIMEOUT";
/// hvdrun, from the first --network-interface. Read by the library: listen
/// on this interface's IPv4 address (Settings::bind_address), and in MPI
/// mode the address rank 0 advertises for its store.
inline constexpr const char* kGlooIface = "HOROVOD_GLOO_IFACE";

// --- Placement: which rank this process is and where it runs ---------------

/// hvdrun, per rank (plan/worker_env.cpp add_slot_env; not in --mpi or
/// elastic jobs, whose ranks come from mpirun or the published world).
/// Read by the library (Settings::rank; with its five siblings below: all
/// or none) and hvdbench.
inline constexpr const char* kRank = "HOROVOD_RANK";
/// hvdrun, per rank: the number of ranks. Read by the library and hvdbench.
inline constexpr const char* kSize = "HOROVOD_SIZE";
/// hvdrun, per rank: the rank's index among the ranks of its host. Read by
/// the library and hvdbench.
inline constexpr const char* kLocalRank = "HOROVOD_LOCAL_RANK";
/// hvdrun, per rank: the number of ranks on its host. Read by the library
/// and hvdbench.
inline constexpr const char* kLocalSize = "HOROVOD_LOCAL_SIZE";
/// hvdrun, per rank: the index of its host among the hosts that have a rank
/// with the same local rank (Horovod's cross communicator). Read by the
/// library and hvdbench.
inline constexpr const char* kCrossRank = "HOROVOD_CROSS_RANK";
/// hvdrun, per rank: the number of hosts that have a rank with this local
/// rank. Read by the library and hvdbench.
inline constexpr const char* kCrossSize = "HOROVOD_CROSS_SIZE";
/// hvdrun, per rank (static and elastic jobs): the host's name as hvdrun
/// knows it (the -H / discovery name). Read by the library (Settings::
/// hostname; in MPI mode the node a rank publishes), default gethostname().
inline constexpr const char* kHostname = "HOROVOD_HOSTNAME";

// --- Elastic: membership in worlds hvdrun publishes (docs/elastic.md) ------

/// hvdrun's elastic mode (--host-discovery-script): "1". Read by
/// hvd::elastic::enabled(): hvd::init() then joins the published worlds
/// instead of reading the placement variables.
inline constexpr const char* kElastic = "HOROVOD_ELASTIC";
/// hvdrun's elastic mode, from --elastic-timeout (seconds); hvdrun itself
/// reads it as that flag's default. Read by the library: how long one join
/// or reset waits for a world that lists this worker (default 600).
inline constexpr const char* kElasticTimeout = "HOROVOD_ELASTIC_TIMEOUT";
/// hvdrun's elastic mode, per worker process: the id the published worlds
/// name it by, stable for the process's life (a restarted slot gets a new
/// one; hvd/store/elastic_world.h). Read by the library
/// (MemberOptions::worker_id); an elastic worker without it is refused.
inline constexpr const char* kWorkerId = "HVDRUN_WORKER_ID";

// --- Controller: which Horovod engine a Horovod worker uses ----------------

/// hvdrun: "gloo" (not in --mpi mode, where a Horovod worker must keep its
/// MPI controller: spawn/mpi/mpi_launch.cpp drops it). Read by Horovod
/// workers; the hvdcomm library has one engine and ignores it.
inline constexpr const char* kController = "HOROVOD_CONTROLLER";
/// hvdrun: "gloo", dropped in --mpi mode like kController. Read by Horovod
/// workers; ignored by the hvdcomm library.
inline constexpr const char* kCpuOperations = "HOROVOD_CPU_OPERATIONS";

// --- Tuning: hvdrun's tuning flags / config file, as horovodrun sets them --

/// hvdrun, from --fusion-threshold-mb (in bytes). Read by the library:
/// bytes of one fused allreduce, 0 disables fusion (default 64 MiB).
inline constexpr const char* kFusionThreshold = "HOROVOD_FUSION_THRESHOLD";
/// hvdrun, from --cycle-time-ms. Read by the library: negotiation period in
/// milliseconds, fractions allowed (default 1).
inline constexpr const char* kCycleTime = "HOROVOD_CYCLE_TIME";
/// hvdrun, from --cache-capacity. Read by the library: response-cache
/// entries, 0 disables the cache (default 1024).
inline constexpr const char* kCacheCapacity = "HOROVOD_CACHE_CAPACITY";
/// hvdrun, from --(no-)hierarchical-allreduce as 1/0. Read by Horovod
/// workers and the library (Settings::hierarchical_allreduce).
inline constexpr const char* kHierarchicalAllreduce = "HOROVOD_HIERARCHICAL_ALLREDUCE";
/// hvdrun, from --(no-)hierarchical-allgather as 1/0. As
/// kHierarchicalAllreduce.
inline constexpr const char* kHierarchicalAllgather = "HOROVOD_HIERARCHICAL_ALLGATHER";
/// hvdrun, from --(no-)torus-allreduce as 1/0 (hvdrun warns that 1 has no
/// effect). Read by Horovod workers (NCCL builds); the hvdcomm library only
/// reports it in its settings log.
inline constexpr const char* kTorusAllreduce = "HOROVOD_TORUS_ALLREDUCE";
/// hvdrun, "1" with --autotune (the other autotune variables only then).
/// Read by Horovod workers and the library (Settings::autotune).
inline constexpr const char* kAutotune = "HOROVOD_AUTOTUNE";
/// hvdrun, from --autotune-log-file. Read by Horovod workers.
inline constexpr const char* kAutotuneLog = "HOROVOD_AUTOTUNE_LOG";
/// hvdrun, from --autotune-warmup-samples. Read by Horovod workers.
inline constexpr const char* kAutotuneWarmupSamples = "HOROVOD_AUTOTUNE_WARMUP_SAMPLES";
/// hvdrun, from --autotune-steps-per-sample. Read by Horovod workers.
inline constexpr const char* kAutotuneStepsPerSample = "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE";
/// hvdrun, from --autotune-bayes-opt-max-samples. Read by Horovod workers.
inline constexpr const char* kAutotuneBayesOptMaxSamples = "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES";
/// hvdrun, from --autotune-gaussian-process-noise. Read by Horovod workers.
inline constexpr const char* kAutotuneGaussianProcessNoise = "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE";
/// hvdrun, from --timeline-filename (the mark-cycles variable only with
/// it). Read by Horovod workers; the hvdcomm library writes no timeline yet
/// (issue 20) and only reports it in its settings log.
inline constexpr const char* kTimeline = "HOROVOD_TIMELINE";
/// hvdrun, from --(no-)timeline-mark-cycles as 1/0. Read by Horovod workers.
inline constexpr const char* kTimelineMarkCycles = "HOROVOD_TIMELINE_MARK_CYCLES";
/// hvdrun, from --no-stall-check / --stall-check as 1/0. Read by the
/// library: 1 turns the stall check off.
inline constexpr const char* kStallCheckDisable = "HOROVOD_STALL_CHECK_DISABLE";
/// hvdrun, from --stall-check-warning-time-seconds. Read by the library:
/// warn about tensors some ranks submitted and others not after this many
/// seconds (default 60).
inline constexpr const char* kStallCheckTimeSeconds = "HOROVOD_STALL_CHECK_TIME_SECONDS";
/// hvdrun, from --stall-check-shutdown-time-seconds. Read by the library:
/// fail such tensors after this many seconds, 0 never (default 0).
inline constexpr const char* kStallShutdownTimeSeconds = "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS";
/// hvdrun, from --log-level. Read by the library (and hvdbench): its log
/// level, trace..error (default warning).
inline constexpr const char* kLogLevel = "HOROVOD_LOG_LEVEL";
/// hvdrun, from --log-without-timestamp / --log-with-timestamp as 1/0.
/// Read by the library (and Horovod workers): 1 drops the time from its
/// log lines.
inline constexpr const char* kLogHideTime = "HOROVOD_LOG_HIDE_TIME";
/// hvdrun, from --num-nccl-streams. Read by Horovod workers; the hvdcomm
/// library's NCCL path uses one stream and only reports it in its settings
/// log.
inline constexpr const char* kNumNcclStreams = "HOROVOD_NUM_NCCL_STREAMS";
/// hvdrun, from --thread-affinity. Read by the library (and Horovod
/// workers): core ids, one per local rank, comma-separated; the local
/// rank's background thread is pinned to its core.
inline constexpr const char* kThreadAffinity = "HOROVOD_THREAD_AFFINITY";
/// hvdrun, from --gloo-timeout-seconds. Read by the library (when set, its
/// rendezvous timeout instead of kStartTimeout: reaching the store and
/// connecting the mesh), by Horovod workers and by hvdbench (its connect
/// timeout, default 30).
inline constexpr const char* kGlooTimeoutSeconds = "HOROVOD_GLOO_TIMEOUT_SECONDS";
/// hvdrun, "1" with --verbose. Read by the library: rank 0 logs the
/// settings it applied, once per hvd::init(), at info level.
inline constexpr const char* kVerbose = "HVDRUN_VERBOSE";

// --- Runtime: variables hvdrun sets for the worker's runtime libraries -----

/// hvdrun: "1" for every worker, so a Python worker's output reaches hvdrun
/// line by line. Read by the Python interpreter.
inline constexpr const char* kPythonUnbuffered = "PYTHONUNBUFFERED";
/// hvdrun, with --network-interface: every interface, comma-separated.
/// Read by NCCL (loaded by the library's CUDA component, or by Horovod).
inline constexpr const char* kNcclSocketIfname = "NCCL_SOCKET_IFNAME";
/// hvdrun, "1" with --tcp. Read by NCCL: no InfiniBand.
inline constexpr const char* kNcclIbDisable = "NCCL_IB_DISABLE";

// --- MPI mode: workers started by an MPI launcher (docs/mpi.md) ------------

/// hvdrun, from --(no-)mpi-threads-disable as 1/0. Read by Horovod's MPI
/// controller; ignored by the hvdcomm library.
inline constexpr const char* kMpiThreadsDisable = "HOROVOD_MPI_THREADS_DISABLE";
/// Open MPI's mpirun (started by hvdrun --mpi, or by a platform). Read by
/// the library (collective/mpi_env.cpp) when no kRank is set: the rank; the
/// three below complete this family. hvdrun never sets the MPI launcher's
/// variables, and drops inherited ones before it starts mpirun itself.
inline constexpr const char* kOmpiRank = "OMPI_COMM_WORLD_RANK";
/// Open MPI's mpirun: the job size. Read by the library.
inline constexpr const char* kOmpiSize = "OMPI_COMM_WORLD_SIZE";
/// Open MPI's mpirun: the rank on its node. Read by the library.
inline constexpr const char* kOmpiLocalRank = "OMPI_COMM_WORLD_LOCAL_RANK";
/// Open MPI's mpirun: the ranks on this node. Read by the library.
inline constexpr const char* kOmpiLocalSize = "OMPI_COMM_WORLD_LOCAL_SIZE";
/// MPICH's Hydra and Intel MPI: the rank. Read by the library with the
/// three below.
inline constexpr const char* kPmiRank = "PMI_RANK";
/// MPICH / Intel MPI: the job size. Read by the library.
inline constexpr const char* kPmiSize = "PMI_SIZE";
/// MPICH / Intel MPI: the rank on its node. Read by the library; hvdrun
/// drops an inherited one before starting mpirun.
inline constexpr const char* kMpiLocalRankId = "MPI_LOCALRANKID";
/// MPICH / Intel MPI: the ranks on this node. Read by the library; hvdrun
/// drops an inherited one before starting mpirun.
inline constexpr const char* kMpiLocalNumRanks = "MPI_LOCALNRANKS";
/// PMIx launchers (srun --mpi=pmix, ...) that set no family above: the
/// rank. Read by the library, with the size from kPmixSize or kSlurmNtasks.
inline constexpr const char* kPmixRank = "PMIX_RANK";
/// Some PMIx launchers: the job size. Read by the library.
inline constexpr const char* kPmixSize = "PMIX_SIZE";
/// Slurm's srun: the number of tasks. Read by the library as the size of a
/// PMIx launch.
inline constexpr const char* kSlurmNtasks = "SLURM_NTASKS";
/// The user or platform (never hvdrun), for `mpirun ./train` without
/// hvdrun: rank 0's host. Read by the library with kMasterPort: rank 0
/// serves the store there, the others connect to it.
inline constexpr const char* kMasterAddr = "HVD_MASTER_ADDR";
/// The user or platform, with kMasterAddr: the store's port. Read by the
/// library.
inline constexpr const char* kMasterPort = "HVD_MASTER_PORT";
/// The user or platform, with kMasterAddr: the job secret, the same on
/// every rank (kSecret wins when set). Read by the library.
inline constexpr const char* kMasterSecret = "HVD_MASTER_SECRET";
/// The user or platform, with kMasterAddr: the address rank 0's store
/// listens on (default 0.0.0.0). Read by the library.
inline constexpr const char* kMasterBind = "HVD_MASTER_BIND";

// --- The whole list ---------------------------------------------------------

/// The part of the contract a variable belongs to (the sections above).
enum class Group { Rendezvous, Placement, Elastic, Controller, Tuning, Runtime, Mpi, Internal };

constexpr const char* group_name(Group g) {
  switch (g) {
    case Group::Rendezvous: return "rendezvous";
    case Group::Placement: return "placement";
    case Group::Elastic: return "elastic";
    case Group::Controller: return "controller";
    case Group::Tuning: return "tuning";
    case Group::Runtime: return "runtime";
    case Group::Mpi: return "mpi";
    case Group::Internal: return "internal";
  }
  return "?";
}

struct Variable {
  /// The constant's name without the leading k, in UPPER_SNAKE case
  /// (kRendezvousAddr -> RENDEZVOUS_ADDR): the attribute of
  /// hvdcomm._core.job_env that holds `name`.
  const char* key;
  /// The environment variable.
  const char* name;
  Group group;
};

/// Every constant above, in order.
inline constexpr Variable kAll[] = {
    {"RENDEZVOUS_ADDR", kRendezvousAddr, Group::Rendezvous},
    {"RENDEZVOUS_PORT", kRendezvousPort, Group::Rendezvous},
    {"SECRET", kSecret, Group::Rendezvous},
    {"START_TIMEOUT", kStartTimeout, Group::Rendezvous},
    {"GLOO_IFACE", kGlooIface, Group::Rendezvous},

    {"RANK", kRank, Group::Placement},
    {"SIZE", kSize, Group::Placement},
    {"LOCAL_RANK", kLocalRank, Group::Placement},
    {"LOCAL_SIZE", kLocalSize, Group::Placement},
    {"CROSS_RANK", kCrossRank, Group::Placement},
    {"CROSS_SIZE", kCrossSize, Group::Placement},
    {"HOSTNAME", kHostname, Group::Placement},

    {"ELASTIC", kElastic, Group::Elastic},
    {"ELASTIC_TIMEOUT", kElasticTimeout, Group::Elastic},
    {"WORKER_ID", kWorkerId, Group::Elastic},

    {"CONTROLLER", kController, Group::Controller},
    {"CPU_OPERATIONS", kCpuOperations, Group::Controller},

    {"FUSION_THRESHOLD", kFusionThreshold, Group::Tuning},
    {"CYCLE_TIME", kCycleTime, Group::Tuning},
    {"CACHE_CAPACITY", kCacheCapacity, Group::Tuning},
    {"HIERARCHICAL_ALLREDUCE", kHierarchicalAllreduce, Group::Tuning},
    {"HIERARCHICAL_ALLGATHER", kHierarchicalAllgather, Group::Tuning},
    {"TORUS_ALLREDUCE", kTorusAllreduce, Group::Tuning},
    {"AUTOTUNE", kAutotune, Group::Tuning},
    {"AUTOTUNE_LOG", kAutotuneLog, Group::Tuning},
    {"AUTOTUNE_WARMUP_SAMPLES", kAutotuneWarmupSamples, Group::Tuning},
    {"AUTOTUNE_STEPS_PER_SAMPLE", kAutotuneStepsPerSample, Group::Tuning},
    {"AUTOTUNE_BAYES_OPT_MAX_SAMPLES", kAutotuneBayesOptMaxSamples, Group::Tuning},
    {"AUTOTUNE_GAUSSIAN_PROCESS_NOISE", kAutotuneGaussianProcessNoise, Group::Tuning},
    {"TIMELINE", kTimeline, Group::Tuning},
    {"TIMELINE_MARK_CYCLES", kTimelineMarkCycles, Group::Tuning},
    {"STALL_CHECK_DISABLE", kStallCheckDisable, Group::Tuning},
    {"STALL_CHECK_TIME_SECONDS", kStallCheckTimeSeconds, Group::Tuning},
    {"STALL_SHUTDOWN_TIME_SECONDS", kStallShutdownTimeSeconds, Group::Tuning},
    {"LOG_LEVEL", kLogLevel, Group::Tuning},
    {"LOG_HIDE_TIME", kLogHideTime, Group::Tuning},
    {"NUM_NCCL_STREAMS", kNumNcclStreams, Group::Tuning},
    {"THREAD_AFFINITY", kThreadAffinity, Group::Tuning},
    {"GLOO_TIMEOUT_SECONDS", kGlooTimeoutSeconds, Group::Tuning},
    {"VERBOSE", kVerbose, Group::Tuning},

    {"PYTHON_UNBUFFERED", kPythonUnbuffered, Group::Runtime},
    {"NCCL_SOCKET_IFNAME", kNcclSocketIfname, Group::Runtime},
    {"NCCL_IB_DISABLE", kNcclIbDisable, Group::Runtime},

    {"MPI_THREADS_DISABLE", kMpiThreadsDisable, Group::Mpi},
    {"OMPI_RANK", kOmpiRank, Group::Mpi},
    {"OMPI_SIZE", kOmpiSize, Group::Mpi},
    {"OMPI_LOCAL_RANK", kOmpiLocalRank, Group::Mpi},
    {"OMPI_LOCAL_SIZE", kOmpiLocalSize, Group::Mpi},
    {"PMI_RANK", kPmiRank, Group::Mpi},
    {"PMI_SIZE", kPmiSize, Group::Mpi},
    {"MPI_LOCAL_RANK_ID", kMpiLocalRankId, Group::Mpi},
    {"MPI_LOCAL_NUM_RANKS", kMpiLocalNumRanks, Group::Mpi},
    {"PMIX_RANK", kPmixRank, Group::Mpi},
    {"PMIX_SIZE", kPmixSize, Group::Mpi},
    {"SLURM_NTASKS", kSlurmNtasks, Group::Mpi},
    {"MASTER_ADDR", kMasterAddr, Group::Mpi},
    {"MASTER_PORT", kMasterPort, Group::Mpi},
    {"MASTER_SECRET", kMasterSecret, Group::Mpi},
    {"MASTER_BIND", kMasterBind, Group::Mpi},

};

}  // namespace hvd::job_env
