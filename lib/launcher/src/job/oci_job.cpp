// OCI Data Science job runs: MAIN and WORKER (docs/platforms.md#oci-data-science).
#include "hvd/launcher/job/oci_job.h"

#include <fmt/format.h>
#include <signal.h>
#include <spdlog/spdlog.h>

#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "hvd/common/error.h"
#include "hvd/common/net.h"
#include "hvd/common/secret.h"
#include "hvd/launcher/discovery/choose.h"
#include "hvd/launcher/discovery/platform/oci.h"
#include "hvd/launcher/discovery/shared_dir/registry.h"
#include "hvd/launcher/hosts/network.h"
#include "hvd/launcher/job/dry_run_report.h"
#include "hvd/launcher/job/hvdrun_main.h"
#include "hvd/launcher/job/modes.h"
#include "hvd/launcher/options/cli.h"
#include "hvd/launcher/plan/worker_env.h"
#include "hvd/launcher/process/report.h"
#include "hvd/launcher/process/shell.h"
#include "hvd/launcher/process/signal_guard.h"
#include "hvd/launcher/process/signals.h"

namespace hvd::launcher {

namespace {

using platform::OciConfig;
using shared_dir::Registry;

/// Calls `beat` every `interval` on a thread of its own until stop() (or
/// destruction). A failing beat is reported once per distinct message.
/// Start it after the run's SignalGuard: the thread inherits its mask, so
/// hvdrun's signals never land here.
class Heartbeat {
 public:
  Heartbeat(std::chrono::milliseconds interval, std::function<void()> beat)
      : interval_(interval), beat_(std::move(beat)), thread_([this] { loop(); }) {}
  ~Heartbeat() { stop(); }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  void loop() {
    std::string last_error;
    std::unique_lock<std::mutex> lock(mutex_);
    while (!cv_.wait_for(lock, interval_, [this] { return stopping_; })) {
      lock.unlock();
      try {
        beat_();
        last_error.clear();
      } catch (const std::exception& e) {
        if (e.what() != last_error) spdlog::warn("heartbeat: {}", e.what());
        last_error = e.what();
      }
      lock.lock();
    }
  }

  std::chrono::milliseconds interval_;
  std::function<void()> beat_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after the members it uses
};

/// Whether a platform before oci in `auto` order is detected here (a
/// malformed one counts: the normal path reports it).
bool earlier_platform_detected(const Environment& ctx) {
  for (const auto& name : implemented_platforms()) {
    if (name == "oci") return false;
    try {
      if (platform::detect(name, ctx)) return true;
    } catch (const InvalidArgument&) {
      return true;
    }
  }
  return false;
}

/// Something listens on `port` here (the WORKER's sshd), on `address` or loopback.
bool listening(const std::string& address, int port) {
  for (const std::string& host : {address, std::string("127.0.0.1")}) {
    if (net::connect_tcp(host, static_cast<uint16_t>(port), Deadline::after(std::chrono::seconds(1))).ok()) {
      return true;
    }
  }
  return false;
}

int run_main(const Options& flags, const OciConfig& config, const std::string& address) {
  Options options = flags;
  if (options.network_interfaces.empty()) {
    // The store listens on the MAIN's own address from the start: when the
    // job starts, the MAIN may be its only host (workers register later),
    // and an all-local job would keep the store on 127.0.0.1.
    for (const auto& a : local_interface_addresses()) {
      if (a.address == address) {
        options.network_interfaces = {a.interface};
        spdlog::debug("OCI MAIN: the store and the workers use interface {} ({})", a.interface, address);
        break;
      }
    }
  }
  Registry registry(config.job_dir(), kOciHeartbeatStale);
  registry.check_directory();  // a directory others could swap is refused, dry run or not (exit 2)
  const HostSpec self{address, config.slots};
  if (options.dry_run != DryRunFormat::None) {
    shared_dir::SharedDirHostSource source(registry, self);
    DryRunReport report;
    if (options.dry_run == DryRunFormat::Text) report.oci_header = platform::render_oci(config, address);
    report.elastic = look_once(source, options.num_proc.value_or(1));
    std::fputs(render_dry_run_report(report, options.dry_run).c_str(), stdout);
    return exit_code::kOk;
  }
  // From the marker on, a signal must reach the job (which writes the
  // status) and not end hvdrun before it: blocked here, the job's
  // SignalGuard reads any that is pending.
  SignalGuard signals;
  try {
    registry.create_directories();
    if (auto other = registry.read_leader(); other && !registry.stale(*other) && other->address != address) {
      spdlog::warn("{}: another MAIN ({}, run {}) refreshed its heartbeat {}; this run takes over", registry.dir(),
                   other->address, other->run, registry.describe_age(*other));
    }
    const std::string run = config.run_id + "-" + random_secret(4);
    registry.write_leader(address, run);
    spdlog::info("OCI MAIN at {} (run {}): workers register in {}; waiting up to {} s for {} slot{} (MIN_NP)", address,
                 run, registry.dir(), config.start_timeout.count(), options.elastic.min_np.value_or(1),
                 options.elastic.min_np.value_or(1) == 1 ? "" : "s");
    Heartbeat heartbeat(kOciHeartbeatInterval, [&] { registry.write_leader(address, run); });
    int code = exit_code::kInternal;
    shared_dir::SharedDirHostSource source(registry, self);
    try {
      code = run_elastic_job(options, source);
    } catch (...) {
      heartbeat.stop();
      registry.write_status(run, exit_code::kInternal, source.tokens_seen());
      registry.remove_leader();
      throw;
    }
    heartbeat.stop();
    // The status names the workers the job listed: one whose whole job
    // ended between two of its looks never saw MAIN.json, and finds it so.
    registry.write_status(run, code, source.tokens_seen());
    registry.remove_leader();  // after the status: a follower looks for the status first
    return code;
  } catch (const IoError& e) {
    throw JobError(exit_code::kLaunch, e.what());
  }
}

int run_worker(const Options& options, const OciConfig& config, const std::string& address) {
  Registry registry(config.job_dir(), kOciHeartbeatStale);
  registry.check_directory();  // a directory others could swap is refused, dry run or not (exit 2)
  const HostSpec self{address, config.slots};
  const int port = options.ssh_port.value_or(22);  // WORKER_PORT, unless HOROVOD_ARGS or the command line say -p
  if (options.command != config.entry_command &&
      options.command != std::vector<std::string>{platform::kWorkerPlaceholder}) {
    spdlog::warn("the command '{}' is ignored here: a WORKER runs none itself (the MAIN starts this machine's ranks)",
                 shell_join(options.command));
  }
  if (options.dry_run != DryRunFormat::None) {
    DryRunReport report;
    if (options.dry_run == DryRunFormat::Text) report.oci_header = platform::render_oci(config, address);
    report.oci_worker = OciWorkerDryRun{address, config.slots, registry.dir()};
    std::fputs(render_dry_run_report(report, options.dry_run).c_str(), stdout);
    return exit_code::kOk;
  }
  if (!listening(address, port)) {
    spdlog::warn(
        "nothing listens on port {} here: the MAIN reaches this WORKER's sshd there (WORKER_PORT); the "
        "container entrypoint starts it (conf/oci/entrypoint.sh)",
        port);
  }
  SignalGuard signals;  // before the heartbeat thread: it inherits the mask
  // This run's token, named by the MAIN's status. 8 hex digits, so that the
  // status of a job of 4096 workers (the most a listing looks at) stays
  // well under the 64 KiB a registry file may have.
  const std::string token = random_secret(4);
  try {
    registry.create_directories();
    registry.register_worker(config.run_id, self, token);
  } catch (const IoError& e) {
    throw JobError(exit_code::kLaunch, e.what());
  }
  struct Unregister {
    const Registry& registry;
    const std::string& name;
    ~Unregister() { registry.unregister_worker(name); }
  } unregister{registry, config.run_id};
  Heartbeat heartbeat(kOciHeartbeatInterval, [&] { registry.register_worker(config.run_id, self, token); });
  spdlog::info("OCI WORKER: registered {} in {}; waiting up to {} s for the MAIN (START_TIMEOUT)", format_host(self),
               registry.dir(), config.start_timeout.count());

  const auto started = std::chrono::steady_clock::now();
  std::optional<shared_dir::Leader> following;
  std::set<std::string> reported;  // a file that is not trusted (another user's, a FIFO, ...): one warning each
  auto report = [&](const std::string& problem) {
    if (problem.empty() || problem.rfind("no ", 0) == 0 || !reported.insert(problem).second) return;
    spdlog::warn("{}: ignored: {}", registry.dir(), problem);
  };
  while (true) {
    if (int sig = signals.wait(std::chrono::milliseconds(250))) {
      spdlog::warn("received {}; unregistering from {}", signal_name(sig), registry.dir());
      return 128 + sig;
    }
    std::string problem;
    const auto leader = registry.read_leader(&problem);
    report(problem);
    if (!following) {
      if (leader && !registry.stale(*leader)) {
        following = leader;
        spdlog::info("following the MAIN at {} (run {})", leader->address, leader->run);
        continue;
      }
      // A job can form and end between two looks (a rank failing at
      // once): its MAIN.json is gone, but its status names this run.
      if (auto ended = registry.read_status_naming(token)) {
        spdlog::info("the MAIN's job ended with status {} (run {}, over before this WORKER saw its MAIN.json)",
                     ended->second, ended->first);
        return ended->second;
      }
      if (std::chrono::steady_clock::now() - started > config.start_timeout) {
        throw JobError(
            exit_code::kPlatformFollower,
            fmt::format("no MAIN appeared in {} within START_TIMEOUT {} s ({}): is the MAIN job run "
                        "started, with the same OCI__WORK_DIR?",
                        registry.dir(), static_cast<long long>(config.start_timeout.count()),
                        leader ? fmt::format("MAIN.json of {} is {}", leader->address, registry.describe_age(*leader))
                               : problem));
      }
      continue;
    }
    std::string status_problem;
    if (auto status = registry.read_status(following->run, &status_problem)) {
      spdlog::info("the MAIN's job ended with status {}", *status);
      return *status;
    }
    report(status_problem);
    if (leader && leader->run != following->run && !registry.stale(*leader)) {
      spdlog::warn("a new MAIN run at {} (run {}) replaced run {}; following it", leader->address, leader->run,
                   following->run);
      following = leader;
      continue;
    }
    if (!leader || registry.stale(*leader)) {
      if (auto status = registry.read_status(following->run)) return *status;
      throw JobError(
          exit_code::kPlatformFollower,
          fmt::format("the MAIN at {} stopped refreshing its heartbeat in {} ({}) and wrote no status: it "
                      "is gone",
                      following->address, registry.dir(),
                      leader ? fmt::format("its heartbeat is {}", registry.describe_age(*leader)) : problem));
    }
  }
}

}  // namespace

std::string oci_this_address(const std::vector<std::string>& interfaces) {
  if (!interfaces.empty()) return choose_driver_address(interfaces, {});
  const auto addresses = local_interface_addresses();
  auto usable = [](const InterfaceAddress& a) {
    return a.up && !a.loopback && !(a.ipv6 && a.address.rfind("fe80", 0) == 0);
  };
  const net::Resolution named = net::resolve(net::local_hostname(), 0, Deadline::after(std::chrono::seconds(2)));
  for (const auto& r : named.addresses) {
    for (const auto& a : addresses) {
      if (usable(a) && a.address == r.host()) return a.address;
    }
  }
  for (bool ipv6 : {false, true}) {
    for (const auto& a : addresses) {
      if (usable(a) && a.ipv6 == ipv6) return a.address;
    }
  }
  throw IoError("this machine has no non-loopback address to register; give --network-interface");
}

std::optional<OciDecision> decide_oci(int argc, char** argv, const Environment& ctx) {
  if (!ctx.get("OCI__MODE")) return std::nullopt;
  std::optional<OciConfig> config;
  std::string env_error;
  try {
    config = platform::parse_oci_env(ctx);
  } catch (const InvalidArgument& e) {
    env_error = e.what();
  }
  ParseOutcome parsed = config ? parse_command_line(argc, argv, platform::oci_flags(*config)) : ParseOutcome{};
  // Without the OCI layers (the variables are malformed, or the layered
  // command line is refused) the plain command line decides whether OCI
  // applies at all.
  ParseOutcome plain;
  const Options* decide = parsed.options ? &*parsed.options : nullptr;
  if (!decide) {
    plain = parse_command_line(argc, argv);
    if (!plain.options) {
      if (plain.exit_code == exit_code::kOk || (!config && env_error.empty())) return std::nullopt;  // --help & co.
    } else {
      decide = &*plain.options;
    }
  }
  if (decide && decide->check_build) return std::nullopt;  // --check-build: the build, not the job
  if (decide) {
    const std::string explicit_source = explicit_host_flag(*decide);
    if (decide->hosts_from == "oci" && !explicit_source.empty()) {
      throw JobError(exit_code::kUsage,
                     "--hosts-from oci and " + explicit_source +
                         " cannot be used together: give one source of hosts (or --hosts-from none)");
    }
    const bool applies = decide->hosts_from == "oci" ||
                         (decide->hosts_from == "auto" && explicit_source.empty() && !earlier_platform_detected(ctx));
    if (!applies) return std::nullopt;
  }
  if (!env_error.empty()) throw JobError(exit_code::kUsage, env_error);
  OciDecision out;
  if (!parsed.options) {
    out.exit_code = parsed.exit_code;
    out.message = parsed.message;
    out.message_to_stdout = parsed.message_to_stdout;
    return out;
  }
  out.options = std::move(*parsed.options);
  out.config = std::move(config);
  return out;
}

std::optional<int> run_oci_if_detected(int argc, char** argv) {
  const Environment ctx = Environment::current();
  std::optional<OciDecision> decision = decide_oci(argc, argv, ctx);
  if (!decision) return std::nullopt;
  if (decision->exit_code) {
    std::fputs(decision->message.c_str(), decision->message_to_stdout ? stdout : stderr);
    return decision->exit_code;
  }
  Options& options = *decision->options;
  const OciConfig& config = *decision->config;
  for (const auto& line : config.ignored) spdlog::warn("{}", line);
  for (const auto& line : config.notes) spdlog::info("{}", line);
  try {
    const std::string address = oci_this_address(options.network_interfaces);
    spdlog::info("hosts from oci ({}; {}): this run {} at {}",
                 options.hosts_from == "auto" ? "detected; --hosts-from none turns this off" : "--hosts-from oci",
                 config.mode == OciConfig::Mode::Main ? "MAIN" : "WORKER", config.run_id, address);
    if (config.mode == OciConfig::Mode::Worker) return run_worker(options, config, address);
    for (const auto& line : ineffective_setting_warnings(options, ctx.env)) spdlog::warn("{}", line);
    return run_main(options, config, address);
  } catch (const IoError& e) {
    throw JobError(exit_code::kLaunch, e.what());
  }
}

}  // namespace hvd::launcher
