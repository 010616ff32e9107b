// Vertex AI / AI Platform training clusters (docs/platforms.md#vertex-ai):
// CLUSTER_SPEC (Vertex's worker pools) or TF_CONFIG (TensorFlow's task
// names, also set by AI Platform Training).
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "hvd/common/error.h"
#include "hvd/launcher/discovery/platform/platform.h"

namespace hvd::launcher::platform {

namespace {

using nlohmann::json;

/// What one pool name means.
enum class Role { Primary, Worker, ReductionServer, Evaluator };

struct PoolName {
  const char* name;
  Role role;
  const char* described;  ///< for the unranked line
};

// CLUSTER_SPEC's pools are named by position in workerPoolSpecs[]; TF_CONFIG
// uses TensorFlow's task names (Vertex: chief, worker, ps, evaluator; AI
// Platform Training: master instead of chief).
const PoolName kClusterSpecPools[] = {
    {"workerpool0", Role::Primary, "primary replica"},
    {"workerpool1", Role::Worker, "worker"},
    {"workerpool2", Role::ReductionServer, "Vertex reduction server (or parameter server)"},
    {"workerpool3", Role::Evaluator, "Vertex evaluator"},
};
const PoolName kTfConfigPools[] = {
    {"chief", Role::Primary, "chief"},
    {"master", Role::Primary, "master"},
    {"worker", Role::Worker, "worker"},
    {"ps", Role::ReductionServer, "parameter server (Vertex reduction server pool)"},
    {"evaluator", Role::Evaluator, "evaluator"},
};

template <size_t N>
const PoolName* find_pool(const PoolName (&pools)[N], const std::string& name) {
  for (const auto& p : pools) {
    if (name == p.name) return &p;
  }
  return nullptr;
}

template <size_t N>
std::string pool_names(const PoolName (&pools)[N]) {
  std::string out;
  for (const auto& p : pools) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

/// "host:2222" -> "host"; "[fd00::1]:2222" -> "fd00::1"; no port: as it is.
std::string strip_port(const std::string& address) {
  if (!address.empty() && address.front() == '[') {
    const size_t close = address.find(']');
    if (close != std::string::npos) return address.substr(1, close - 1);
    return address;
  }
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || address.find(':') != colon) return address;  // no port, or a bare IPv6
  const std::string port = address.substr(colon + 1);
  if (port.empty() || !std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return address;
  }
  return address.substr(0, colon);
}

}  // namespace

std::optional<PlatformDescription> detect_vertex(const Environment& ctx) {
  std::string var = "CLUSTER_SPEC";
  auto text = ctx.get(var);
  if (!text || text->empty()) {
    var = "TF_CONFIG";
    text = ctx.get(var);
  }
  if (!text || text->empty()) return std::nullopt;
  const bool tf = var == "TF_CONFIG";

  json spec;
  try {
    spec = json::parse(*text);
  } catch (const json::exception& e) {
    throw InvalidArgument(fmt::format("{}: malformed JSON ({})", var, e.what()));
  }
  if (!spec.is_object()) throw InvalidArgument(fmt::format("{}: expected a JSON object", var));
  auto cluster = spec.find("cluster");
  // TensorFlow reads a TF_CONFIG without a cluster ("{}") as one local
  // worker: no platform job.
  if (tf && (cluster == spec.end() || (cluster->is_object() && cluster->empty()))) return std::nullopt;
  if (cluster == spec.end()) throw InvalidArgument(fmt::format("{}: field 'cluster' is missing", var));
  if (!cluster->is_object()) throw InvalidArgument(fmt::format("{}: field 'cluster' is not an object", var));

  // Every pool: its role and its hosts (ports dropped).
  struct Pool {
    const PoolName* name;
    std::vector<std::string> hosts;
    std::string key;  ///< as the description spells it ("workerpool1", "master")
  };
  std::vector<Pool> pools;
  for (auto it = cluster->begin(); it != cluster->end(); ++it) {
    const PoolName* name = tf ? find_pool(kTfConfigPools, it.key()) : find_pool(kClusterSpecPools, it.key());
    if (!name) {
      throw InvalidArgument(fmt::format("{}: field 'cluster.{}': unknown pool (expected {})", var, it.key(),
                                        tf ? pool_names(kTfConfigPools) : pool_names(kClusterSpecPools)));
    }
    const std::string field = fmt::format("{}: field 'cluster.{}'", var, it.key());
    if (!it->is_array()) throw InvalidArgument(field + ": expected a list of \"host:port\" addresses");
    if (it->empty()) throw InvalidArgument(field + ": the pool is empty");
    Pool pool{name, {}, it.key()};
    for (const auto& a : *it) {
      if (!a.is_string() || strip_port(a.get<std::string>()).empty()) {
        throw InvalidArgument(field + ": an address is not a non-empty \"host:port\" string");
      }
      pool.hosts.push_back(strip_port(a.get<std::string>()));
    }
    pools.push_back(std::move(pool));
  }
  // Ranked hosts: the primary pool first (its first replica leads), then the workers.
  std::vector<const Pool*> ranked;
  for (Role role : {Role::Primary, Role::Worker}) {
    for (const auto& p : pools) {
      if (p.name->role == role) ranked.push_back(&p);
    }
  }
  const auto primaries =
      std::count_if(pools.begin(), pools.end(), [](const Pool& p) { return p.name->role == Role::Primary; });
  if (primaries == 0) {
    throw InvalidArgument(fmt::format("{}: field 'cluster.{}' is missing (the primary replica's pool)", var,
                                      tf ? "chief" : "workerpool0"));
  }
  if (primaries > 1) throw InvalidArgument(fmt::format("{}: both 'cluster.chief' and 'cluster.master' are given", var));

  // This machine: task.type and task.index.
  auto task = spec.find("task");
  if (task == spec.end()) throw InvalidArgument(fmt::format("{}: field 'task' is missing", var));
  if (!task->is_object()) throw InvalidArgument(fmt::format("{}: field 'task' is not an object", var));
  auto type_it = task->find("type");
  if (type_it == task->end()) throw InvalidArgument(fmt::format("{}: field 'task.type' is missing", var));
  if (!type_it->is_string() || type_it->get<std::string>().empty()) {
    throw InvalidArgument(fmt::format("{}: field 'task.type' is not a non-empty string", var));
  }
  const std::string type = type_it->get<std::string>();
  auto index_it = task->find("index");
  if (index_it == task->end()) throw InvalidArgument(fmt::format("{}: field 'task.index' is missing", var));
  if (!index_it->is_number_integer() || index_it->get<long long>() < 0) {
    throw InvalidArgument(
        fmt::format("{}: field 'task.index' is not a whole number >= 0 (got {})", var, index_it->dump()));
  }
  const long long index = index_it->get<long long>();
  const PoolName* task_pool = tf ? find_pool(kTfConfigPools, type) : find_pool(kClusterSpecPools, type);
  if (!task_pool) {
    throw InvalidArgument(fmt::format("{}: field 'task.type': unknown pool '{}' (expected {})", var, type,
                                      tf ? pool_names(kTfConfigPools) : pool_names(kClusterSpecPools)));
  }
  const Pool* mine = nullptr;
  for (const auto& p : pools) {
    if (p.name == task_pool) mine = &p;
  }

  PlatformDescription p;
  p.name = "vertex";
  p.evidence.push_back(fmt::format("{} (task {} index {})", var, type, index));
  const bool unranked = task_pool->role == Role::ReductionServer || task_pool->role == Role::Evaluator;
  if (!mine && !unranked) {
    throw InvalidArgument(fmt::format("{}: field 'task.type': '{}' is not one of the pools in 'cluster'", var, type));
  }
  if (mine && index >= static_cast<long long>(mine->hosts.size())) {
    throw InvalidArgument(fmt::format("{}: field 'task.index': {} is out of range (cluster.{} has {} entr{})", var,
                                      index, type, mine->hosts.size(), mine->hosts.size() == 1 ? "y" : "ies"));
  }
  // TensorFlow leaves the evaluator out of 'cluster': it has no address then.
  if (mine) p.this_host = mine->hosts[static_cast<size_t>(index)];
  if (unranked) {
    p.unranked = true;
    p.unranked_reason = fmt::format("this machine is a {} ({} index {}): it gets no ranks of the hvdrun job",
                                    task_pool->described, type, index);
  }

  std::vector<std::string> names;
  for (const Pool* pool : ranked) {
    for (const auto& h : pool->hosts) {
      if (std::find(names.begin(), names.end(), h) != names.end()) {
        throw InvalidArgument(
            fmt::format("{}: field 'cluster.{}': host '{}' is listed twice", var, pool->name->name, h));
      }
      names.push_back(h);
    }
  }
  p.leader = names.front();

  // Slots: this machine's GPUs (Vertex tells a machine only its own).
  const GpuCount gpus = count_nvidia_gpus(ctx);
  p.evidence.insert(p.evidence.end(), gpus.evidence.begin(), gpus.evidence.end());
  const int slots = std::max(1, gpus.count);
  for (const auto& n : names) p.hosts.push_back(HostSpec{n, slots});
  // Each machine's own copy of the description names its own task: ranks
  // on another machine get theirs, not this machine's.
  for (const Pool* pool : ranked) {
    for (std::size_t i = 0; i < pool->hosts.size(); ++i) {
      json own = spec;
      own["task"]["type"] = pool->key;
      own["task"]["index"] = i;
      p.host_env[pool->hosts[i]][var] = own.dump();
    }
  }
  return p;
}

}  // namespace hvd::launcher::platform
