// The elastic mode: the job's services, the first look at the hosts (which
// decides the store's address), then the ElasticRunner to the end.
#include "hvd/common/error.h"
#include "hvd/common/job_env.h"
#include "hvd/launcher/discovery/host_source.h"
#include "hvd/launcher/elastic/elastic_runner.h"
#include "hvd/launcher/hosts/hosts.h"
#include "hvd/launcher/hosts/network.h"
#include "hvd/launcher/job/job_services.h"
#include "hvd/launcher/job/launcher.h"
#include "hvd/launcher/spawn/spawner_factory.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>
#include <random>

namespace hvd::launcher {

/// The job's host source: the discovery script, or (--min-np without one)
/// the fixed -H / --hostfile list, default localhost:np as in static jobs.
std::unique_ptr<HostSource> make_host_source(const Options& options) {
  if (options.elastic.host_discovery_script) {
    DiscoveryScriptOptions dso;
    dso.script = *options.elastic.host_discovery_script;
    dso.default_slots = options.elastic.slots_per_host.value_or(1);
    dso.timeout = options.elastic.discovery_timeout;
    return std::make_unique<ScriptHostSource>(dso);
  }
  std::vector<HostSpec> hosts;
  if (options.hostfile) {
    hosts = parse_hostfile(*options.hostfile);
  } else if (!options.hosts.empty()) {
    hosts = parse_hosts(options.hosts);
  } else {
    hosts = {HostSpec{"localhost", options.num_proc.value_or(1)}};  // as a static job: localhost:np
  }
  spdlog::info("elastic job on fixed hosts {}: failed workers are restarted, failing hosts blacklisted",
               format_hosts(hosts));
  return std::make_unique<StaticHostSource>(std::move(hosts));
}

int run_elastic_job(const Options& options) {
  JobServices job(options);
  // Prefixes are worker serials, not ranks; DIR/worker.<N> appear on first write.
  if (int code = job.open_output(1, true)) return code;

  std::unique_ptr<HostSource> source;
  try {
    source = make_host_source(options);
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "hvdrun: error: %s\n", e.what());
    return job.finish(exit_code::kUsage);
  }

  // The first look decides whether the job can start at all, and which
  // address remote hosts will reach the store on.
  DiscoveryResult first = source->discover();
  if (!first.ok()) {
    std::fprintf(stderr, "hvdrun: error: %s\n", first.error->c_str());
    return job.finish(exit_code::kLaunch);
  }
  // The address workers reach the store on follows from the hosts (see
  // choose_driver_address). With no host listed yet (pods not up) it is
  // chosen when the first hosts appear; the store listens on every
  // interface meanwhile (it authenticates every request).
  std::optional<std::string> driver_addr;
  std::string bind_addr = "0.0.0.0";
  if (!first.hosts.empty() || !options.network_interfaces.empty()) {
    std::string addr;
    if (int code = job.choose_address(first.hosts, addr)) return job.finish(code);
    driver_addr = bind_addr = addr;
  }
  if (int code = job.start_store(bind_addr)) return job.finish(code);

  EnvMap env = build_common_env(current_environment(), options);
  env[job_env::kRendezvousPort] = std::to_string(job.store_port());
  env[job_env::kSecret] = job.secret();
  env[job_env::kElastic] = "1";
  env[job_env::kElasticTimeout] = std::to_string(options.elastic.elastic_timeout.count());

  DefaultSpawnerFactory spawners(options);
  std::random_device rd;
  ElasticRunnerDeps deps(*source, spawners, job.store().store(), *job.output());
  deps.events = job.events();
  deps.worker_env = std::move(env);
  deps.driver_address = driver_addr;
  deps.choose_address = [&options](const std::vector<HostSpec>& hosts) {
    return choose_driver_address(options.network_interfaces, hosts);
  };
  deps.store_address = driver_addr.value_or(bind_addr) + ":" + std::to_string(job.store_port());
  deps.seed = (uint64_t(rd()) << 32) | rd();
  ElasticRunner runner(options, std::move(deps));
  job.signals().watch([&runner](int sig) { runner.interrupt(sig); });
  const int code = runner.run(std::move(first));
  job.signals().stop_watching();
  return job.finish(code);
}

}  // namespace hvd::launcher
