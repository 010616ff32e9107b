// Command line -> Options. CLI11 does the option matching; this file adds
// what horovodrun users expect and CLI11 cannot express directly:
//  * horovodrun's single-dash long names (-np, -cb, -hostfile,
//    -prefix-timestamp) are rewritten to their long forms first;
//  * the worker command starts at the first positional argument and is
//    passed through untouched (a pre-scan finds it, so CLI11 never sees the
//    worker's own flags);
//  * numbers are parsed here so that messages name the flag as typed.
#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/job_env.h"
#include "hvd/common/logging.h"
#include "hvd/launcher/options/config_file.h"
#include "hvd/launcher/hosts/hosts.h"
#include "hvd/launcher/job/launcher.h"

#ifndef HVDRUN_VERSION
#define HVDRUN_VERSION "0.1.0"
#endif

namespace hvd::launcher {

namespace {

/// A flag of a later issue: parsed, then refused with exit code 4.
struct NotSupported {
  const char* flag;
  const char* feature;
};

constexpr NotSupported kNotSupported[] = {
    {"--jsrun", "jsrun/LSF mode"},
};

const std::map<std::string, std::string>& legacy_names() {
  static const std::map<std::string, std::string> names = {
      {"-np", "--num-proc"},
      {"-cb", "--check-build"},
      {"-hostfile", "--hostfile"},
      {"-prefix-timestamp", "--prefix-output-with-timestamp"},
  };
  return names;
}

ParseOutcome usage_error(const std::string& message) {
  ParseOutcome out;
  out.exit_code = exit_code::kUsage;
  out.message = "hvdrun: error: " + message + "\n";
  return out;
}

ParseOutcome not_supported(const std::string& what, const std::string& feature) {
  ParseOutcome out;
  out.exit_code = exit_code::kNotSupported;
  out.message = fmt::format("hvdrun: error: {} is not supported yet ({})\n", what, feature);
  return out;
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

/// CLI11's generic "Usage: hvdrun [OPTIONS]" hides the worker command.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: hvdrun -np N [-H host1:n1,host2:n2 | --hostfile FILE] [options] command [args...]\n";
  }
};

/// Builds the CLI11 app. Value options are bound to strings in `values`
/// (keyed by their main long name) and converted later by `Parsed`.
class Cli {
 public:
  Cli() : app_("hvdrun: run a Horovod job (a C++ horovodrun)", "hvdrun") {
    app_.formatter(std::make_shared<HelpFormatter>());
    app_.set_help_flag("-h,--help", "Show this help and exit");
    app_.footer(
        "Everything from the first positional argument on is the worker command, passed through\n"
        "untouched. horovodrun's spellings -np, -cb, -hostfile and -prefix-timestamp are accepted.\n"
        "See docs/cli.md for every flag and environment variable.");
    flag("-v,--version", "Show hvdrun's version and exit");
    value("--num-proc", "N", "-np/--num-proc N: total number of worker processes (required)", "Placement");
    flag("--check-build", "-cb/--check-build: show what this build provides and exit");
    value("-H,--hosts", "LIST", "Hosts and slots: host1:2,host2:4 (a bare host has 1 slot; default localhost:N)",
          "Placement");
    value("--hostfile", "FILE", "-hostfile/--hostfile FILE: lines 'host slots=N' (# comments allowed)", "Placement");
    flag("--disable-cache", "Accepted for compatibility (hvdrun keeps no check cache)");
    value("--start-timeout", "SECONDS", "Seconds to start all workers (default 30, or HOROVOD_START_TIMEOUT)");
    multi("--network-interface,--network-interfaces",
          "Interface(s) for the driver address and Gloo; comma list, repeatable");
    value("--output-filename", "DIR", "Also write each rank's output to DIR/rank.N/{stdout,stderr}", "Output");
    flag("--prefix-output-with-timestamp", "-prefix-timestamp: timestamp each output line", "Output");
    flag("--verbose", "More messages from hvdrun", "Output");
    value("--events-file", "FILE", "Write one JSON object per job event (start, exits, worlds, end) to FILE",
          "Output");
    value("--config-file", "FILE", "horovodrun YAML config file; command-line flags override it");
    value("-p,--ssh-port", "PORT", "SSH port on all hosts", "SSH");
    value("-i,--ssh-identity-file", "FILE", "SSH private key file", "SSH");
    flag("--ssh-strict-host-key-checking", "Refuse hosts not in known_hosts (default: accept and record new hosts)",
         "SSH");
    value("--ssh-keepalive", "SECONDS",
          "TCP keepalive interval of SSH connections; a host silent for about 4 intervals is lost (default 5)", "SSH");
    // Tuning parameters -> HOROVOD_* variables.
    const char* tune = "Tuning (become HOROVOD_* variables for workers)";
    value("--fusion-threshold-mb", "MB", "Fusion buffer threshold in MB (HOROVOD_FUSION_THRESHOLD, bytes)", tune);
    value("--cycle-time-ms", "MS", "Fusion cycle time in ms (HOROVOD_CYCLE_TIME)", tune);
    value("--cache-capacity", "N", "Response cache capacity (HOROVOD_CACHE_CAPACITY)", tune);
    pair("--hierarchical-allreduce", "--no-hierarchical-allreduce", "HOROVOD_HIERARCHICAL_ALLREDUCE=1/0", tune);
    pair("--hierarchical-allgather", "--no-hierarchical-allgather", "HOROVOD_HIERARCHICAL_ALLGATHER=1/0", tune);
    pair("--autotune", "--no-autotune", "HOROVOD_AUTOTUNE=1", tune);
    value("--autotune-log-file", "FILE", job_env::kAutotuneLog, tune);
    value("--autotune-warmup-samples", "N", job_env::kAutotuneWarmupSamples, tune);
    value("--autotune-steps-per-sample", "N", job_env::kAutotuneStepsPerSample, tune);
    value("--autotune-bayes-opt-max-samples", "N", job_env::kAutotuneBayesOptMaxSamples, tune);
    value("--autotune-gaussian-process-noise", "X", "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE, in [0, 1]", tune);
    value("--timeline-filename", "FILE", job_env::kTimeline, tune);
    pair("--timeline-mark-cycles", "--no-timeline-mark-cycles", "HOROVOD_TIMELINE_MARK_CYCLES=1", tune);
    pair("--no-stall-check", "--stall-check", "HOROVOD_STALL_CHECK_DISABLE=1", tune);
    value("--stall-check-warning-time-seconds", "SECONDS", job_env::kStallCheckTimeSeconds, tune);
    value("--stall-check-shutdown-time-seconds", "SECONDS", job_env::kStallShutdownTimeSeconds, tune);
    value("--log-level", "LEVEL", "HOROVOD_LOG_LEVEL: TRACE, DEBUG, INFO, WARNING, ERROR or FATAL", tune);
    pair("--log-without-timestamp,--log-hide-timestamp", "--log-with-timestamp,--no-log-hide-timestamp",
         "HOROVOD_LOG_HIDE_TIME=1", tune);
    value("--num-nccl-streams", "N", job_env::kNumNcclStreams, tune);
    value("--thread-affinity", "N", job_env::kThreadAffinity, tune);
    value("--gloo-timeout-seconds", "SECONDS", job_env::kGlooTimeoutSeconds, tune);
    flag("--tcp", "NCCL_IB_DISABLE=1 (TCP only)", tune);
    value("--binding-args", "ARGS", "Accepted for compatibility; only used by MPI/jsrun modes", tune);
    // Controllers.
    flag("--gloo", "Gloo-compatible controller (hvdrun's native engine; the default)", "Controller");
    flag("--mpi", "Start workers through mpirun (Open MPI, MPICH, Intel MPI; see docs/mpi.md)", "Controller");
    flag("--jsrun,--jsm", "jsrun launcher (not supported)", "Controller");
    value("--mpi-args", "ARGS", "Extra arguments for mpirun, split shell-style (with --mpi)", "Controller");
    pair("--mpi-threads-disable", "--no-mpi-threads-disable", "HOROVOD_MPI_THREADS_DISABLE=1/0 for workers (MPI threading off)",
         "Controller");
    // Elastic (issue 5): on when a discovery script is given.
    const char* elastic = "Elastic (on with --host-discovery-script; see docs/elastic.md)";
    value("--host-discovery-script", "SCRIPT",
          "Script (or shell command) printing 'host' or 'host:slots' lines; turns elastic mode on", elastic);
    value("--min-np,--min-num-proc", "N", "Fewest workers to train with (default: -np)", elastic);
    value("--max-np,--max-num-proc", "N", "Most workers to run (default: no limit)", elastic);
    value("--slots-per-host", "N", "Slots of a discovered host printed without :slots (default 1)", elastic);
    value("--elastic-timeout", "SECONDS",
          "Give up after this long below --min-np (default 600, or HOROVOD_ELASTIC_TIMEOUT)", elastic);
    value("--reset-limit", "N", "Give up after this many re-formations (default: no limit)", elastic);
    auto* cooldown = app_.add_option("--blacklist-cooldown-range", cooldown_,
                                     "MIN MAX seconds a blacklisted host is ignored (grows on repeated failures)");
    cooldown->expected(2)->group(elastic)->type_name("MIN MAX");
    options_["--blacklist-cooldown-range"] = cooldown;
    value("--discovery-interval", "SECONDS", "Seconds between discovery runs (default 1, fractions allowed)",
          elastic);
    value("--discovery-timeout", "SECONDS", "A discovery run taking longer is killed (default 10)", elastic);
    value("--blacklist-failures", "N",
          "Worker failures on one host within --blacklist-window that blacklist it (default 3)", elastic);
    value("--blacklist-window", "SECONDS", "Window for --blacklist-failures (default 60)", elastic);
    // hvdrun additions.
    const char* add = "hvdrun additions";
    auto* dry = app_.add_option("--dry-run", values_["--dry-run"],
                                "--dry-run[=text|json]: print placement and worker commands; start nothing");
    dry->expected(0, 1)->group(add)->type_name("[=text|json]");
    options_["--dry-run"] = dry;
    multi("-x", "-x NAME or -x NAME=VALUE: forward or set a worker environment variable (repeatable)", add);
    options_["-x"]->type_name("NAME[=VALUE]");
    flag("--forward-loader-env", "Also forward LD_PRELOAD-style loader variables", add);
    flag("--insecure-store", "Serve unauthenticated Horovod-style store requests", add);
    value("--kill-grace-ms", "MS", "Milliseconds between SIGTERM and SIGKILL on teardown (default 3000)", add);
  }

  CLI::App& app() { return app_; }

  /// Number of tokens `token` consumes after itself, for the pre-scan.
  int values_after(const std::string& token) {
    if (token.rfind("--", 0) == 0) {
      if (token.find('=') != std::string::npos) return 0;
      CLI::Option* opt = app_.get_option_no_throw(token);
      return opt ? std::max(0, opt->get_items_expected_min()) : 0;
    }
    // Short option: "-H" takes the next token; "-Hvalue" carries its value.
    if (token.size() == 2) {
      CLI::Option* opt = app_.get_option_no_throw(token);
      return opt ? std::max(0, opt->get_items_expected_min()) : 0;
    }
    return 0;
  }

  bool given(const std::string& key) const {
    auto it = options_.find(key);
    return it != options_.end() && it->second->count() > 0;
  }
  bool on(const std::string& key) const { return given(key); }
  const std::string& text(const std::string& key) { return values_[key]; }
  const std::vector<std::string>& list(const std::string& key) { return lists_[key]; }
  const std::vector<std::string>& cooldown() const { return cooldown_; }
  /// --x/--no-x pairs; giving both is a usage error.
  const std::vector<std::pair<std::string, std::string>>& pairs() const { return pairs_; }

  /// Integer value of a value option, or nullopt if not given.
  std::optional<long> integer(const std::string& key, const std::string& shown, long min) {
    if (!given(key)) return std::nullopt;
    auto v = hvd::env::parse_int(values_[key]);
    if (!v) throw InvalidArgument(fmt::format("{} '{}' is not an integer", shown, values_[key]));
    if (*v < min) throw InvalidArgument(fmt::format("{} must be at least {}, not {}", shown, min, *v));
    return static_cast<long>(*v);
  }
  std::optional<double> number(const std::string& key, double min, double max) {
    if (!given(key)) return std::nullopt;
    auto v = hvd::env::parse_double(values_[key]);
    if (!v) throw InvalidArgument(fmt::format("{} '{}' is not a number", key, values_[key]));
    if (*v < min || *v > max) {
      throw InvalidArgument(max > 1e300 ? fmt::format("{} must be >= {}, not {}", key, min, values_[key])
                                        : fmt::format("{} must be in [{}, {}], not {}", key, min, max, values_[key]));
    }
    return v;
  }
  std::optional<std::string> string(const std::string& key) {
    if (!given(key)) return std::nullopt;
    return values_[key];
  }
  /// A positive number of seconds (fractions allowed), as milliseconds.
  std::optional<std::chrono::milliseconds> seconds(const std::string& key) {
    if (!given(key)) return std::nullopt;
    auto v = hvd::env::parse_double(values_[key]);
    if (!v) throw InvalidArgument(fmt::format("{} '{}' is not a number of seconds", key, values_[key]));
    if (!(*v > 0) || *v > 1e6) {
      throw InvalidArgument(fmt::format("{} must be a number of seconds > 0, not {}", key, values_[key]));
    }
    return std::chrono::milliseconds(std::max(1LL, std::llround(*v * 1000)));
  }
  /// optional<bool> from a --x/--no-x pair.
  std::optional<bool> toggle(const std::string& yes, const std::string& no) {
    if (given(yes)) return true;
    if (given(no)) return false;
    return std::nullopt;
  }

 private:
  static std::string key_of(const std::string& names) {
    // The main key is the first long name, else the first name.
    std::stringstream ss(names);
    std::string n, first;
    while (std::getline(ss, n, ',')) {
      if (first.empty()) first = n;
      if (n.rfind("--", 0) == 0) return n;
    }
    return first;
  }
  void flag(const std::string& names, const std::string& desc, const std::string& group = "General") {
    options_[key_of(names)] = app_.add_flag(names, desc)->group(group);
  }
  void value(const std::string& names, const std::string& type, const std::string& desc,
             const std::string& group = "General") {
    std::string key = key_of(names);
    options_[key] = app_.add_option(names, values_[key], desc)->group(group)->type_name(type);
  }
  void multi(const std::string& names, const std::string& desc, const std::string& group = "General") {
    std::string key = key_of(names);
    auto* opt = app_.add_option(names, lists_[key], desc)->group(group)->type_name("NAME[,NAME...]");
    opt->expected(1)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
    options_[key] = opt;
  }
  void pair(const std::string& yes, const std::string& no, const std::string& desc, const std::string& group) {
    auto* y = app_.add_flag(yes, desc)->group(group);
    auto* n = app_.add_flag(no, "")->group("");  // hidden, as in horovodrun
    options_[key_of(yes)] = y;
    options_[key_of(no)] = n;
    pairs_.emplace_back(key_of(yes), key_of(no));
  }

  CLI::App app_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::vector<std::string>> lists_;
  std::map<std::string, CLI::Option*> options_;
  std::vector<std::string> cooldown_;
  std::vector<std::pair<std::string, std::string>> pairs_;
};

std::optional<int> to_int(std::optional<long> v) {
  if (!v) return std::nullopt;
  if (*v > 1000000000L) throw InvalidArgument(fmt::format("value {} is too large", *v));
  return static_cast<int>(*v);
}

/// Fills Options from a parsed Cli. Throws InvalidArgument on bad values.
void fill_options(Cli& cli, Options& o) {
  for (const auto& [yes, no] : cli.pairs()) {
    if (cli.given(yes) && cli.given(no)) throw InvalidArgument(fmt::format("{} and {} contradict each other", yes, no));
  }
  o.num_proc = to_int(cli.integer("--num-proc", "-np", 1));
  o.check_build = cli.on("--check-build");
  if (auto h = cli.string("--hosts")) {
    o.hosts = *h;
    if (o.hosts.empty()) throw InvalidArgument("-H: empty host list (expected e.g. -H host1:2,host2:2)");
  }
  o.hostfile = cli.string("--hostfile");
  if (cli.given("--hosts") && o.hostfile) {
    throw InvalidArgument("-H/--hosts and --hostfile cannot be used together; give hosts one way");
  }
  o.disable_cache = cli.on("--disable-cache");
  if (auto t = cli.integer("--start-timeout", "--start-timeout", 1)) {
    o.start_timeout = std::chrono::seconds(*t);
  } else if (auto env_text = hvd::env::get(job_env::kStartTimeout)) {
    auto v = hvd::env::parse_int(*env_text);
    if (!v || *v < 1) {
      throw InvalidArgument(fmt::format("HOROVOD_START_TIMEOUT='{}' is not a positive number of seconds", *env_text));
    }
    o.start_timeout = std::chrono::seconds(*v);
  }
  for (const auto& item : cli.list("--network-interface")) {
    for (const auto& nic : split_commas(item)) {
      if (std::find(o.network_interfaces.begin(), o.network_interfaces.end(), nic) == o.network_interfaces.end()) {
        o.network_interfaces.push_back(nic);
      }
    }
  }
  if (cli.given("--network-interface") && o.network_interfaces.empty()) {
    throw InvalidArgument("--network-interface: empty interface list");
  }
  o.output_filename = cli.string("--output-filename");
  if (o.output_filename && o.output_filename->empty()) throw InvalidArgument("--output-filename: empty directory name");
  o.prefix_output_with_timestamp = cli.on("--prefix-output-with-timestamp");
  o.verbose = cli.on("--verbose");
  o.events_file = cli.string("--events-file");
  if (o.events_file && o.events_file->empty()) throw InvalidArgument("--events-file: empty file name");
  o.config_file = cli.string("--config-file");
  o.ssh_port = to_int(cli.integer("--ssh-port", "-p/--ssh-port", 1));
  if (o.ssh_port && *o.ssh_port > 65535)
    throw InvalidArgument(fmt::format("-p/--ssh-port {} is not a port number", *o.ssh_port));
  o.ssh_identity_file = cli.string("--ssh-identity-file");
  o.ssh_strict_host_key_checking = cli.on("--ssh-strict-host-key-checking");
  if (auto k = cli.integer("--ssh-keepalive", "--ssh-keepalive", 1)) o.ssh_keepalive = std::chrono::seconds(*k);

  TuningOptions& t = o.tuning;
  t.fusion_threshold_mb = cli.number("--fusion-threshold-mb", 0, 1e308);
  t.cycle_time_ms = cli.number("--cycle-time-ms", 0, 1e308);
  t.cache_capacity = cli.integer("--cache-capacity", "--cache-capacity", 0);
  t.hierarchical_allreduce = cli.toggle("--hierarchical-allreduce", "--no-hierarchical-allreduce");
  t.hierarchical_allgather = cli.toggle("--hierarchical-allgather", "--no-hierarchical-allgather");
  t.autotune = cli.toggle("--autotune", "--no-autotune");
  t.autotune_log_file = cli.string("--autotune-log-file");
  t.autotune_warmup_samples = cli.integer("--autotune-warmup-samples", "--autotune-warmup-samples", 0);
  t.autotune_steps_per_sample = cli.integer("--autotune-steps-per-sample", "--autotune-steps-per-sample", 0);
  t.autotune_bayes_opt_max_samples =
      cli.integer("--autotune-bayes-opt-max-samples", "--autotune-bayes-opt-max-samples", 0);
  t.autotune_gaussian_process_noise = cli.number("--autotune-gaussian-process-noise", 0, 1);
  t.timeline_filename = cli.string("--timeline-filename");
  t.timeline_mark_cycles = cli.toggle("--timeline-mark-cycles", "--no-timeline-mark-cycles");
  t.no_stall_check = cli.toggle("--no-stall-check", "--stall-check");
  t.stall_check_warning_time_seconds =
      cli.integer("--stall-check-warning-time-seconds", "--stall-check-warning-time-seconds", 0);
  t.stall_check_shutdown_time_seconds =
      cli.integer("--stall-check-shutdown-time-seconds", "--stall-check-shutdown-time-seconds", 0);
  if (auto level = cli.string("--log-level")) {
    try {
      t.log_level = normalize_log_level(*level);
    } catch (const InvalidArgument& e) {
      throw InvalidArgument(std::string("--log-level: ") + e.what());
    }
  }
  t.log_hide_timestamp = cli.toggle("--log-without-timestamp", "--log-with-timestamp");
  t.num_nccl_streams = cli.integer("--num-nccl-streams", "--num-nccl-streams", 0);
  t.thread_affinity = cli.integer("--thread-affinity", "--thread-affinity", 0);
  t.gloo_timeout_seconds = cli.integer("--gloo-timeout-seconds", "--gloo-timeout-seconds", 0);
  o.tcp_flag = cli.on("--tcp");
  o.binding_args_given = cli.given("--binding-args");
  if (cli.on("--gloo") && cli.on("--mpi")) throw InvalidArgument("--gloo and --mpi contradict each other");
  if (cli.on("--gloo")) o.engine = Engine::Gloo;
  // MPI mode: hvdrun drives an installed mpirun (docs/mpi.md).
  if (cli.on("--mpi")) o.engine = Engine::Mpi;
  o.mpi_args = cli.string("--mpi-args");
  if (!o.mpi_args) o.mpi_args = hvd::env::get("HOROVOD_MPI_ARGS");  // used only with --mpi
  t.mpi_threads_disable = cli.toggle("--mpi-threads-disable", "--no-mpi-threads-disable");

  if (cli.given("--dry-run")) {
    const std::string& f = cli.text("--dry-run");
    if (f.empty() || f == "text") {
      o.dry_run = DryRunFormat::Text;
    } else if (f == "json") {
      o.dry_run = DryRunFormat::Json;
    } else {
      throw InvalidArgument(fmt::format("--dry-run={}: expected --dry-run, --dry-run=text or --dry-run=json", f));
    }
  }
  for (const auto& item : cli.list("-x")) {
    size_t eq = item.find('=');
    std::string name = item.substr(0, eq);
    if (name.empty() || name.find_first_of(" \t\n") != std::string::npos) {
      throw InvalidArgument(fmt::format("-x '{}': expected -x NAME or -x NAME=VALUE", item));
    }
    o.env_exports.push_back(item);
  }
  o.forward_loader_env = cli.on("--forward-loader-env");
  o.insecure_store = cli.on("--insecure-store");
  if (auto ms = cli.integer("--kill-grace-ms", "--kill-grace-ms", 0)) o.kill_grace = std::chrono::milliseconds(*ms);
}

/// The elastic flags that only make sense with --host-discovery-script.
constexpr const char* kElasticFlags[] = {
    "--min-np",          "--max-np",           "--slots-per-host",     "--elastic-timeout",    "--reset-limit",
    "--blacklist-cooldown-range", "--discovery-interval", "--discovery-timeout", "--blacklist-failures",
    "--blacklist-window",
};

/// The elastic flags given on the command line, each range-checked.
ElasticSettings elastic_from_cli(Cli& cli) {
  ElasticSettings e;
  e.min_np = to_int(cli.integer("--min-np", "--min-np", 1));
  e.max_np = to_int(cli.integer("--max-np", "--max-np", 1));
  e.slots_per_host = to_int(cli.integer("--slots-per-host", "--slots-per-host", 1));
  if (auto script = cli.string("--host-discovery-script")) {
    if (script->find_first_not_of(" \t") == std::string::npos) {
      throw InvalidArgument(
          "--host-discovery-script: empty script (expected e.g. --host-discovery-script ./discover.sh)");
    }
    e.host_discovery_script = *script;
  }
  if (auto t = to_int(cli.integer("--elastic-timeout", "--elastic-timeout", 1))) {
    e.elastic_timeout = std::chrono::seconds(*t);
  }
  e.reset_limit = to_int(cli.integer("--reset-limit", "--reset-limit", 0));
  if (cli.given("--blacklist-cooldown-range")) {
    const auto& range = cli.cooldown();
    HVD_ENFORCE(range.size() == 2, "--blacklist-cooldown-range takes exactly two values");
    int bounds[2];
    for (int k = 0; k < 2; ++k) {
      auto v = hvd::env::parse_int(range[static_cast<size_t>(k)]);
      if (!v || *v < 0 || *v > 1000000000L) {
        throw InvalidArgument(fmt::format("--blacklist-cooldown-range: '{}' is not a number of seconds >= 0",
                                          range[static_cast<size_t>(k)]));
      }
      bounds[k] = static_cast<int>(*v);
    }
    if (bounds[0] > bounds[1]) {
      throw InvalidArgument(
          fmt::format("--blacklist-cooldown-range: MIN {} is greater than MAX {}", bounds[0], bounds[1]));
    }
    e.blacklist_cooldown_range = std::make_pair(bounds[0], bounds[1]);
  }
  e.discovery_interval = cli.seconds("--discovery-interval");
  e.discovery_timeout = cli.seconds("--discovery-timeout");
  e.blacklist_failures = to_int(cli.integer("--blacklist-failures", "--blacklist-failures", 1));
  e.blacklist_window = cli.seconds("--blacklist-window");
  return e;
}

/// Is `name` an executable file in a folder of PATH?
bool in_path(const std::string& name) {
  const auto path = hvd::env::get("PATH");
  if (!path) return false;
  std::stringstream ss(*path);
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    if (dir.empty()) dir = ".";
    const std::string candidate = dir + "/" + name;
    struct stat st {};
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return true;
    }
  }
  return false;
}

/// A discovery script given as one word must exist now: a typo found at
/// the first discovery run would look like a broken script. A command with
/// spaces is left to the shell (its first run reports what went wrong).
void check_discovery_script(const std::string& script) {
  if (script.find_first_of(" \t\n;|&<>()$`'\"") != std::string::npos) return;
  const std::string flag = "--host-discovery-script";
  if (script.find('/') == std::string::npos) {
    if (in_path(script)) return;
    struct stat st {};
    if (::stat(script.c_str(), &st) == 0) {
      throw InvalidArgument(
          fmt::format("{} '{}' is not a command in PATH; give it as a path, e.g. ./{}", flag, script, script));
    }
    throw InvalidArgument(fmt::format("{} '{}': no such file or command", flag, script));
  }
  struct stat st {};
  if (::stat(script.c_str(), &st) != 0) {
    throw InvalidArgument(fmt::format("{} '{}': {}", flag, script, std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) throw InvalidArgument(fmt::format("{} '{}' is a directory", flag, script));
  if (::access(script.c_str(), X_OK) != 0) {
    throw InvalidArgument(fmt::format("{} '{}' is not executable (chmod +x {})", flag, script, script));
  }
}

/// Merges the elastic settings (command line over config file over
/// HOROVOD_ELASTIC_TIMEOUT over defaults) into `o` and checks them together.
/// Elastic mode is on exactly when a discovery script is given.
void finish_elastic(Cli& cli, Options& o, const ElasticSettings& from_cli, const ConfigFileValues* file) {
  const ElasticSettings merged = file ? overlay(from_cli, file->elastic) : from_cli;
  if (!merged.host_discovery_script) {
    for (const char* flag : kElasticFlags) {
      if (cli.given(flag)) throw InvalidArgument(fmt::format("{} needs --host-discovery-script (elastic mode)", flag));
    }
    if (file && file->elastic_given) {
      spdlog::warn("{}: elastic settings ignored: no host_discovery_script or --host-discovery-script "
                   "(elastic mode is off)",
                   *o.config_file);
    }
    return;
  }
  const std::string script_source = from_cli.host_discovery_script
                                        ? std::string("--host-discovery-script")
                                        : fmt::format("elastic.host_discovery_script in {}", *o.config_file);
  if (cli.given("--hosts")) {
    throw InvalidArgument(fmt::format(
        "{} and -H/--hosts cannot be used together: in elastic mode the discovery script lists the hosts",
        script_source));
  }
  if (o.hostfile) {
    throw InvalidArgument(fmt::format(
        "{} and --hostfile cannot be used together: in elastic mode the discovery script lists the hosts",
        script_source));
  }
  if (o.engine == Engine::Mpi) {
    throw InvalidArgument(fmt::format("{} (elastic mode) cannot be used with --mpi: elastic jobs use hvdrun's "
                                      "own controller",
                                      script_source));
  }
  ElasticOptions& e = o.elastic;
  apply_elastic_settings(merged, e);
  if (!merged.elastic_timeout) {
    if (auto env_text = hvd::env::get(job_env::kElasticTimeout)) {
      auto v = hvd::env::parse_int(*env_text);
      if (!v || *v < 1 || *v > 1000000000L) {
        throw InvalidArgument(
            fmt::format("HOROVOD_ELASTIC_TIMEOUT='{}' is not a positive number of seconds", *env_text));
      }
      e.elastic_timeout = std::chrono::seconds(*v);
    }
  }
  if (e.min_np && e.max_np && *e.min_np > *e.max_np) {
    throw InvalidArgument(fmt::format("--min-np {} is greater than --max-np {}", *e.min_np, *e.max_np));
  }
  if (!o.num_proc) {
    if (!e.min_np) {
      throw InvalidArgument(
          "-np or --min-np is required in elastic mode (e.g. hvdrun --min-np 2 --host-discovery-script "
          "./discover.sh python train.py)");
    }
    o.num_proc = e.min_np;  // horovodrun starts elastic jobs at --min-np when -np is absent
  }
  if (e.min_np && *e.min_np > *o.num_proc) {
    throw InvalidArgument(fmt::format("--min-np {} is greater than -np {}", *e.min_np, *o.num_proc));
  }
  if (e.max_np && *o.num_proc > *e.max_np) {
    throw InvalidArgument(fmt::format("-np {} is greater than --max-np {}", *o.num_proc, *e.max_np));
  }
  check_discovery_script(*e.host_discovery_script);
}

/// True while `flag` is listed in kNotSupported.
bool refused_flag_named(const std::string& flag) {
  for (const auto& ns : kNotSupported) {
    if (flag == ns.flag) return true;
  }
  return false;
}

/// The flag of a later issue that was given, if any.
const NotSupported* refused_flag(Cli& cli) {
  for (const auto& ns : kNotSupported) {
    if (cli.given(ns.flag)) return &ns;
  }
  return nullptr;
}

}  // namespace

ParseOutcome parse_command_line(int argc, char** argv) {
  // Messages during parsing (config warnings) must go to stderr, never
  // into --dry-run output on stdout.
  hvd::init_logging("hvdrun", spdlog::level::info);

  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);

  Cli cli;
  // Pre-scan: rewrite legacy names and find where the worker command starts.
  std::vector<std::string> ours;
  std::vector<std::string> command;
  size_t i = 0;
  while (i < args.size()) {
    std::string token = args[i];
    if (token == "--") {
      command.assign(args.begin() + static_cast<long>(i) + 1, args.end());
      break;
    }
    if (token.size() < 2 || token[0] != '-') {
      command.assign(args.begin() + static_cast<long>(i), args.end());
      break;
    }
    std::string name = token.substr(0, token.find('='));
    auto legacy = legacy_names().find(name);
    if (legacy != legacy_names().end()) token = legacy->second + token.substr(name.size());
    ours.push_back(token);
    int n = cli.values_after(token);
    ++i;
    for (int k = 0; k < n && i < args.size(); ++k, ++i) ours.push_back(args[i]);
  }

  std::vector<std::string> reversed(ours.rbegin(), ours.rend());
  try {
    cli.app().parse(reversed);
  } catch (const CLI::CallForHelp&) {
    ParseOutcome out;
    out.exit_code = exit_code::kOk;
    out.message = cli.app().help();
    out.message_to_stdout = true;
    return out;
  } catch (const CLI::ParseError& e) {
    std::string what = e.what();
    if (what.rfind("--num-proc:", 0) == 0) what = "-np/" + what;
    return usage_error(fmt::format("{} (see hvdrun --help)", what));
  }
  if (cli.on("--version")) {
    ParseOutcome out;
    out.exit_code = exit_code::kOk;
    out.message = "hvdrun " HVDRUN_VERSION "\n";
    out.message_to_stdout = true;
    return out;
  }
  if (const NotSupported* ns = refused_flag(cli)) return not_supported(ns->flag, ns->feature);

  Options o;
  try {
    fill_options(cli, o);
    const ElasticSettings elastic_cli = elastic_from_cli(cli);
    std::optional<ConfigFileValues> file;
    if (o.config_file) {
      file = load_config_file(*o.config_file);
      if (file->engine && !cli.given("--gloo") && !cli.given("--mpi")) o.engine = *file->engine;
      if (o.engine == Engine::Mpi && refused_flag_named("--mpi")) {
        return not_supported(fmt::format("'controller: mpi' in {}", *o.config_file), "MPI mode, issue 4");
      }
      if (file->ccl_bgt_affinity) {
        spdlog::warn("{}: library_options.ccl_bgt_affinity only applies to CCL; ignored", *o.config_file);
      }
      merge_config(o, *file);
    }
    finish_elastic(cli, o, elastic_cli, file ? &*file : nullptr);
  } catch (const InvalidArgument& e) {
    return usage_error(e.what());
  }
  if (o.binding_args_given && o.engine != Engine::Mpi)
    spdlog::warn("--binding-args only applies to MPI/jsrun modes; ignored");
  if (o.verbose) hvd::init_logging("hvdrun", spdlog::level::debug);

  if (o.check_build) {
    ParseOutcome out;
    out.options = std::move(o);
    return out;
  }
  if (!o.num_proc) return usage_error("-np/--num-proc is required (e.g. hvdrun -np 4 python train.py)");
  if (command.empty()) return usage_error("no command given (e.g. hvdrun -np 2 python train.py)");
  if (looks_like_host_entry(command.front())) {
    // The `-H a:2 b:2 python x.py` typo: b:2 would become the command.
    std::vector<std::string> more;
    for (const auto& c : command) {
      if (!looks_like_host_entry(c)) break;
      more.push_back(c);
    }
    std::string joined = o.hosts;
    for (const auto& h : more) joined += (joined.empty() ? "" : ",") + h;
    if (!o.hosts.empty()) {
      return usage_error(fmt::format("'{}' looks like a host; join hosts with commas: -H {}", command.front(), joined));
    }
    return usage_error(
        fmt::format("'{}' looks like a host, not a command; give hosts with -H {}", command.front(), joined));
  }
  o.command = std::move(command);
  ParseOutcome out;
  out.options = std::move(o);
  return out;
}

}  // namespace hvd::launcher
