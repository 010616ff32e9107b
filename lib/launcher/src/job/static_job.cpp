// The static mode: a fixed plan, one spawner per host, the Supervisor.
#include "hvd/common/error.h"
#include "hvd/launcher/job/job_services.h"
#include "hvd/launcher/job/modes.h"
#include "hvd/launcher/plan/plan.h"
#include "hvd/launcher/plan/worker_env.h"
#include "hvd/launcher/spawn/spawner_factory.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include <future>
#include <map>

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

/// One HostLaunch per host, in the order hosts first appear in the plan.
/// Whether a host is this machine may take a (bounded) name lookup: all are
/// asked at once.
std::vector<HostLaunch> launches_by_host(const JobPlan& plan, SpawnerFactory& spawners) {
  std::map<std::string, std::future<bool>> local;
  for (const auto& w : plan.workers) {
    if (!local.count(w.slot.hostname)) {
      local.emplace(w.slot.hostname, std::async(std::launch::async, [&spawners, host = w.slot.hostname] {
                      return spawners.is_local(host);
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
      h.spawner = spawners.make(h.host);
      hosts.push_back(std::move(h));
    }
    hosts[it->second].workers.push_back(w);
  }
  return hosts;
}

/// The static mode inside JobServices::run: a set-up step that fails throws
/// JobError.
int static_job(JobServices& job, const Options& options, const JobPlan& plan_in) {
  JobPlan plan = plan_in;
  if (plan.workers.empty()) {
    spdlog::warn("nothing to run: the job has no workers");
    return exit_code::kOk;
  }
  job.open_output(static_cast<int>(plan.workers.size()), false);
  const std::string driver_addr = job.choose_address(plan.hosts);
  job.start_store(driver_addr);
  job.add_rendezvous_env(plan, driver_addr);
  if (job.events()) {
    nlohmann::json workers = nlohmann::json::array();
    for (const auto& w : plan.workers) {
      workers.push_back({{"rank", w.slot.rank},
                         {"host", w.slot.hostname},
                         {"local_rank", w.slot.local_rank},
                         {"cross_rank", w.slot.cross_rank}});
    }
    job.emit("job_start", {{"mode", "static"},
                           {"np", static_cast<int>(plan.workers.size())},
                           {"store", driver_addr + ":" + std::to_string(job.store_port())},
                           {"workers", EventValue::raw(workers.dump())}});
  }

  DefaultSpawnerFactory spawners(spawner_options(options));
  std::vector<HostLaunch> hosts = launches_by_host(plan, spawners);
  spdlog::info("{} worker{} on {} host{}: {}", plan.workers.size(), plan.workers.size() == 1 ? "" : "s", hosts.size(),
               hosts.size() == 1 ? "" : "s", host_summary(hosts));
  return job.supervise(std::move(hosts));
}

}  // namespace

JobPlan plan_from_source(const Options& options, HostSource& source, LaunchMode launch) {
  const DiscoveryResult hosts = source.discover();
  if (!hosts.ok()) throw InvalidArgument(*hosts.error);
  return make_plan(options, hosts.hosts, launch == LaunchMode::Mpirun ? SlotCheck::Mpirun : SlotCheck::Hvdrun);
}

int run_job(const Options& options, const JobPlan& plan) {
  JobServices job(job_services_options(options));
  return job.run([&] { return static_job(job, options, plan); });
}

}  // namespace hvd::launcher
