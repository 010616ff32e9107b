#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "hvd/common/error.h"
#include "hvd/launcher/hosts/hosts.h"
#include "hvd/launcher/plan/plan.h"
#include "hvd/launcher/plan/placement.h"
#include "hvd/launcher/plan/worker_env.h"

namespace hvd::launcher {

namespace {

std::string current_directory() {
  std::string buf(4096, '\0');
  if (getcwd(buf.data(), buf.size()) == nullptr) {
    throw Error(fmt::format("cannot determine the working directory: {}", std::strerror(errno)));
  }
  buf.resize(std::strlen(buf.c_str()));
  return buf;
}

}  // namespace

JobPlan make_plan(const Options& options, const std::vector<HostSpec>& hosts,
                  const std::map<std::string, std::string>& launcher_env, const std::string& cwd,
                  SlotCheck check) {
  if (!options.num_proc) throw InvalidArgument("-np/--num-proc is required (e.g. hvdrun -np 4 python train.py)");
  if (options.command.empty()) throw InvalidArgument("no command given (e.g. hvdrun -np 2 python train.py)");
  const int np = *options.num_proc;
  if (np < 1) throw InvalidArgument(fmt::format("-np must be at least 1, not {}", np));

  std::vector<SlotAssignment> slots = assign_slots(hosts, np, check == SlotCheck::Mpirun);

  JobPlan plan;
  // Only hosts that run a rank are part of the job (spawners connect to
  // exactly these), in the order given, each with its ranks.
  std::map<std::string, std::vector<int>> ranks_on;
  for (const auto& s : slots) ranks_on[s.hostname].push_back(s.rank);
  for (const auto& h : hosts) {
    auto it = ranks_on.find(h.name);
    if (it == ranks_on.end()) continue;
    plan.hosts.push_back(h);
    plan.host_ranks.push_back(std::move(it->second));
  }
  EnvMap common = build_common_env(launcher_env, options);
  plan.workers.reserve(slots.size());
  for (const auto& slot : slots) {
    WorkerSpec w;
    w.slot = slot;
    w.argv = options.command;
    w.env = add_slot_env(common, slot, slots.size());
    // A platform's per-machine values for the host this rank runs on.
    if (auto it = options.host_env.find(slot.hostname); it != options.host_env.end()) {
      for (const auto& [name, value] : it->second) w.env[name] = value;
    }
    w.cwd = cwd;
    plan.workers.push_back(std::move(w));
  }
  return plan;
}

JobPlan make_plan(const Options& options, const std::vector<HostSpec>& hosts) {
  return make_plan(options, hosts, current_environment(), current_directory());
}

JobPlan make_plan(const Options& options, const std::vector<HostSpec>& hosts, SlotCheck check) {
  return make_plan(options, hosts, current_environment(), current_directory(), check);
}

}  // namespace hvd::launcher
