// The elastic mode: the job's services, the first look at the hosts (which
// decides the store's address), then the ElasticRunner to the end.
#include "hvd/common/error.h"
#include "hvd/common/job_env.h"
#include "hvd/launcher/discovery/host_source.h"
#include "hvd/launcher/discovery/kubernetes/kubernetes_host_source.h"
#include "hvd/launcher/elastic/elastic_runner.h"
#include "hvd/launcher/hosts/hosts.h"
#include "hvd/launcher/hosts/network.h"
#include "hvd/launcher/job/job_services.h"
#include "hvd/launcher/job/launcher.h"
#include "hvd/launcher/spawn/spawner_factory.h"

#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>

namespace hvd::launcher {

/// The job's host source: the discovery script, or (--min-np without one)
/// the fixed -H / --hostfile list, default localhost:np as in static jobs.
/// watch = false (--dry-run): a Kubernetes source only lists, it starts no watch.
std::unique_ptr<HostSource> make_host_source(const Options& options, bool watch = true) {
  if (options.elastic.kubernetes.selector) {
    kube::KubeConfig config = kube::resolve_kube_config(kube::process_environment());
    if (const char* dir = std::getenv(kube::kServiceAccountDirVariable); dir && !config.in_cluster) {
      spdlog::warn("{}={} ignored: using {} (the service account is used in a pod without KUBECONFIG)",
                   kube::kServiceAccountDirVariable, dir, config.origin);
    }
    for (const auto& line : config.ignored) spdlog::warn("{}", line);
    kube::KubernetesSourceOptions kso = kube::source_options(options, config);
    kso.watch = watch;
    if (options.elastic.slots_per_host && options.elastic.kubernetes.slots.mode != KubernetesSlots::Mode::Auto) {
      spdlog::warn("--slots-per-host ignored: --kubernetes-slots decides every pod's slots (it applies to 'auto')");
    }
    spdlog::info("kubernetes: pods '{}' in namespace '{}' through {} at {}", kso.selector, kso.namespace_name,
                 config.origin, config.server.text());
    return std::make_unique<kube::KubernetesHostSource>(std::move(config), std::move(kso));
  }
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

/// --dry-run of an elastic job whose source can show what it finds (the
/// Kubernetes pods): one look, printed; nothing starts. Exit 3 when the
/// look fails, as at the start of a job.
int dry_run_discovery(const Options& options) {
  std::unique_ptr<HostSource> source;
  try {
    source = make_host_source(options, /*watch=*/false);
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "hvdrun: error: %s\n", e.what());
    return exit_code::kUsage;
  }
  const DiscoveryResult found = source->discover();
  if (!found.ok()) {
    std::fprintf(stderr, "hvdrun: error: %s\n", found.error->c_str());
    return exit_code::kLaunch;
  }
  auto* kubernetes = dynamic_cast<kube::KubernetesHostSource*>(source.get());
  const auto pods = kubernetes ? kubernetes->pods() : std::map<std::string, kube::PodHost>{};
  std::vector<const kube::PodHost*> ordered;
  for (const auto& [name, pod] : pods) ordered.push_back(&pod);
  std::sort(ordered.begin(), ordered.end(),
            [](const kube::PodHost* a, const kube::PodHost* b) { return kube::natural_less(a->pod, b->pod); });
  const long slots = total_slots(found.hosts);
  if (options.dry_run == DryRunFormat::Json) {
    nlohmann::json out = {{"source", source->describe()},
                          {"hosts", nlohmann::json::array()},
                          {"pods", nlohmann::json::array()},
                          {"slots", slots},
                          {"np", options.num_proc.value_or(1)}};
    for (const auto& h : found.hosts) out["hosts"].push_back(format_host(h));
    for (const auto* p : ordered) {
      nlohmann::json j = {{"name", p->pod}, {"used", p->usable}};
      if (p->usable) {
        j["host"] = p->host.name;
        j["slots"] = p->host.slots;
      } else {
        j["reason"] = p->why_not;
      }
      out["pods"].push_back(j);
    }
    std::printf("%s\n", out.dump(2).c_str());
    return exit_code::kOk;
  }
  std::string text = "# elastic job: hosts from " + source->describe() + "\n";
  for (const auto* p : ordered) {
    text += p->usable ? fmt::format("pod {} -> {}\n", p->pod, format_host(p->host))
                      : fmt::format("pod {} not used: {}\n", p->pod, p->why_not);
  }
  text += fmt::format("hosts: {}\n", found.hosts.empty() ? std::string("-") : format_hosts(found.hosts));
  text += fmt::format("slots: {} (-np {}{})\n", slots, options.num_proc.value_or(1),
                      slots >= options.num_proc.value_or(1) ? "" : ": not enough yet, the job would wait");
  std::fputs(text.c_str(), stdout);
  return exit_code::kOk;
}

int run_elastic_job(const Options& options) {
  if (options.dry_run != DryRunFormat::None) return dry_run_discovery(options);
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
