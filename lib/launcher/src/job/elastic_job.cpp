// The elastic mode: the job's services, the first look at the hosts (which
// decides the store's address), then the ElasticRunner to the end. Its
// --dry-run is the DryRun mode's (job/modes.cpp, job/dry_run_report.cpp).
#include "hvd/common/error.h"
#include "hvd/common/job_env.h"
#include "hvd/launcher/discovery/host_source.h"
#include "hvd/launcher/elastic/elastic_runner.h"
#include "hvd/launcher/hosts/hosts.h"
#include "hvd/launcher/job/job_services.h"
#include "hvd/launcher/job/modes.h"
#include "hvd/launcher/plan/worker_env.h"
#include "hvd/launcher/process/report.h"
#include "hvd/launcher/spawn/spawner_factory.h"

#include <spdlog/spdlog.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <random>

namespace hvd::launcher {

namespace {

/// The elastic mode inside JobServices::run: a set-up step that fails
/// throws JobError.
int elastic_job(JobServices& job, const Options& options, HostSource& source) {
  // Prefixes are worker serials, not ranks; DIR/worker.<N> appear on first write.
  job.open_output(1, true);

  // Signals from here on: before the runner exists one stops the first look
  // at once (a hung script) and ends the job; then they go to the runner.
  std::mutex signal_mutex;
  ElasticRunner* live_runner = nullptr;
  int early_signal = 0;
  job.signals().watch([&](int sig) {
    std::lock_guard<std::mutex> lock(signal_mutex);
    if (live_runner) {
      live_runner->interrupt(sig);
      return;
    }
    if (early_signal == 0) early_signal = sig;
    source.cancel();
  });
  struct StopWatching {
    SignalGuard& guard;
    ~StopWatching() { guard.stop_watching(); }  // before the locals it uses go away
  } stop_watching{job.signals()};
  auto stopped_early = [&]() -> std::optional<int> {
    std::lock_guard<std::mutex> lock(signal_mutex);
    if (early_signal == 0) return std::nullopt;
    spdlog::warn("received {}; stopping before any worker started", strsignal(early_signal));
    return 128 + early_signal;
  };

  // The first look decides whether the job can start at all, and which
  // address remote hosts will reach the store on.
  DiscoveryResult first = source.discover();
  if (auto code = stopped_early()) return *code;
  if (!first.ok()) throw JobError(exit_code::kLaunch, *first.error);
  // The address workers reach the store on follows from the hosts (see
  // choose_driver_address). With no host listed yet (pods not up) it is
  // chosen when the first hosts appear; meanwhile the store listens on
  // 127.0.0.1 only (no worker exists yet), and JobServices::rebind_store
  // moves it to that address then. It never listens on every interface.
  std::optional<std::string> driver_addr;
  std::string bind_addr = "127.0.0.1";
  if (!first.hosts.empty() || !options.network_interfaces.empty()) {
    driver_addr = bind_addr = job.choose_address(first.hosts);
  }
  job.start_store(bind_addr);

  // Every worker's environment: the common one, the rendezvous variables
  // (the runner sets the address again once it is chosen) and the elastic
  // settings.
  EnvMap env = build_common_env(current_environment(), options);
  for (auto& [name, value] : job.rendezvous_env(bind_addr)) env[name] = value;
  env[job_env::kElastic] = "1";
  env[job_env::kElasticTimeout] = std::to_string(options.elastic.elastic_timeout.count());

  DefaultSpawnerFactory spawners(spawner_options(options));
  std::random_device rd;
  ElasticRunnerDeps deps(source, spawners, job.store().store(), *job.output());
  deps.events = job.events();
  deps.worker_env = std::move(env);
  deps.driver_address = driver_addr;
  deps.choose_address = [&job](const std::vector<HostSpec>& hosts) { return job.choose_address_now(hosts); };
  deps.store_address = bind_addr + ":" + std::to_string(job.store_port());
  if (!driver_addr) {
    deps.rebind_store = [&job](const std::string& address) {
      const JobServices::ServedStore served = job.rebind_store(address);
      return ElasticRunnerDeps::ReboundStore{served.store, served.port};
    };
  }
  deps.seed = (uint64_t(rd()) << 32) | rd();
  ElasticRunner runner(elastic_runner_options(options), std::move(deps));
  {
    std::lock_guard<std::mutex> lock(signal_mutex);
    if (early_signal == 0) live_runner = &runner;  // in one step with the check: no signal falls between
  }
  struct ForgetRunner {  // no signal reaches the runner once it is gone, even on an exception
    std::mutex& mutex;
    ElasticRunner*& runner;
    ~ForgetRunner() {
      std::lock_guard<std::mutex> lock(mutex);
      runner = nullptr;
    }
  } forget_runner{signal_mutex, live_runner};
  if (auto code = stopped_early()) return *code;
  const int code = runner.run(std::move(first));
  job.signals().stop_watching();
  return code;
}

}  // namespace

int run_elastic_job(const Options& options, HostSource& source) {
  JobServices job(job_services_options(options));
  return job.run([&] { return elastic_job(job, options, source); });
}

}  // namespace hvd::launcher
