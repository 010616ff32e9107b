// --dry-run output: the one place where its sections are combined.
#include "hvd/launcher/job/dry_run_report.h"

#include "hvd/launcher/discovery/kubernetes/kubernetes_host_source.h"
#include "hvd/launcher/plan/plan.h"
#include "hvd/launcher/process/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <future>

namespace hvd::launcher {

ElasticLook look_once(HostSource& source, int np) {
  const DiscoveryResult found = source.discover();
  if (!found.ok()) throw JobError(exit_code::kLaunch, *found.error);
  ElasticLook look;
  look.source = source.describe();
  look.hosts = found.hosts;
  look.slots = total_slots(found.hosts);
  look.np = np;
  if (auto* kubernetes = dynamic_cast<kube::KubernetesHostSource*>(&source)) {
    for (auto& [name, pod] : kubernetes->pods()) look.pods.push_back(pod);
    std::sort(look.pods.begin(), look.pods.end(),
              [](const kube::PodHost& a, const kube::PodHost& b) { return kube::natural_less(a.pod, b.pod); });
  }
  return look;
}

std::vector<HostReach> reach_hosts(DefaultSpawnerFactory& spawners, const std::vector<HostSpec>& hosts) {
  std::vector<std::future<HostReach>> asked;
  for (const auto& h : hosts) {
    asked.push_back(std::async(std::launch::async, [&spawners, name = h.name] { return spawners.reach(name); }));
  }
  std::vector<HostReach> out;
  for (auto& a : asked) out.push_back(a.get());
  return out;
}

namespace {

std::string elastic_text(const ElasticLook& look) {
  std::string text = "# elastic job: hosts from " + look.source + "\n";
  for (const auto& p : look.pods) {
    text += p.usable ? fmt::format("pod {} -> {}\n", p.pod, format_host(p.host))
                     : fmt::format("pod {} not used: {}\n", p.pod, p.why_not);
  }
  text += fmt::format("hosts: {}\n", look.hosts.empty() ? std::string("-") : format_hosts(look.hosts));
  text += fmt::format("slots: {} (-np {}{})\n", look.slots, look.np,
                      look.slots >= look.np ? "" : ": not enough yet, the job would wait");
  return text;
}

nlohmann::json elastic_json(const ElasticLook& look) {
  nlohmann::json out = {{"source", look.source},
                        {"hosts", nlohmann::json::array()},
                        {"pods", nlohmann::json::array()},
                        {"slots", look.slots},
                        {"np", look.np}};
  for (const auto& h : look.hosts) out["hosts"].push_back(format_host(h));
  for (const auto& p : look.pods) {
    nlohmann::json j = {{"name", p.pod}, {"used", p.usable}};
    if (p.usable) {
      j["host"] = p.host.name;
      j["slots"] = p.host.slots;
    } else {
      j["reason"] = p.why_not;
    }
    out["pods"].push_back(j);
  }
  return out;
}

std::string render_text(const DryRunReport& r) {
  std::string out;
  if (r.platform) out += platform::render_platform(*r.platform);
  if (r.oci_header) out += *r.oci_header;
  if (r.plan) out += render_dry_run(*r.plan, *r.plan_options, DryRunFormat::Text);
  if (r.mpirun) out += *r.mpirun;
  if (r.elastic) out += elastic_text(*r.elastic);
  if (r.oci_worker)
    out += fmt::format("would register {} in {}\n", format_host(HostSpec{r.oci_worker->address, r.oci_worker->slots}),
                       r.oci_worker->dir);
  if (r.reach) out += render_reach_text(*r.reach);
  if (r.launcher) {
    out += *r.launcher == "srun" ? std::string("launcher: srun --overlap for every other host\n")
                                 : fmt::format("launcher: srun --overlap on {}; ssh elsewhere\n",
                                               fmt::join(r.srun_nodes, ", "));
  }
  return out;
}

std::string render_json(const DryRunReport& r) {
  if (r.oci_worker) {
    // One line, as it always printed; the strings JSON-escaped.
    return fmt::format("{{\"platform\": \"oci\", \"mode\": \"WORKER\", \"address\": {}, \"slots\": {}, \"dir\": {}}}\n",
                       nlohmann::json(r.oci_worker->address).dump(), r.oci_worker->slots,
                       nlohmann::json(r.oci_worker->dir).dump());
  }
  // The body's document as its owner renders it; "platform" is added to it.
  std::string body;
  if (r.plan) body = render_dry_run(*r.plan, *r.plan_options, DryRunFormat::Json);
  if (r.mpirun) body = *r.mpirun;
  if (r.elastic) body = elastic_json(*r.elastic).dump(2) + "\n";
  if (!r.platform && !r.launcher && !r.reach) return body;
  nlohmann::ordered_json j = body.empty() ? nlohmann::ordered_json::object() : nlohmann::ordered_json::parse(body);
  if (r.reach) j["reached"] = nlohmann::ordered_json::parse(render_reach_json(*r.reach));
  if (r.platform) j["platform"] = nlohmann::ordered_json::parse(platform::render_platform_json(*r.platform));
  if (r.launcher) j["launcher"] = {{"kind", *r.launcher}, {"srun_nodes", r.srun_nodes}};
  return j.dump(2) + "\n";
}

}  // namespace

std::string render_dry_run_report(const DryRunReport& report, DryRunFormat format) {
  return format == DryRunFormat::Json ? render_json(report) : render_text(report);
}

}  // namespace hvd::launcher
