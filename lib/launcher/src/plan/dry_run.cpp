#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "hvd/common/job_env.h"
#include "hvd/launcher/hosts/hosts.h"
#include "hvd/launcher/plan/plan.h"
#include "hvd/launcher/plan/worker_env.h"
#include "hvd/launcher/process/shell.h"

namespace hvd::launcher {

namespace {

std::string join_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + shell_quote(a);
  return out;
}

/// The variables a dry run shows: what hvdrun sets, not the whole inherited
/// environment (that differs per machine and may hold secrets).
bool shown(const std::string& name, const std::set<std::string>& exported) {
  return name.rfind("HOROVOD_", 0) == 0 || name == job_env::kPythonUnbuffered || name == job_env::kNcclSocketIfname ||
         name == job_env::kNcclIbDisable || exported.count(name) != 0;
}

std::map<std::string, std::string> shown_env(const WorkerSpec& w, const std::set<std::string>& exported) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : w.env) {
    if (!shown(name, exported)) continue;
    out[name] = is_secret_name(name) ? "<hidden>" : value;
  }
  return out;
}

std::set<std::string> exported_names(const Options& options) {
  std::set<std::string> names;
  for (const auto& x : options.env_exports) names.insert(x.substr(0, x.find('=')));
  return names;
}

std::string render_text(const JobPlan& plan, const Options& options) {
  const auto exported = exported_names(options);
  std::string out = fmt::format("hvdrun dry run: {} rank{} on {} host{} ({}); nothing is started\n\n",
                                plan.workers.size(), plan.workers.size() == 1 ? "" : "s", plan.hosts.size(),
                                plan.hosts.size() == 1 ? "" : "s", format_hosts(plan.hosts));
  out += render_placement_table(plan);
  if (plan.workers.empty()) return out;

  // Variables equal on every rank are listed once; a rank's place is always
  // listed with the rank, even when it happens to be equal everywhere.
  static const std::set<std::string> place = {job_env::kRank,      job_env::kLocalRank, job_env::kLocalSize,
                                              job_env::kCrossRank, job_env::kCrossSize, job_env::kHostname};
  std::map<std::string, std::string> common = shown_env(plan.workers.front(), exported);
  for (const auto& name : place) common.erase(name);
  for (const auto& w : plan.workers) {
    auto env = shown_env(w, exported);
    for (auto it = common.begin(); it != common.end();) {
      auto f = env.find(it->first);
      it = (f == env.end() || f->second != it->second) ? common.erase(it) : std::next(it);
    }
  }
  out += fmt::format("\nworking directory: {}\n", plan.workers.front().cwd);
  out += "environment of every rank (besides the forwarded launcher environment):\n";
  for (const auto& [name, value] : common) out += fmt::format("  {}={}\n", name, shell_quote(value));
  out += "  (at launch hvdrun adds HOROVOD_GLOO_RENDEZVOUS_ADDR, HOROVOD_GLOO_RENDEZVOUS_PORT and the job secret)\n";
  for (const auto& w : plan.workers) {
    out += fmt::format("\nrank {} on {}:\n  command: {}\n", w.slot.rank, w.slot.hostname, join_command(w.argv));
    for (const auto& [name, value] : shown_env(w, exported)) {
      if (common.count(name) == 0) out += fmt::format("  {}={}\n", name, shell_quote(value));
    }
  }
  return out;
}

std::string render_json(const JobPlan& plan, const Options& options) {
  const auto exported = exported_names(options);
  nlohmann::ordered_json j;
  j["hosts"] = nlohmann::ordered_json::array();
  for (const auto& h : plan.hosts) j["hosts"].push_back({{"name", h.name}, {"slots", h.slots}});
  j["np"] = plan.workers.size();
  j["workers"] = nlohmann::ordered_json::array();
  for (const auto& w : plan.workers) {
    nlohmann::ordered_json wj;
    wj["rank"] = w.slot.rank;
    wj["host"] = w.slot.hostname;
    wj["local_rank"] = w.slot.local_rank;
    wj["local_size"] = w.slot.local_size;
    wj["cross_rank"] = w.slot.cross_rank;
    wj["cross_size"] = w.slot.cross_size;
    wj["command"] = w.argv;
    wj["cwd"] = w.cwd;
    nlohmann::ordered_json env = nlohmann::ordered_json::object();
    for (const auto& [name, value] : shown_env(w, exported)) env[name] = value;
    wj["env"] = env;
    j["workers"].push_back(wj);
  }
  return j.dump(2) + "\n";
}

}  // namespace

std::string render_placement_table(const JobPlan& plan) {
  size_t host_width = 4;
  for (const auto& w : plan.workers) host_width = std::max(host_width, w.slot.hostname.size());
  std::string out = fmt::format("{:>4}  {:<{}}  {:>10}  {:>10}  {:>10}  {:>10}\n", "rank", "host", host_width,
                                "local_rank", "local_size", "cross_rank", "cross_size");
  for (const auto& w : plan.workers) {
    const auto& s = w.slot;
    out += fmt::format("{:>4}  {:<{}}  {:>10}  {:>10}  {:>10}  {:>10}\n", s.rank, s.hostname, host_width, s.local_rank,
                       s.local_size, s.cross_rank, s.cross_size);
  }
  return out;
}

std::string render_dry_run(const JobPlan& plan, const Options& options, DryRunFormat format) {
  return format == DryRunFormat::Json ? render_json(plan, options) : render_text(plan, options);
}

}  // namespace hvd::launcher
