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
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>

namespace hvd::launcher {

/// --dry-run of an elastic job: one look at its host source (one run of the
/// discovery script, one list of the Kubernetes pods, or the fixed hosts),
/// printed; nothing starts. Exit 3 when the look fails, as at the start of a
/// job.
int dry_run_discovery(const Options& options, HostSource& source) {
  const DiscoveryResult found = source.discover();
  if (!found.ok()) {
    std::fprintf(stderr, "hvdrun: error: %s\n", found.error->c_str());
    return exit_code::kLaunch;
  }
  auto* kubernetes = dynamic_cast<kube::KubernetesHostSource*>(&source);
  const auto pods = kubernetes ? kubernetes->pods() : std::map<std::string, kube::PodHost>{};
  std::vector<const kube::PodHost*> ordered;
  for (const auto& [name, pod] : pods) ordered.push_back(&pod);
  std::sort(ordered.begin(), ordered.end(),
            [](const kube::PodHost* a, const kube::PodHost* b) { return kube::natural_less(a->pod, b->pod); });
  const long slots = total_slots(found.hosts);
  if (options.dry_run == DryRunFormat::Json) {
    nlohmann::json out = {{"source", source.describe()},
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
  std::string text = "# elastic job: hosts from " + source.describe() + "\n";
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

int run_elastic_job(const Options& options, std::unique_ptr<HostSource> source) {
  if (options.dry_run != DryRunFormat::None) return dry_run_discovery(options, *source);
  JobServices job(options);
  // Prefixes are worker serials, not ranks; DIR/worker.<N> appear on first write.
  if (int code = job.open_output(1, true)) return code;

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
    source->cancel();
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
  DiscoveryResult first = source->discover();
  if (auto code = stopped_early()) return job.finish(*code);
  if (!first.ok()) {
    std::fprintf(stderr, "hvdrun: error: %s\n", first.error->c_str());
    return job.finish(exit_code::kLaunch);
  }
  // The address workers reach the store on follows from the hosts (see
  // choose_driver_address). With no host listed yet (pods not up) it is
  // chosen when the first hosts appear; meanwhile the store listens on
  // 127.0.0.1 only (no worker exists yet), and moves to that address then
  // (rebind_store below). It never listens on every interface.
  std::optional<std::string> driver_addr;
  std::string bind_addr = "127.0.0.1";
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
  // The store served on the address chosen late, when it is not 127.0.0.1:
  // same secret, the same port when it is free there. Declared before the
  // runner, which uses it, so it outlives it.
  std::unique_ptr<store::HttpStoreServer> moved_store;
  if (!driver_addr) {
    deps.rebind_store = [&job, &options, &moved_store](const std::string& address) {
      ElasticRunnerDeps::ReboundStore out{&job.store().store(), job.store_port()};
      if (address == "127.0.0.1") return out;  // where it listens already
      store::ServerOptions so;
      so.bind_address = address;
      so.secret = job.secret();
      so.allow_unauthenticated = options.insecure_store;
      for (uint16_t port : {job.store_port(), uint16_t(0)}) {
        so.port = port;
        auto server = std::make_unique<store::HttpStoreServer>(so);
        try {
          server->start();
        } catch (const std::exception& e) {
          if (port == 0) throw;
          spdlog::debug("store: port {} is taken on {} ({}); using another", port, address, e.what());
          continue;
        }
        moved_store = std::move(server);
        break;
      }
      job.store().stop();  // nothing reached it: no worker had started
      spdlog::info("the rendezvous store moved from 127.0.0.1:{} to {}:{}", out.port, address, moved_store->port());
      return ElasticRunnerDeps::ReboundStore{&moved_store->store(), moved_store->port()};
    };
  }
  deps.seed = (uint64_t(rd()) << 32) | rd();
  ElasticRunner runner(options, std::move(deps));
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
  if (auto code = stopped_early()) return job.finish(*code);
  const int code = runner.run(std::move(first));
  job.signals().stop_watching();
  return job.finish(code);
}

}  // namespace hvd::launcher
