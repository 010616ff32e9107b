// run_job: signals, rendezvous store, one spawner per host, the Supervisor.
#include "hvd/common/error.h"
#include "hvd/common/io.h"
#include "hvd/common/logging.h"
#include "hvd/common/secret.h"
#include "hvd/launcher/supervise/event_log.h"
#include "hvd/launcher/job/launcher.h"
#include "hvd/launcher/spawn/local_spawner.h"
#include "hvd/launcher/hosts/network.h"
#include "hvd/launcher/supervise/output.h"
#include "hvd/launcher/job/run_internal.h"
#include "hvd/launcher/process/signal_guard.h"
#include "hvd/launcher/spawn/ssh/ssh_spawner.h"
#include "hvd/launcher/supervise/supervisor.h"
#include "hvd/launcher/plan/worker_env.h"
#include "hvd/store/http_store.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>


#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <thread>

namespace hvd::launcher {

namespace {

std::string host_summary(const std::vector<HostLaunch>& hosts) {
  std::string out;
  for (const auto& h : hosts) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{} ({} worker{}, {})", h.host, h.workers.size(), h.workers.size() == 1 ? "" : "s",
                       h.launch_on_caller_thread ? "local" : "ssh");
  }
  return out;
}

}  // namespace

std::unique_ptr<Spawner> make_spawner_for(const Options& options, bool local) {
  if (local) {
    LocalSpawnerOptions lo;
    lo.agent_command = {self_executable(), "--agent"};
    lo.kill_grace = options.kill_grace;
    return make_local_spawner(lo);
  }
  SshSpawnerOptions ssh;
  ssh.port = options.ssh_port;
  ssh.identity_file = options.ssh_identity_file;
  ssh.strict_host_key_checking = options.ssh_strict_host_key_checking;
  ssh.agent_command = {self_executable(), "--agent"};
  ssh.verbose = options.verbose;
  ssh.keepalive = options.ssh_keepalive;
  return make_ssh_spawner(ssh);
}

std::unique_ptr<EventLog> open_events(const Options& options) {
  if (!options.events_file) return nullptr;
  try {
    return std::make_unique<EventLog>(*options.events_file);
  } catch (const IoError& e) {
    std::fprintf(stderr, "hvdrun: error: %s\n", e.what());
    return nullptr;
  }
}

std::unique_ptr<OutputRouter> open_output(const Options& options, int num_workers, bool lazy_worker_dirs) {
  try {
    OutputOptions oo;
    oo.num_workers = num_workers;
    oo.lazy_worker_dirs = lazy_worker_dirs;
    oo.timestamp = options.prefix_output_with_timestamp;
    oo.directory = options.output_filename;
    return std::make_unique<OutputRouter>(oo);
  } catch (const IoError& e) {
    std::fprintf(stderr, "hvdrun: error: --output-filename: %s\n", e.what());
    return nullptr;
  }
}

int run_job(const Options& options, const JobPlan& plan_in) {
  init_logging("hvdrun", options.verbose ? spdlog::level::debug : spdlog::level::info);
  // Before the store's threads or any spawner thread exist.
  SignalGuard signals;

  JobPlan plan = plan_in;
  if (plan.workers.empty()) {
    spdlog::warn("nothing to run: the job has no workers");
    return exit_code::kOk;
  }

  std::unique_ptr<OutputRouter> output = open_output(options, static_cast<int>(plan.workers.size()), false);
  if (!output) return exit_code::kUsage;
  std::unique_ptr<EventLog> events = open_events(options);
  if (options.events_file && !events) return exit_code::kUsage;
  auto end_job = [&events](int code) {
    if (events) events->emit("job_end", {{"code", code}});
    return code;
  };

  // Rendezvous: the store workers find each other through.
  const std::string secret = random_secret();
  std::string driver_addr;
  try {
    driver_addr = choose_driver_address(options.network_interfaces, plan.hosts);
  } catch (const IoError& e) {
    // A host name that does not resolve or has no route: the host cannot be
    // reached, as an SSH connection to it would fail (exit 3, not a bug).
    std::fprintf(stderr, "hvdrun: error: %s\n", e.what());
    return end_job(exit_code::kLaunch);
  }
  store::ServerOptions so;
  so.bind_address = driver_addr;
  so.port = 0;
  so.secret = secret;
  so.allow_unauthenticated = options.insecure_store;
  store::HttpStoreServer store_server(so);
  try {
    store_server.start();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hvdrun: error: cannot start the rendezvous store on %s: %s\n", driver_addr.c_str(),
                 e.what());
    return end_job(exit_code::kLaunch);
  }
  add_rendezvous_env(plan, driver_addr, store_server.port(), secret);
  if (events) {
    nlohmann::json workers = nlohmann::json::array();
    for (const auto& w : plan.workers) {
      workers.push_back({{"rank", w.slot.rank},
                         {"host", w.slot.hostname},
                         {"local_rank", w.slot.local_rank},
                         {"cross_rank", w.slot.cross_rank}});
    }
    events->emit("job_start", {{"mode", "static"},
                               {"np", static_cast<int>(plan.workers.size())},
                               {"store", driver_addr + ":" + std::to_string(store_server.port())},
                               {"workers", EventValue::raw(workers.dump())}});
  }

  // One spawner per host, in the order the hosts were given. Whether a host
  // is this machine may take a (bounded) name lookup: ask for all at once.
  std::map<std::string, std::future<bool>> local;
  for (const auto& w : plan.workers) {
    if (!local.count(w.slot.hostname)) {
      local.emplace(w.slot.hostname, std::async(std::launch::async, [host = w.slot.hostname] {
        return is_local_host(host);
      }));
    }
  }
  std::vector<HostLaunch> hosts;
  std::map<std::string, std::size_t> index;
  for (const auto& w : plan.workers) {
    auto it = index.find(w.slot.hostname);
    if (it == index.end()) {
      it = index.emplace(w.slot.hostname, hosts.size()).first;
      HostLaunch h;
      h.host = w.slot.hostname;
      h.launch_on_caller_thread = local.at(h.host).get();
      h.spawner = make_spawner_for(options, h.launch_on_caller_thread);
      hosts.push_back(std::move(h));
    }
    hosts[it->second].workers.push_back(w);
  }
  spdlog::info("{} worker{} on {} host{}: {}", plan.workers.size(), plan.workers.size() == 1 ? "" : "s",
               hosts.size(), hosts.size() == 1 ? "" : "s", host_summary(hosts));

  SupervisorOptions sup_options;
  sup_options.start_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options.start_timeout);
  sup_options.kill_grace = options.kill_grace;
  sup_options.events = events.get();
  Supervisor supervisor(sup_options, output.get());
  signals.watch([&supervisor](int sig) { supervisor.interrupt(sig); });
  struct StopWatching {
    SignalGuard& guard;
    ~StopWatching() { guard.stop_watching(); }  // before `supervisor` goes away
  } stop_watching{signals};
  int code = supervisor.run(std::move(hosts));
  store_server.stop();
  return end_job(code);
}

}  // namespace hvd::launcher
