// Choosing the job's host source (discovery/choose.h).
#include "hvd/launcher/discovery/choose.h"

#include <fmt/format.h>

#include "hvd/common/error.h"
#include "hvd/launcher/discovery/discovery.h"
#include "hvd/launcher/discovery/platform/platform.h"
#include "hvd/launcher/discovery/kubernetes/kubernetes_host_source.h"
#include "hvd/launcher/hosts/hosts.h"

namespace hvd::launcher {

std::string explicit_host_flag(const Options& o) {
  if (!o.hosts.empty()) return "-H/--hosts";
  if (o.hostfile) return "--hostfile";
  if (o.elastic.host_discovery_script) return "--host-discovery-script";
  if (o.elastic.kubernetes.selector) return "--kubernetes-selector";
  return "";
}

namespace {

/// The pods of --kubernetes-selector; a dry run only lists them (no watch).
std::unique_ptr<HostSource> kubernetes_source(const Options& options, const Environment& env,
                                              HostSourceChoice& choice) {
  kube::KubeConfig config = kube::resolve_kube_config(env);
  if (const auto dir = env.get(kube::kServiceAccountDirVariable); dir && !config.in_cluster) {
    choice.warnings.push_back(
        fmt::format("{}={} ignored: using {} (the service account is used in a pod without KUBECONFIG)",
                    kube::kServiceAccountDirVariable, *dir, config.origin));
  }
  for (const auto& line : config.ignored) choice.warnings.push_back(line);
  kube::KubernetesSourceOptions kso = kube::source_options(options, config);
  kso.watch = options.dry_run == DryRunFormat::None;
  if (options.elastic.slots_per_host && options.elastic.kubernetes.slots.mode != KubernetesSlots::Mode::Auto) {
    choice.warnings.push_back(
        "--slots-per-host ignored: --kubernetes-slots decides every pod's slots (it applies to 'auto')");
  }
  choice.info.push_back(fmt::format("kubernetes: pods '{}' in namespace '{}' through {} at {}", kso.selector,
                                    kso.namespace_name, config.origin, config.server.text()));
  return std::make_unique<kube::KubernetesHostSource>(std::move(config), std::move(kso));
}

/// --launcher: `srun` needs an allocation; `auto` is srun when the hosts
/// are the Slurm allocation's nodes (its platform source), ssh otherwise.
void resolve_launcher(HostSourceChoice& choice, const Environment& env) {
  Options& o = choice.options;
  const auto job = env.get("SLURM_JOB_ID");
  if (o.launcher == "srun" && !job) {
    throw InvalidArgument(
        "--launcher srun needs a Slurm allocation (SLURM_JOB_ID is not set): run hvdrun inside sbatch, salloc or "
        "srun, or use --launcher ssh");
  }
  if (o.launcher != "auto") return;
  o.launcher = "ssh";
  if (!job) return;
  // Inside an allocation: its nodes start through srun, whatever the host
  // source (the platform's hosts, -H, a discovery script listing nodes).
  auto nodes = env.get("SLURM_JOB_NODELIST");
  if (!nodes) nodes = env.get("SLURM_NODELIST");
  if (!nodes || nodes->empty()) return;
  o.srun_nodes = platform::expand_hostlist(*nodes, env.get("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST");
  choice.info.push_back(fmt::format(
      "workers on the nodes of Slurm job {} start through srun --overlap, on other hosts over SSH (--launcher ssh: "
      "SSH everywhere)",
      *job));
}

}  // namespace

HostSourceChoice choose_host_source(const Options& options, const Environment& env) {
  const std::string explicit_flag = explicit_host_flag(options);
  platform::PlatformDecision d = platform::apply_platform(options, explicit_flag, env);
  HostSourceChoice choice;
  choice.options = std::move(d.options);
  choice.platform = std::move(d.platform);
  choice.follower = d.follower;
  choice.info = std::move(d.info);
  choice.warnings = std::move(d.warnings);
  resolve_launcher(choice, env);
  const Options& o = choice.options;
  if (!o.num_proc) {  // without a platform's slots (elastic jobs always have -np here)
    throw InvalidArgument("-np/--num-proc is required (e.g. hvdrun -np 4 python train.py)");
  }
  if (choice.platform) {
    choice.source = std::make_unique<StaticHostSource>(choice.platform->hosts);
  } else if (o.elastic.kubernetes.selector) {
    choice.source = kubernetes_source(o, env, choice);
  } else if (o.elastic.host_discovery_script) {
    DiscoveryScriptOptions dso;
    dso.script = *o.elastic.host_discovery_script;
    dso.default_slots = o.elastic.slots_per_host.value_or(1);
    dso.timeout = o.elastic.discovery_timeout;
    choice.source = std::make_unique<ScriptHostSource>(dso);
  } else {
    std::vector<HostSpec> hosts;
    if (!o.hosts.empty()) {
      hosts = parse_hosts(o.hosts);
    } else if (o.hostfile) {
      hosts = parse_hostfile(*o.hostfile);
    } else {
      hosts = {HostSpec{"localhost", o.num_proc.value_or(1)}};  // horovodrun's default: localhost:<np>
    }
    choice.source = std::make_unique<StaticHostSource>(std::move(hosts));
  }
  if (o.elastic.enabled && !o.elastic.kubernetes.selector && !o.elastic.host_discovery_script) {
    const DiscoveryResult fixed = choice.source->discover();
    choice.info.push_back(fmt::format(
        "elastic job on fixed hosts {}: failed workers are restarted, failing hosts blacklisted",
        format_hosts(fixed.hosts)));
  }
  return choice;
}

}  // namespace hvd::launcher
