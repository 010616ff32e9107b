// The pure half of `hvdrun --mpi`: implementation detection, the mpirun
// command line and its dry-run rendering (contracts in mpi_launch.h).
#include "hvd/launcher/spawn/mpi/mpi_launch.h"

#include "hvd/common/error.h"
#include "hvd/common/job_env.h"
#include "hvd/launcher/plan/worker_env.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <set>

namespace hvd::launcher {

namespace {

/// --ssh-strict-host-key-checking for the MPI's own ssh.
constexpr const char* kStrictHostKeys = "-o StrictHostKeyChecking=yes";

// horovodrun adds these for Open MPI on 64+ hosts: the rsh tree spawn and
// its concurrency limit misbehave on big clusters.
constexpr std::size_t kLargeClusterHosts = 64;

bool contains(const std::string& text, const char* word) { return text.find(word) != std::string::npos; }

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

/// The -p/-i part that mpirun hands to ssh, or empty.
std::string ssh_args(const Options& options) {
  std::vector<std::string> args;
  if (options.ssh_port) args.push_back(fmt::format("-p {}", *options.ssh_port));
  if (options.ssh_identity_file) args.push_back("-i " + shell_quote(*options.ssh_identity_file));
  if (options.ssh_strict_host_key_checking) args.emplace_back(kStrictHostKeys);
  return join(args, " ");
}

}  // namespace

const char* mpi_impl_name(MpiImpl impl) {
  switch (impl) {
    case MpiImpl::OpenMpi: return "Open MPI";
    case MpiImpl::Mpich: return "MPICH";
    case MpiImpl::IntelMpi: return "Intel MPI";
    case MpiImpl::Unknown: break;
  }
  return "unknown";
}

MpiImpl detect_mpi_impl(const std::string& version_output) {
  if (contains(version_output, "Open MPI") || contains(version_output, "OpenRTE")) return MpiImpl::OpenMpi;
  // Spectrum MPI is an Open MPI derivative with different flags; horovodrun
  // has its own branch for it, hvdrun does not support it.
  if (contains(version_output, "IBM Spectrum MPI")) return MpiImpl::Unknown;
  // Intel MPI's Hydra is derived from MPICH's: check it first.
  if (contains(version_output, "Intel(R) MPI")) return MpiImpl::IntelMpi;
  if (contains(version_output, "MPICH") || contains(version_output, "HYDRA")) return MpiImpl::Mpich;
  return MpiImpl::Unknown;
}

std::string mpi_version_line(const std::string& version_output) {
  auto trimmed = [](std::string line) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    std::size_t start = 0;
    while (start < line.size() && std::isspace(static_cast<unsigned char>(line[start]))) ++start;
    return line.substr(start);
  };
  const std::string first = trimmed(version_output.substr(0, version_output.find('\n')));
  if (first.rfind("HYDRA build details", 0) != 0) return first;
  std::size_t pos = 0;
  while (pos < version_output.size()) {
    const std::size_t nl = version_output.find('\n', pos);
    const std::string line = trimmed(version_output.substr(pos, nl == std::string::npos ? nl : nl - pos));
    if (line.rfind("Version:", 0) == 0) return "HYDRA " + trimmed(line.substr(8));
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  return first;
}

MpiArgsWithoutMpirun interpret_mpi_args_without_mpirun(const std::vector<std::string>& words) {
  MpiArgsWithoutMpirun out;
  for (const auto& word : words) {
    // Open MPI takes its long options with one dash or two.
    const std::size_t dashes = word.rfind("--", 0) == 0 ? 2 : word.rfind('-', 0) == 0 ? 1 : 0;
    const std::string name = dashes ? word.substr(dashes) : std::string();
    if (name == "display-map") {
      out.display_map = true;
    } else if (name == "timestamp-output") {
      out.timestamp_output = true;
    } else if (name == "tag-output" || word == "-l" || word == "-prepend-rank") {
      out.tag_output = true;
    } else if (name == "allow-run-as-root") {
      out.allow_run_as_root = true;
    } else {
      out.ignored.push_back(word);
    }
  }
  return out;
}

std::map<std::string, std::string> mpi_job_env(const Options& options,
                                               const std::map<std::string, std::string>& launcher_env) {
  std::set<std::string> explicit_names;
  for (const auto& item : options.env_exports) explicit_names.insert(item.substr(0, item.find('=')));
  std::map<std::string, std::string> out;
  for (auto& [name, value] : build_common_env(launcher_env, options)) {
    // An enclosing MPI job's own variables (hvdrun started by mpirun or
    // srun) would confuse the mpirun we start and its ranks.
    bool mpi_runtime = false;
    for (const char* prefix :
         {"OMPI_", "PMIX_", "PMI_", "HYDRA_", job_env::kMpiLocalRankId, job_env::kMpiLocalNumRanks, "PRTE_"}) {
      mpi_runtime = mpi_runtime || name.rfind(prefix, 0) == 0;
    }
    // horovodrun --mpi does not choose a controller: an unmodified Horovod
    // worker started by mpirun must take its MPI controller, which
    // HOROVOD_CONTROLLER=gloo (hvdrun's own spawning) would override with a
    // Gloo context lacking HOROVOD_RANK. Our library needs neither.
    const bool controller_choice = name == job_env::kController || name == job_env::kCpuOperations;
    if ((!mpi_runtime && !controller_choice) || explicit_names.count(name) != 0) out[name] = value;
  }
  return out;
}

std::vector<std::string> build_mpirun_command(const MpiInfo& info, const Options& options, const JobPlan& plan,
                                              const std::map<std::string, std::string>& extra_env,
                                              bool running_as_root) {
  if (info.impl == MpiImpl::Unknown) {
    throw InvalidArgument(
        fmt::format("unsupported MPI implementation '{}'; hvdrun --mpi supports Open MPI, "
                    "MPICH and Intel MPI (or drop --mpi)",
                    info.version_line));
  }
  if (options.command.empty()) throw InvalidArgument("no command to run: give the worker command after the flags");
  if (plan.workers.empty()) throw InvalidArgument("nothing to run: the job has no workers");
  if (plan.hosts.empty()) throw InvalidArgument("no hosts to run on");

  const std::size_t np = plan.workers.size();
  // Only hosts that get a rank appear on the command line, with the number
  // of ranks placed there (the plan may have fewer ranks than slots).
  std::vector<std::pair<std::string, int>> used;
  for (const auto& host : plan.hosts) {
    int n = 0;
    for (const auto& w : plan.workers) n += w.slot.hostname == host.name ? 1 : 0;
    if (n > 0) used.emplace_back(host.name, n);
  }
  long declared = 0;
  for (const auto& host : plan.hosts) declared += host.slots;
  if (used.empty() || static_cast<long>(np) > declared) {
    // More ranks than slots (a plan made with SlotCheck::Mpirun): -H says
    // the hosts' slots as given and mpirun decides, as under horovodrun --
    // it refuses, or runs them with --oversubscribe.
    used.clear();
    for (const auto& host : plan.hosts) used.emplace_back(host.name, host.slots);
  }
  std::vector<std::string> with_slots, names;
  for (const auto& [name, slots] : used) {
    with_slots.push_back(fmt::format("{}:{}", name, slots));
    names.push_back(name);
  }

  std::vector<std::string> cmd = {info.mpirun};
  auto add = [&cmd](std::initializer_list<std::string> args) { cmd.insert(cmd.end(), args); };
  // --binding-args replaces the default binding where it stands (as
  // horovodrun does for Open MPI); Intel MPI has no default to replace.
  const std::vector<std::string> user_binding =
      options.binding_args ? split_shell_words(*options.binding_args, "--binding-args") : std::vector<std::string>{};
  auto add_binding = [&cmd, &user_binding](std::initializer_list<std::string> fallback) {
    if (user_binding.empty()) {
      cmd.insert(cmd.end(), fallback);
    } else {
      cmd.insert(cmd.end(), user_binding.begin(), user_binding.end());
    }
  };
  std::vector<std::string> names_exported;
  for (const auto& [name, value] : extra_env) names_exported.push_back(name);  // std::map: sorted
  const std::string ssh = ssh_args(options);

  if (info.impl == MpiImpl::OpenMpi) {
    if (running_as_root) add({"--allow-run-as-root"});
    add({"--tag-output", "-np", std::to_string(np), "-H", join(with_slots, ",")});
    add_binding({"-bind-to", "none", "-map-by", "slot"});
    add({"-mca", "pml", "ob1", "-mca", "btl", "^openib"});
    if (used.size() >= kLargeClusterHosts) {
      add({"-mca", "plm_rsh_no_tree_spawn", "true", "-mca", "plm_rsh_num_concurrent", std::to_string(used.size())});
    }
    if (options.prefix_output_with_timestamp) add({"--timestamp-output"});
    if (!ssh.empty()) add({"-mca", "plm_rsh_args", ssh});
    if (!options.network_interfaces.empty()) {
      add({"-mca", "btl_tcp_if_include", join(options.network_interfaces, ",")});
    }
    if (options.output_filename) add({"--output-filename", *options.output_filename});
    for (const auto& name : names_exported) add({"-x", name});
  } else {
    add({"-l", "-np", std::to_string(np)});
    if (info.impl == MpiImpl::IntelMpi) {
      for (const auto& [name, slots] : used) {
        if (slots != used.front().second) {
          throw InvalidArgument(fmt::format(
              "Intel MPI cannot place different numbers of ranks per host with -hosts ({} has {}, {} has {}); "
              "use the same slots on every host or pass a machine file with --mpi-args '-machinefile FILE'",
              used.front().first, used.front().second, name, slots));
        }
      }
      add({"-ppn", std::to_string(used.front().second), "-hosts", join(names, ",")});
      add_binding({});
    } else {
      add({"-hosts", join(with_slots, ",")});
      add_binding({"-bind-to", "none", "-map-by", "slot"});
    }
    if (!ssh.empty()) {
      if (info.impl == MpiImpl::IntelMpi) {
        add({"-bootstrap", "ssh", "-bootstrap-exec-args", ssh});
      } else {
        // MPICH's Hydra has no -bootstrap-exec-args (Intel MPI's, which
        // horovodrun passes to both): the ssh words go in mpirun's
        // HYDRA_LAUNCHER_EXTRA_ARGS (mpirun_launcher_env).
        add({"-launcher", "ssh"});
      }
    }
    if (info.impl == MpiImpl::Mpich) {
      // Hydra's proxies call back to mpirun at its host name, which the
      // other hosts may not resolve (pods, network namespaces): give them
      // the address hvdrun's store listens on, which they reach. Not when
      // every rank is on this machine (the store is on loopback), nor when
      // --mpi-args sets it.
      auto addr = extra_env.find(job_env::kRendezvousAddr);
      const bool loopback = addr == extra_env.end() || addr->second.rfind("127.", 0) == 0 || addr->second == "::1";
      const bool user_set = options.mpi_args && options.mpi_args->find("-localhost") != std::string::npos;
      if (!loopback && !user_set) add({"-localhost", addr->second});
    }
    if (!options.network_interfaces.empty()) add({"-iface", options.network_interfaces.front()});
    if (options.output_filename) {
      add({"-outfile-pattern", *options.output_filename + "/rank.%r/stdout", "-errfile-pattern",
           *options.output_filename + "/rank.%r/stderr"});
    }
    if (!names_exported.empty()) add({"-genvlist", join(names_exported, ",")});
  }
  if (options.mpi_args) {
    for (auto& word : split_shell_words(*options.mpi_args)) cmd.push_back(std::move(word));
  }
  cmd.insert(cmd.end(), options.command.begin(), options.command.end());
  return cmd;
}

std::map<std::string, std::string> mpirun_launcher_env(const MpiInfo& info, const Options& options) {
  if (info.impl != MpiImpl::Mpich ||
      (!options.ssh_port && !options.ssh_identity_file && !options.ssh_strict_host_key_checking)) {
    return {};
  }
  // Hydra splits the value at blanks and passes no quotes on.
  if (options.ssh_identity_file && options.ssh_identity_file->find_first_of(" \t") != std::string::npos) {
    throw InvalidArgument(fmt::format(
        "-i '{}': MPICH's mpirun passes ssh options split at blanks (HYDRA_LAUNCHER_EXTRA_ARGS), so the identity "
        "file's path must not contain one; use a path without blanks (e.g. a symbolic link)",
        *options.ssh_identity_file));
  }
  std::vector<std::string> words;
  // What the environment already asks of Hydra's ssh (the Kubeflow MPI
  // operator's MPICH launcher sets it) is kept, before -p/-i.
  if (const char* inherited = std::getenv("HYDRA_LAUNCHER_EXTRA_ARGS"); inherited != nullptr && *inherited != '\0') {
    words.emplace_back(inherited);
  }
  if (options.ssh_port) words.push_back(fmt::format("-p {}", *options.ssh_port));
  if (options.ssh_identity_file) words.push_back("-i " + *options.ssh_identity_file);
  if (options.ssh_strict_host_key_checking) words.emplace_back(kStrictHostKeys);
  return {{"HYDRA_LAUNCHER_EXTRA_ARGS", join(words, " ")}};
}

std::vector<std::string> mpi_unapplied_options(const MpiInfo& info, const Options& options) {
  std::vector<std::string> out;
  const bool hydra = info.impl == MpiImpl::Mpich || info.impl == MpiImpl::IntelMpi;
  if (hydra && options.prefix_output_with_timestamp) {
    out.push_back(fmt::format("--prefix-output-with-timestamp: {}'s mpirun has no option to timestamp lines (its -l "
                              "labels them with the rank); ignored",
                              mpi_impl_name(info.impl)));
  }
  if (hydra && options.network_interfaces.size() > 1) {
    std::vector<std::string> rest(options.network_interfaces.begin() + 1, options.network_interfaces.end());
    out.push_back(fmt::format("--network-interface: {}'s mpirun takes one interface (-iface {}); {} ignored",
                              mpi_impl_name(info.impl), options.network_interfaces.front(), join(rest, ",")));
  }
  if (options.ssh_keepalive != Options{}.ssh_keepalive) {
    out.push_back(fmt::format("--ssh-keepalive {}: it paces hvdrun's own SSH connections; under --mpi the MPI's "
                              "ssh reaches the hosts (set ServerAliveInterval in ~/.ssh/config); ignored",
                              options.ssh_keepalive.count()));
  }
  return out;
}

std::vector<std::string> mpi_output_directories(const MpiInfo& info, const std::string& dir, std::size_t np) {
  if (info.impl == MpiImpl::OpenMpi) return {dir};
  std::vector<std::string> out;
  out.reserve(np);
  // Hydra's %r is the rank without padding.
  for (std::size_t r = 0; r < np; ++r) out.push_back(fmt::format("{}/rank.{}", dir, r));
  return out;
}

std::string render_mpi_dry_run(const MpiInfo& info, const Options& options, const JobPlan& plan,
                               const std::map<std::string, std::string>& extra_env, bool running_as_root,
                               DryRunFormat format) {
  // The rendezvous variables exist only once the store listens; name them so
  // the printed command is the one run_mpi_job runs.
  std::map<std::string, std::string> env = extra_env;
  env.emplace(job_env::kRendezvousAddr, "<store address>");
  env.emplace(job_env::kRendezvousPort, "<store port>");
  env[job_env::kSecret] = "<job secret>";
  std::vector<std::string> cmd = build_mpirun_command(info, options, plan, env, running_as_root);
  const std::map<std::string, std::string> launcher_env = mpirun_launcher_env(info, options);
  auto shown = [](const std::string& name, const std::string& value) {
    return is_secret_name(name) || name == job_env::kSecret ? std::string("<hidden>") : value;
  };
  if (format == DryRunFormat::Json) {
    nlohmann::json j;
    j["engine"] = "mpi";
    j["mpi_implementation"] = mpi_impl_name(info.impl);
    j["mpirun_version"] = info.version_line;
    j["num_proc"] = plan.workers.size();
    j["command"] = cmd;
    nlohmann::json env_json = nlohmann::json::object();
    for (const auto& [name, value] : env) env_json[name] = shown(name, value);
    j["env"] = env_json;
    if (!launcher_env.empty()) j["mpirun_env"] = launcher_env;
    return j.dump(2) + "\n";
  }
  std::vector<std::string> quoted;
  for (const auto& word : cmd) quoted.push_back(shell_quote(word));
  std::string out = fmt::format("# {} ({}), {} rank{}\n", mpi_impl_name(info.impl), info.version_line,
                                plan.workers.size(), plan.workers.size() == 1 ? "" : "s");
  out += join(quoted, " ") + "\n";
  for (const auto& [name, value] : launcher_env) {
    out += fmt::format("# in mpirun's environment only (its ssh options): {}={}\n", name, shell_quote(value));
  }
  out += "# exported to every rank through mpirun's environment:\n";
  for (const auto& [name, value] : env) {
    std::string v = shown(name, value);
    out += fmt::format("#   {}={}\n", name, v == "<hidden>" ? v : shell_quote(v));
  }
  return out;
}

}  // namespace hvd::launcher
