// SageMaker's cluster description (docs/platforms.md#sagemaker).
#include <fmt/format.h>

#include <sys/stat.h>
#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "hvd/common/error.h"
#include "hvd/launcher/discovery/platform/platform.h"

namespace hvd::launcher::platform {

namespace {

using nlohmann::json;

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

json read_json_file(const std::string& path, const std::string& shown) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument(fmt::format("{}: cannot be read", shown));
  std::stringstream buf;
  buf << in.rdbuf();
  try {
    json j = json::parse(buf.str());
    if (!j.is_object()) throw InvalidArgument(fmt::format("{}: expected a JSON object", shown));
    return j;
  } catch (const json::exception& e) {
    throw InvalidArgument(fmt::format("{}: malformed JSON ({})", shown, e.what()));
  }
}

std::string string_field(const json& j, const char* field, const std::string& shown) {
  auto it = j.find(field);
  if (it == j.end()) throw InvalidArgument(fmt::format("{}: field '{}' is missing", shown, field));
  if (!it->is_string() || it->get<std::string>().empty()) {
    throw InvalidArgument(fmt::format("{}: field '{}' is not a non-empty string", shown, field));
  }
  return it->get<std::string>();
}

std::vector<std::string> host_list(const json& hosts, const std::string& shown) {
  if (!hosts.is_array()) throw InvalidArgument(fmt::format("{}: expected a list of host names", shown));
  std::vector<std::string> out;
  for (const auto& h : hosts) {
    if (!h.is_string() || h.get<std::string>().empty()) {
      throw InvalidArgument(fmt::format("{}: a host name is not a non-empty string", shown));
    }
    out.push_back(h.get<std::string>());
  }
  if (out.empty()) throw InvalidArgument(fmt::format("{}: the host list is empty", shown));
  return out;
}

/// A hyperparameter: SageMaker stores each value JSON-encoded ("2",
/// "\"-x y\""); a value that is not JSON is taken as it is (as the
/// SageMaker training toolkit does).
std::optional<json> hyperparameter(const json& hps, const char* key) {
  auto it = hps.find(key);
  if (it == hps.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return *it;
  try {
    return json::parse(it->get<std::string>());
  } catch (const json::exception&) {
    return json(it->get<std::string>());
  }
}

/// A hyperparameter value as the SageMaker training toolkit puts it on the
/// command line (Python's str() of the decoded value; a mapping as
/// "k=v,k2=v2", sorted).
std::string toolkit_value(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_null()) return "None";
  if (v.is_object()) {
    std::string out;
    for (auto it = v.begin(); it != v.end(); ++it) {  // nlohmann's object: sorted keys
      out += (out.empty() ? "" : ",") + it.key() + "=" + toolkit_value(it.value());
    }
    return out;
  }
  return v.dump();
}

/// The channels of inputdataconfig.json: {"training": {...}, ...}.
std::vector<std::string> channel_names(const std::string& path) {
  std::vector<std::string> out;
  const json config = read_json_file(path, path);
  for (auto it = config.begin(); it != config.end(); ++it) out.push_back(it.key());
  return out;
}

std::string upper(std::string text) {
  for (auto& c : text) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return text;
}

int positive(const json& v, const std::string& shown) {
  long n = 0;
  if (v.is_number_integer()) {
    n = v.get<long>();
  } else if (v.is_string()) {
    const std::string s = v.get<std::string>();
    char* end = nullptr;
    n = std::strtol(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0') n = 0;
  }
  if (n < 1 || n > 65536)
    throw InvalidArgument(fmt::format("{}: expected a whole number >= 1, got {}", shown, v.dump()));
  return static_cast<int>(n);
}

}  // namespace

std::optional<PlatformDescription> detect_sagemaker(const Environment& ctx) {
  const std::string base = ctx.get("SAGEMAKER_BASE_DIR").value_or("/opt/ml");
  const std::string config_path = base + "/input/config/resourceconfig.json";
  const std::string hps_path = base + "/input/config/hyperparameters.json";
  const bool have_file = exists(ctx.path(config_path));
  const bool have_env = ctx.get("SM_HOSTS") || ctx.get("SM_CURRENT_HOST");
  if (!have_file && !have_env) return std::nullopt;

  PlatformDescription p;
  p.name = "sagemaker";
  std::vector<std::string> names;
  if (have_file) {
    const json config = read_json_file(ctx.path(config_path), config_path);
    p.evidence.push_back(config_path);
    p.this_host = string_field(config, "current_host", config_path);
    auto hosts = config.find("hosts");
    if (hosts == config.end()) throw InvalidArgument(fmt::format("{}: field 'hosts' is missing", config_path));
    names = host_list(*hosts, config_path + ": field 'hosts'");
    auto iface = config.find("network_interface_name");
    if (iface != config.end() && iface->is_string() && !iface->get<std::string>().empty()) {
      p.interface = iface->get<std::string>();
    }
  } else {
    const auto hosts = ctx.get("SM_HOSTS");
    const auto current = ctx.get("SM_CURRENT_HOST");
    if (!hosts)
      throw InvalidArgument("SM_CURRENT_HOST is set but SM_HOSTS is not (expected e.g. SM_HOSTS='[\"algo-1\"]')");
    if (!current || current->empty()) {
      throw InvalidArgument("SM_HOSTS is set but SM_CURRENT_HOST is not (expected e.g. SM_CURRENT_HOST=algo-1)");
    }
    json parsed;
    try {
      parsed = json::parse(*hosts);
    } catch (const json::exception& e) {
      throw InvalidArgument(fmt::format("SM_HOSTS: malformed JSON ({})", e.what()));
    }
    names = host_list(parsed, "SM_HOSTS");
    p.this_host = *current;
    p.evidence.push_back("SM_HOSTS=" + *hosts);
    p.evidence.push_back("SM_CURRENT_HOST=" + *current);
    if (auto iface = ctx.get("SM_NETWORK_INTERFACE_NAME"); iface && !iface->empty()) {
      p.interface = *iface;
      p.evidence.push_back("SM_NETWORK_INTERFACE_NAME=" + *iface);
    }
  }
  const std::string hosts_origin = have_file ? config_path : std::string("SM_HOSTS");
  std::sort(names.begin(), names.end());
  if (std::adjacent_find(names.begin(), names.end()) != names.end()) {
    throw InvalidArgument(
        fmt::format("{}: host '{}' is listed twice", hosts_origin, *std::adjacent_find(names.begin(), names.end())));
  }
  if (std::find(names.begin(), names.end(), p.this_host) == names.end()) {
    throw InvalidArgument(fmt::format("{}: the current host '{}' is not one of the hosts", hosts_origin, p.this_host));
  }
  p.leader = names.front();  // SageMaker's algo-1: the first in sorted order

  // Slots and mpirun options: hyperparameters.json, else the environment.
  int slots = 1;
  bool slots_known = false;
  if (exists(ctx.path(hps_path))) {
    const json hps = read_json_file(ctx.path(hps_path), hps_path);
    p.evidence.push_back(hps_path);
    if (auto v = hyperparameter(hps, "sagemaker_mpi_num_of_processes_per_host")) {
      slots = positive(*v, hps_path + ": sagemaker_mpi_num_of_processes_per_host");
      slots_known = true;
    }
    if (auto v = hyperparameter(hps, "sagemaker_mpi_custom_mpi_options")) {
      const std::string text = v->is_string() ? v->get<std::string>() : v->dump();
      if (!text.empty()) p.custom_mpi_options = text;
    }
    // The user's hyperparameters (not SageMaker's own sagemaker_*), as the
    // training toolkit hands them to the entry point.
    json user = json::object();
    for (auto it = hps.begin(); it != hps.end(); ++it) {
      if (it.key().rfind("sagemaker_", 0) == 0) continue;
      user[it.key()] = *hyperparameter(hps, it.key().c_str());
    }
    for (auto it = user.begin(); it != user.end(); ++it) {  // sorted keys
      p.user_args.push_back((it.key().size() > 1 ? "--" : "-") + it.key());
      p.user_args.push_back(toolkit_value(it.value()));
    }
    if (!user.empty()) p.user_args_origin = hps_path;
    p.job_env.emplace_back("SM_HPS", user.dump());
    p.job_env.emplace_back("SM_USER_ARGS", json(p.user_args).dump());
    for (auto it = user.begin(); it != user.end(); ++it) {
      p.job_env.emplace_back("SM_HP_" + upper(it.key()), toolkit_value(it.value()));
    }
  } else if (auto args = ctx.get("SM_USER_ARGS"); args && !args->empty()) {
    json list;
    try {
      list = json::parse(*args);
    } catch (const json::exception& e) {
      throw InvalidArgument(fmt::format("SM_USER_ARGS: malformed JSON ({})", e.what()));
    }
    if (!list.is_array()) throw InvalidArgument("SM_USER_ARGS: expected a JSON list of arguments");
    for (const auto& a : list) p.user_args.push_back(a.is_string() ? a.get<std::string>() : a.dump());
    if (!p.user_args.empty()) p.user_args_origin = "SM_USER_ARGS";
  }
  // Where the training toolkit tells a script to read and write.
  p.job_env.emplace_back("SM_MODEL_DIR", base + "/model");
  p.job_env.emplace_back("SM_OUTPUT_DIR", base + "/output");
  p.job_env.emplace_back("SM_OUTPUT_DATA_DIR", base + "/output/data");
  p.job_env.emplace_back("SM_INPUT_DIR", base + "/input");
  p.job_env.emplace_back("SM_INPUT_CONFIG_DIR", base + "/input/config");
  const std::string data_config = base + "/input/config/inputdataconfig.json";
  if (exists(ctx.path(data_config))) {
    const std::vector<std::string> channels = channel_names(ctx.path(data_config));
    p.job_env.emplace_back("SM_CHANNELS", json(channels).dump());
    for (const auto& c : channels) p.job_env.emplace_back("SM_CHANNEL_" + upper(c), base + "/input/data/" + c);
  }
  if (!slots_known) {
    if (auto gpus = ctx.get("SM_NUM_GPUS")) {
      char* end = nullptr;
      const long n = std::strtol(gpus->c_str(), &end, 10);
      if (gpus->empty() || *end != '\0' || n < 0 || n > 65536) {
        throw InvalidArgument(fmt::format("SM_NUM_GPUS='{}' is not a whole number >= 0", *gpus));
      }
      p.evidence.push_back("SM_NUM_GPUS=" + *gpus);
      if (n > 0) slots = static_cast<int>(n);
    }
  }
  for (const auto& n : names) p.hosts.push_back(HostSpec{n, slots});
  p.job_env.emplace_back("SM_HOSTS", json(names).dump());
  for (const auto& n : names) p.host_env[n]["SM_CURRENT_HOST"] = n;
  return p;
}

}  // namespace hvd::launcher::platform
