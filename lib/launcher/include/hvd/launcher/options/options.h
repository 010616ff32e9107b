#pragma once
/// Everything hvdrun was asked to do, after command line, config file and
/// environment have been merged (command line > config file > environment >
/// defaults). Filled by cli.cpp; consumed by planning, spawning and
/// supervision. Plain data with named fields: no behaviour here.
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

enum class DryRunFormat { None, Text, Json };
enum class Engine { Native, Mpi, Gloo };  // Gloo == Native (hvdrun's own spawning)

struct TuningOptions {
  // Each becomes a HOROVOD_* variable for workers when set (see docs/cli.md).
  std::optional<double> fusion_threshold_mb;  // HOROVOD_FUSION_THRESHOLD (bytes)
  std::optional<double> cycle_time_ms;  // HOROVOD_CYCLE_TIME
  std::optional<long> cache_capacity;  // HOROVOD_CACHE_CAPACITY
  std::optional<bool> hierarchical_allreduce;  // HOROVOD_HIERARCHICAL_ALLREDUCE
  std::optional<bool> hierarchical_allgather;  // HOROVOD_HIERARCHICAL_ALLGATHER
  std::optional<bool> torus_allreduce;  // HOROVOD_TORUS_ALLREDUCE
  std::optional<bool> autotune;  // HOROVOD_AUTOTUNE
  std::optional<std::string> autotune_log_file;  // HOROVOD_AUTOTUNE_LOG
  std::optional<long> autotune_warmup_samples;  // HOROVOD_AUTOTUNE_WARMUP_SAMPLES
  std::optional<long> autotune_steps_per_sample;  // HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE
  std::optional<long> autotune_bayes_opt_max_samples;
  std::optional<double> autotune_gaussian_process_noise;
  std::optional<std::string> timeline_filename;  // HOROVOD_TIMELINE
  std::optional<bool> timeline_mark_cycles;  // HOROVOD_TIMELINE_MARK_CYCLES
  std::optional<bool> no_stall_check;  // HOROVOD_STALL_CHECK_DISABLE
  std::optional<long> stall_check_warning_time_seconds;  // HOROVOD_STALL_CHECK_TIME_SECONDS
  std::optional<long> stall_check_shutdown_time_seconds;  // HOROVOD_STALL_SHUTDOWN_TIME_SECONDS
  std::optional<std::string> log_level;  // HOROVOD_LOG_LEVEL
  std::optional<bool> log_hide_timestamp;  // HOROVOD_LOG_HIDE_TIME
  std::optional<long> num_nccl_streams;  // HOROVOD_NUM_NCCL_STREAMS
  std::optional<long> thread_affinity;  // HOROVOD_THREAD_AFFINITY
  std::optional<long> gloo_timeout_seconds;  // HOROVOD_GLOO_TIMEOUT_SECONDS
  std::optional<bool> mpi_threads_disable;  // HOROVOD_MPI_THREADS_DISABLE (MPI mode)
};

/// --kubernetes-slots: how many slots a discovered pod offers
/// (docs/kubernetes.md, "Built-in pod discovery").
struct KubernetesSlots {
  enum class Mode {
    Auto,  ///< annotation hvdrun.io/slots, else the nvidia.com/gpu limits, else --slots-per-host or 1
    Gpu,  ///< the sum of the containers' nvidia.com/gpu limits
    Annotation,  ///< the pod annotation `annotation`
    Fixed,  ///< `count` for every pod
  } mode = Mode::Auto;
  std::string annotation;  ///< Mode::Annotation
  int count = 1;  ///< Mode::Fixed
  bool operator==(const KubernetesSlots& o) const {
    return mode == o.mode && annotation == o.annotation && count == o.count;
  }
};

/// How a discovered pod becomes a host name: its IP, or the
/// `<hostname>.<subdomain>` DNS name of a StatefulSet (headless service) pod.
enum class KubernetesHostNames { Ip, Dns };

/// Built-in Kubernetes pod discovery (--kubernetes-*): a selector turns it on.
struct KubernetesOptions {
  std::optional<std::string> selector;  ///< --kubernetes-selector (label selector)
  std::optional<std::string> namespace_name;  ///< --kubernetes-namespace; default: the pod's or the context's
  KubernetesSlots slots;  ///< --kubernetes-slots
  KubernetesHostNames host_names = KubernetesHostNames::Ip;  ///< --kubernetes-host-names
};

struct ElasticOptions {
  /// Elastic mode, horovodrun's rule: a discovery script, or --min-np. With
  /// --min-np and no script the hosts are the fixed -H / --hostfile list
  /// (default localhost:np): failed workers are restarted, failing hosts
  /// blacklisted, and the job goes on while --min-np workers remain.
  bool enabled = false;
  std::optional<int> min_np;
  std::optional<int> max_np;
  std::optional<int> slots_per_host;
  std::optional<std::string> host_discovery_script;
  std::chrono::seconds elastic_timeout{600};
  std::optional<int> reset_limit;
  std::optional<std::pair<int, int>> blacklist_cooldown_range;  // seconds
  // hvdrun extensions (coordinator-defined names; the CLI fills them):
  std::chrono::milliseconds discovery_interval{1000};  // --discovery-interval
  std::chrono::milliseconds discovery_timeout{10000};  // --discovery-timeout
  int blacklist_failures = 3;  // --blacklist-failures
  std::chrono::milliseconds blacklist_window{60000};  // --blacklist-window
  std::chrono::milliseconds drain_timeout{60000};  // --elastic-drain-timeout (0: stop at once)
  /// --kubernetes-selector & co: hosts from Kubernetes pods instead of a script.
  KubernetesOptions kubernetes;
};

struct Options {
  // Placement
  std::optional<int> num_proc;  // -np; required unless elastic or a platform gives the slots
  std::string hosts;  // -H text as given ("h1:2,h2:4"); empty if not given
  std::optional<std::string> hostfile;  // --hostfile path
  // SSH
  std::optional<int> ssh_port;  // -p
  std::optional<std::string> ssh_identity_file;  // -i
  bool ssh_strict_host_key_checking = false;  // --ssh-strict-host-key-checking (hvdrun addition)
  std::optional<std::string> events_file;  // --events-file: JSON Lines record of the job (event_log.h)
  std::chrono::seconds ssh_keepalive{5};  // --ssh-keepalive: liveness probe interval of SSH connections
  std::chrono::seconds start_timeout{30};  // --start-timeout / HOROVOD_START_TIMEOUT
  std::vector<std::string> network_interfaces;  // --network-interface (comma list accepted)
  /// --hosts-from: auto (default), none, or a platform name
  /// (implemented_platforms(); docs/platforms.md).
  std::string hosts_from = "auto";
  /// --launcher: how workers on other hosts start: auto (srun inside a
  /// Slurm allocation whose nodes are the hosts, else ssh), ssh, or srun.
  /// apply_platform resolves auto to one of the other two.
  std::string launcher = "auto";
  /// Not a flag: with --launcher auto inside a Slurm allocation, its nodes
  /// (SLURM_JOB_NODELIST): workers on these start through srun, on any
  /// other host over SSH. Set by choose_host_source.
  std::vector<std::string> srun_nodes;
  // Output
  std::optional<std::string> output_filename;  // --output-filename DIR
  bool prefix_output_with_timestamp = false;
  bool verbose = false;
  // Misc horovodrun flags
  std::optional<std::string> config_file;
  bool disable_cache = false;
  bool check_build = false;
  DryRunFormat dry_run = DryRunFormat::None;  // hvdrun addition
  Engine engine = Engine::Native;  // --mpi / --gloo
  std::optional<std::string> mpi_args;  // --mpi-args
  bool tcp_flag = false;  // --tcp (accepted, no effect)
  /// --binding-args: under mpirun, replaces the default binding
  /// (`-bind-to none -map-by slot`), split shell-style (spawn/mpi/mpi_launch.h).
  std::optional<std::string> binding_args;
  TuningOptions tuning;
  ElasticOptions elastic;
  /// -x NAME or -x NAME=VALUE, in order given.
  std::vector<std::string> env_exports;
  /// Forward LD_PRELOAD-style loader variables (--forward-loader-env).
  bool forward_loader_env = false;
  /// Serve Horovod-style unauthenticated store requests (issue 3 flag).
  bool insecure_store = false;
  /// Grace period between SIGTERM and SIGKILL on teardown.
  std::chrono::milliseconds kill_grace{3000};
  /// The worker command, untouched.
  std::vector<std::string> command;
  /// Not a flag: a platform's per-machine variables, by host name, that the
  /// ranks on that host get instead of this machine's values (SageMaker's
  /// SM_CURRENT_HOST, Vertex's CLUSTER_SPEC task); set by apply_platform,
  /// applied per worker by make_plan.
  std::map<std::string, std::map<std::string, std::string>> host_env;
};

/// Documented exit codes of hvdrun itself (docs/exit-codes.md). A failed
/// worker's own status is passed through instead when a worker failed.
namespace exit_code {
inline constexpr int kOk = 0;
inline constexpr int kUsage = 2;  // bad flags, hosts, hostfile, config, too few slots
inline constexpr int kLaunch = 3;  // host unreachable, auth failed, start timeout
inline constexpr int kNotSupported = 4;  // a flag whose feature is not implemented yet
inline constexpr int kElastic = 5;  // elastic job gave up: below --min-np past --elastic-timeout, --reset-limit
                                    // exceeded, or members still running after the ending grace
inline constexpr int kPlatformFollower = 6;  // platform follower could not follow its leader (docs/platforms.md)
inline constexpr int kInternal = 70;  // EX_SOFTWARE: a bug in hvdrun
inline constexpr int kCommandNotFound = 127;
inline constexpr int kSigHup = 129;
inline constexpr int kSigInt = 130;
inline constexpr int kSigTerm = 143;
}  // namespace exit_code

/// The platforms this build implements, in `auto` detection order: the
/// values --hosts-from takes besides auto and none (the detectors are in
/// discovery/platform/).
const std::vector<std::string>& implemented_platforms();
/// Platforms the issue names that are not implemented yet (refused as
/// --hosts-from values).
const std::vector<std::string>& planned_platforms();

}  // namespace hvd::launcher
