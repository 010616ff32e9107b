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

/// One HostLaunch per host of the plan, in the plan's order, with the
/// workers the plan groups on it (JobPlan::host_ranks). Whether a host is
/// this machine may take a (bounded) name lookup: all are asked at once.
std::vector<HostLaunch> host_launches(const JobPlan& plan, SpawnerFactory& spawners) {
  if (plan.host_ranks.size() != plan.hosts.size()) {
    throw Error("internal: a job plan without its ranks by host (make_plan makes both)");
  }
  std::vector<std::future<bool>> local;
  local.reserve(plan.hosts.size());
  for (const auto& h : plan.hosts) {
    local.push_back(std::async(std::launch::async, [&spawners, host = h.name] { return spawners.is_local(host); }));
  }
  std::vector<HostLaunch> hosts(plan.hosts.size());
  for (std::size_t i = 0; i < plan.hosts.size(); ++i) {
    hosts[i].host = plan.hosts[i].name;
    hosts[i].launch_on_caller_thread = local[i].get();
    hosts[i].spawner = spawners.make(hosts[i].host);
    hosts[i].workers.reserve(plan.host_ranks[i].size());
    for (const int rank : plan.host_ranks[i]) hosts[i].workers.push_back(plan.workers.at(rank));
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
  std::vector<HostLaunch> hosts = host_launches(plan, spawners);
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
