// Choosing the host source (--hosts-from) and merging a platform's
// description into the Options (docs/platforms.md#precedence).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

#include "hvd/common/error.h"
#include "hvd/common/text.h"
#include "hvd/launcher/discovery/platform/platform.h"

namespace hvd::launcher::platform {

namespace {

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : sep) + i;
  return out;
}

std::string where_we_looked(const std::string& name) {
  if (name == "sagemaker") {
    return "no <base>/input/config/resourceconfig.json (base: SAGEMAKER_BASE_DIR or /opt/ml) and no SM_HOSTS / "
           "SM_CURRENT_HOST";
  }
  if (name == "vertex")
    return "neither CLUSTER_SPEC nor a TF_CONFIG with a cluster is set (not inside a Vertex AI training job)";
  if (name == "lsf") return "LSB_JOBID is not set (not inside an LSF job)";
  if (name == "oci") return "OCI__MODE is not set (not an OCI Data Science job run)";
  return "SLURM_JOB_ID is not set (not inside a Slurm allocation)";
}

std::string role(const PlatformDescription& p) {
  if (p.unranked) return p.unranked_reason;
  if (p.this_host.empty()) return "not one of the hosts: launches the job from here";
  if (p.this_host == p.leader) return "the leader: launches the job";
  if (std::none_of(p.hosts.begin(), p.hosts.end(), [&](const HostSpec& h) { return h.name == p.this_host; })) {
    return "not one of the hosts: launches the job from here";
  }
  return fmt::format("a follower: waits for the leader {} to attach, then exits with the job's status", p.leader);
}

}  // namespace

bool PlatformDescription::launches_here() const {
  if (unranked) return false;
  if (this_host.empty() || this_host == leader) return true;
  return std::none_of(hosts.begin(), hosts.end(), [&](const HostSpec& h) { return h.name == this_host; });
}

namespace {

std::optional<PlatformDescription> detect_unchecked(const std::string& name, const Environment& ctx) {
  if (name == "sagemaker") return detect_sagemaker(ctx);
  if (name == "slurm") return detect_slurm(ctx);
  if (name == "vertex") return detect_vertex(ctx);
  if (name == "lsf") return detect_lsf(ctx);
  // OCI runs are elastic jobs: run_oci_if_detected (job/oci_job.cpp) takes
  // them before the Options exist; what reaches here has no OCI__MODE.
  if (name == "oci") return std::nullopt;
  throw InvalidArgument(fmt::format("unknown platform '{}'", shown(name)));
}

/// Every name a platform gave (hosts, leader, this host) must be one -H
/// would take (IPv6 literals included).
void check_names(const PlatformDescription& p) {
  auto check = [&](const std::string& name, const char* what) {
    const bool ipv6 = name.find(':') != std::string::npos && std::all_of(name.begin(), name.end(), [](char c) {
                        return std::isalnum(static_cast<unsigned char>(c)) || c == ':' || c == '.' || c == '%';
                      });
    const std::optional<std::string> why = ipv6 ? try_parse_host_entry("[" + name + "]").error : host_name_error(name);
    if (why) {
      throw InvalidArgument(
          fmt::format("the {} job's {} (read from {}): {}", p.name, what, one_line(join(p.evidence, ", "), 512), *why));
    }
  };
  for (const auto& h : p.hosts) check(h.name, "host list");
  if (!p.leader.empty()) check(p.leader, "leader");
  if (!p.this_host.empty()) check(p.this_host, "current host");
}

}  // namespace

std::optional<PlatformDescription> detect(const std::string& name, const Environment& ctx) {
  // Platform variables, files and JSON come from outside: a message quoting
  // them is made one line, and every host name is checked as -H checks it.
  try {
    auto p = detect_unchecked(name, ctx);
    if (p) {
      check_names(*p);
      for (auto& e : p->evidence) e = one_line(e, 1024);
    }
    return p;
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(one_line(e.what()));
  }
}

PlatformDecision apply_platform(const Options& options, const std::string& explicit_hosts, const Environment& ctx) {
  PlatformDecision d;
  d.options = options;
  const std::string& from = options.hosts_from;
  // --slots-per-host outside elastic mode is for a platform's hosts only.
  const bool slots_flag = options.elastic.slots_per_host && !options.elastic.enabled;
  auto no_platform = [&]() -> PlatformDecision {
    if (slots_flag) {
      throw InvalidArgument(fmt::format(
          "--slots-per-host needs --host-discovery-script or --min-np (elastic mode), or a platform's hosts "
          "(--hosts-from {}: {})",
          from,
          from == "none"           ? "turned off"
          : explicit_hosts.empty() ? "no platform detected"
                                   : explicit_hosts + " given"));
    }
    return d;
  };
  if (from == "none") return no_platform();
  if (from == "auto") {
    if (!explicit_hosts.empty()) return no_platform();  // explicit flags win
    for (const auto& name : implemented_platforms()) {
      if ((d.platform = detect(name, ctx))) break;
    }
    if (!d.platform) return no_platform();
  } else {
    if (!explicit_hosts.empty()) {
      throw InvalidArgument(
          fmt::format("--hosts-from {} and {} cannot be used together: give one source of hosts (or --hosts-from none)",
                      from, explicit_hosts));
    }
    d.platform = detect(from, ctx);
    if (!d.platform) throw InvalidArgument(fmt::format("--hosts-from {}: {}", from, where_we_looked(from)));
  }
  PlatformDescription& p = *d.platform;
  Options& o = d.options;
  if (slots_flag) {
    for (auto& h : p.hosts) h.slots = *o.elastic.slots_per_host;
    d.info.push_back(
        fmt::format("--slots-per-host {} wins over {}'s slots per host", *o.elastic.slots_per_host, p.name));
  }
  const long total = total_slots(p.hosts);
  if (!p.unranked && o.num_proc && *o.num_proc > total) {
    throw InvalidArgument(fmt::format("-np {} but the {} job offers only {} slot{} ({}; from {})", *o.num_proc, p.name,
                                      total, total == 1 ? "" : "s", format_hosts(p.hosts), join(p.evidence, ", ")));
  }
  if (!o.num_proc) {
    o.num_proc = static_cast<int>(total);
    d.info.push_back(fmt::format("-np not given: {} rank{}, the {} job's slots", total, total == 1 ? "" : "s", p.name));
  }

  if (p.interface) {
    if (o.network_interfaces.empty()) {
      o.network_interfaces = {*p.interface};
    } else if (std::find(o.network_interfaces.begin(), o.network_interfaces.end(), *p.interface) ==
               o.network_interfaces.end()) {
      d.info.push_back(fmt::format("--network-interface {} wins over {}'s interface {}",
                                   join(o.network_interfaces, ","), p.name, *p.interface));
    }
  }
  // What the platform's own runner would give the script (SageMaker's
  // training toolkit): its arguments after the command, its variables
  // where hvdrun's environment lacks them, each host's own per-machine values.
  if (!p.user_args.empty() && !o.command.empty()) {
    const auto keep = ctx.get("HVDRUN_PLATFORM_ARGS");
    if (keep && *keep == "0") {
      d.info.push_back(fmt::format("{}'s arguments ({}) are not appended to the command: HVDRUN_PLATFORM_ARGS=0",
                                   p.name, p.user_args_origin));
    } else {
      o.command.insert(o.command.end(), p.user_args.begin(), p.user_args.end());
      d.info.push_back(fmt::format("{}'s hyperparameters ({}) follow the command as its training toolkit passes "
                                   "them: {} (HVDRUN_PLATFORM_ARGS=0 leaves them out)",
                                   p.name, p.user_args_origin, join(p.user_args, " ")));
    }
  }
  // Applied per rank by make_plan, so the user's own -x of a name wins.
  auto exported_by_user = [&o](const std::string& name) {
    return std::any_of(o.env_exports.begin(), o.env_exports.end(),
                       [&name](const std::string& x) { return x.substr(0, x.find('=')) == name; });
  };
  std::vector<std::string> given;
  for (const auto& [name, value] : p.job_env) {
    if (ctx.get(name) || exported_by_user(name)) continue;  // the platform's runner (or the user) set it
    for (const auto& h : p.hosts) o.host_env[h.name][name] = value;
    given.push_back(name);
  }
  if (!given.empty()) d.info.push_back(fmt::format("{} gives every worker {}", p.name, join(given, ", ")));
  for (const auto& [host, vars] : p.host_env) {
    for (const auto& [name, value] : vars) {
      if (!exported_by_user(name)) o.host_env[host][name] = value;
    }
  }
  if (p.custom_mpi_options) {
    // As the SageMaker training toolkit: --NCCL_DEBUG X is -x NCCL_DEBUG=X, the rest is for mpirun.
    const CustomMpiOptions custom = parse_custom_mpi_options(*p.custom_mpi_options);
    if (o.engine == Engine::Mpi) {
      if (!o.mpi_args) {
        o.mpi_args = custom.mpirun_args();
        d.info.push_back(fmt::format("{}'s custom MPI options '{}' become --mpi-args '{}'", p.name,
                                     *p.custom_mpi_options, *o.mpi_args));
      } else {
        d.info.push_back(fmt::format("--mpi-args '{}' wins over {}'s custom MPI options '{}'", *o.mpi_args, p.name,
                                     *p.custom_mpi_options));
      }
    } else {
      // hvdrun starts the workers itself: the environment settings apply
      // (before the user's own -x, which win), mpirun's own options cannot.
      std::vector<std::string> exports;
      if (custom.nccl_debug) exports.push_back("NCCL_DEBUG=" + *custom.nccl_debug);
      exports.insert(exports.end(), custom.env_exports.begin(), custom.env_exports.end());
      if (!exports.empty()) {
        o.env_exports.insert(o.env_exports.begin(), exports.begin(), exports.end());
        d.info.push_back(fmt::format("{}'s custom MPI options give every worker -x {}", p.name, join(exports, " -x ")));
      }
      if (!custom.not_mapped.empty()) {
        d.warnings.push_back(fmt::format(
            "{}'s custom MPI option{} '{}' (sagemaker_mpi_custom_mpi_options) {} ignored: mpirun options have no "
            "effect when hvdrun starts the job itself (give --mpi to pass them to mpirun)",
            p.name, custom.not_mapped.size() == 1 ? "" : "s", join(custom.not_mapped, " "),
            custom.not_mapped.size() == 1 ? "is" : "are"));
      }
    }
  }
  d.follower = !p.unranked && !p.launches_here();
  d.info.insert(
      d.info.begin(),
      fmt::format("hosts from {}{}: {} (this host: {}; leader: {}; read from {})", p.name,
                  from == "auto" ? " (detected; --hosts-from none turns this off)" : "", format_hosts(p.hosts),
                  p.this_host.empty() ? "not one of them" : p.this_host, p.leader, join(p.evidence, ", ")));
  return d;
}

std::string render_platform(const PlatformDescription& p) {
  std::string out = fmt::format("platform: {}\n", p.name);
  out += fmt::format("  read from: {}\n", join(p.evidence, ", "));
  out += fmt::format("  this host: {} ({})\n", p.this_host.empty() ? "-" : p.this_host, role(p));
  out += fmt::format("  leader: {}\n", p.leader);
  out += fmt::format("  hosts: {}\n", format_hosts(p.hosts));
  if (p.interface) out += fmt::format("  interface: {}\n", *p.interface);
  if (p.custom_mpi_options) out += fmt::format("  custom MPI options: {}\n", *p.custom_mpi_options);
  return out + "\n";
}

std::string render_platform_json(const PlatformDescription& p) {
  nlohmann::json j;
  j["name"] = p.name;
  j["evidence"] = p.evidence;
  j["this_host"] = p.this_host;
  j["leader"] = p.leader;
  j["launches_here"] = p.launches_here();
  j["unranked"] = p.unranked;
  j["hosts"] = nlohmann::json::array();
  for (const auto& h : p.hosts) j["hosts"].push_back({{"name", h.name}, {"slots", h.slots}});
  j["interface"] = p.interface ? nlohmann::json(*p.interface) : nlohmann::json(nullptr);
  j["custom_mpi_options"] = p.custom_mpi_options ? nlohmann::json(*p.custom_mpi_options) : nlohmann::json(nullptr);
  return j.dump();
}

}  // namespace hvd::launcher::platform
