// Workers started by an MPI launcher: rank/size from its variables, the
// store from hvdrun, HVD_MASTER_* or the MPI plug-in (contracts in mpi_env.h).
#include "hvd/collective/mpi_env.h"

#include "mpi_bootstrap/hvd_mpi_bootstrap.h"
#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/job_env.h"
#include "hvd/common/net.h"
#include "hvd/common/secret.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

namespace hvd::collective {

namespace {

constexpr int kMaxRanks = 1 << 20;
/// "addr port secret" or "error <message>" from rank 0; NUL-padded.
constexpr int kBroadcastBytes = 1024;
constexpr const char* kTopologyPrefix = "mpi_topology/";

int parse_var(const EnvLookup& lookup, const std::string& name, int min, int max) {
  auto text = lookup(name);
  auto value = text ? env::parse_int(*text) : std::nullopt;
  if (!value) throw InvalidArgument(fmt::format("{}='{}' is not an integer", name, text.value_or("")));
  if (*value < min || *value > max) {
    throw InvalidArgument(fmt::format("{}={} is out of range [{}, {}]", name, *value, min, max));
  }
  return static_cast<int>(*value);
}

/// One launcher family: which variables it uses.
struct Family {
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
  const char* source;
};

std::optional<WorldInfo> read_family(const EnvLookup& lookup, const Family& f, const char* size_var) {
  bool has_rank = lookup(f.rank).has_value();
  bool has_size = size_var != nullptr && lookup(size_var).has_value();
  if (!has_rank && !has_size) return std::nullopt;
  if (!has_rank || !has_size) {
    throw InvalidArgument(fmt::format("{} is set but {} is not: the MPI launcher's environment is incomplete",
                                      has_rank ? f.rank : size_var, has_rank ? f.size : f.rank));
  }
  WorldInfo w;
  w.source = f.source;
  w.size = parse_var(lookup, size_var, 1, kMaxRanks);
  w.rank = parse_var(lookup, f.rank, 0, w.size - 1);
  bool has_lr = f.local_rank != nullptr && lookup(f.local_rank).has_value();
  bool has_ls = f.local_size != nullptr && lookup(f.local_size).has_value();
  if (has_lr && has_ls) {
    w.local_size = parse_var(lookup, f.local_size, 1, w.size);
    w.local_rank = parse_var(lookup, f.local_rank, 0, w.local_size - 1);
  }
  return w;
}

/// The first IPv4 address of `wanted_iface` (up), or of the first
/// interface that is up and not loopback when `wanted_iface` is empty; ""
/// when there is none. IoError when the interfaces cannot be listed.
std::string interface_ipv4(const std::string& wanted_iface) {
  for (const auto& a : net::interface_addresses()) {
    if (a.ipv6 || !a.up) continue;
    if (wanted_iface.empty() ? a.loopback : wanted_iface != a.interface) continue;
    return a.address;
  }
  return "";
}

/// The address rank 0 advertises for its store in plug-in mode.
std::string advertised_address(const WorldInfo& w) {
  if (auto iface = env::get(job_env::kGlooIface); iface && !iface->empty()) {
    std::string a = interface_ipv4(*iface);
    if (a.empty()) {
      throw InvalidArgument(
          fmt::format("{}='{}': no such interface with an IPv4 address", job_env::kGlooIface, *iface));
    }
    return a;
  }
  if (w.local_size == w.size) return "127.0.0.1";
  std::string a = interface_ipv4("");
  return a.empty() ? "127.0.0.1" : a;
}

/// The plug-in's broadcast, or nullptr with the reason in `why`. A job that
/// Hydra started (MPICH's mpiexec: PMI_* variables) tries the plug-in built
/// against MPICH first, when it was built (libmpich-dev beside the default
/// MPI), then the default one.
hvd_mpi_bootstrap_broadcast_v1_fn load_plugin(const WorldInfo& w, std::string& why) {
  std::vector<std::string> candidates;
  if (auto path = env::get(kMpiBootstrapLibraryEnv); path && !path->empty()) {
    candidates.push_back(*path);
  } else {
    std::vector<std::string> names;
    if (w.source.rfind("PMI_", 0) == 0) names.push_back(kMpiBootstrapMpichLibrary);
    names.push_back(kMpiBootstrapLibrary);
    Dl_info self{};
    std::string dir;
    if (dladdr(reinterpret_cast<void*>(&load_plugin), &self) != 0 && self.dli_fname != nullptr) {
      std::string me = self.dli_fname;
      auto slash = me.rfind('/');
      if (slash != std::string::npos) dir = me.substr(0, slash + 1);
    }
    for (const auto& name : names) {
      if (!dir.empty()) candidates.push_back(dir + name);
      candidates.push_back(name);
    }
  }
  for (const auto& path : candidates) {
    // RTLD_GLOBAL: Open MPI's own components resolve symbols of libmpi
    // through the global namespace.
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr) {
      const char* e = dlerror();
      why += fmt::format("{}{}", why.empty() ? "" : "; ", e ? e : path);
      continue;
    }
    auto fn = reinterpret_cast<hvd_mpi_bootstrap_broadcast_v1_fn>(dlsym(handle, "hvd_mpi_bootstrap_broadcast_v1"));
    if (fn != nullptr) return fn;  // never dlclose: MPI keeps state in it
    why += fmt::format("{}{}: no hvd_mpi_bootstrap_broadcast_v1", why.empty() ? "" : "; ", path);
  }
  return nullptr;
}

/// The file the plug-in's function was loaded from.
std::string plugin_path(hvd_mpi_bootstrap_broadcast_v1_fn fn) {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(fn), &info) != 0 && info.dli_fname != nullptr) return info.dli_fname;
  return kMpiBootstrapLibrary;
}

std::string broadcast(hvd_mpi_bootstrap_broadcast_v1_fn fn, const WorldInfo& w, const std::string& payload) {
  std::vector<char> buf(kBroadcastBytes, '\0');
  std::copy_n(payload.begin(), std::min<std::size_t>(payload.size(), kBroadcastBytes - 1), buf.begin());
  int rank = -1, size = -1;
  char err[512] = {0};
  if (fn(buf.data(), kBroadcastBytes, &rank, &size, err, sizeof err) != 0) {
    throw IoError(fmt::format("MPI bootstrap failed: {}", err));
  }
  if (rank != w.rank || size != w.size) {
    // A plug-in built against one MPI (Debian's: Open MPI) in a job another
    // MPI started (MPICH's mpiexec): its MPI_Init finds no job and makes a
    // world of one.
    const std::string hint =
        size == 1 && w.size > 1
            ? fmt::format(": the MPI bootstrap plug-in ({}) uses another MPI library than the one that started this "
                          "job; start the job with hvdrun --mpi, or set HVD_MASTER_ADDR, HVD_MASTER_PORT and "
                          "HVD_MASTER_SECRET, or point {} at a plug-in built against this MPI",
                          plugin_path(fn), kMpiBootstrapLibraryEnv)
            : std::string();
    throw InvalidArgument(fmt::format("MPI_COMM_WORLD says rank {} of {} but {} says rank {} of {}{}", rank, size,
                                      w.source, w.rank, w.size, hint));
  }
  return std::string(buf.data());
}

/// Where this process's job store is, once found in HVD_MASTER or plug-in
/// mode. Kept for the life of the process: MPI cannot be initialised again
/// after MPI_Finalize and HVD_MASTER_PORT cannot be bound twice, so a
/// re-init (hvd::shutdown + hvd::init) reuses it.
struct JobStore {
  std::unique_ptr<store::HttpStoreServer> server;  // rank 0 only
  std::string host;
  uint16_t port = 0;
  std::string secret;
  std::string mode;
};
std::mutex g_job_store_mu;
JobStore* g_job_store = nullptr;  // never freed: outlives every communicator

std::unique_ptr<store::HttpStoreClient> connect_client(const std::string& host, uint16_t port,
                                                       const std::string& secret, std::chrono::milliseconds timeout) {
  store::ClientOptions co;
  co.host = host;
  co.port = port;
  co.secret = secret;
  co.connect_timeout = timeout;
  auto client = std::make_unique<store::HttpStoreClient>(co);
  client->connect();
  return client;
}

uint16_t parse_port(const std::string& name, const std::string& text) {
  auto v = env::parse_int(text);
  if (!v || *v < 1 || *v > 65535)
    throw InvalidArgument(fmt::format("{}='{}' is not a port number (1-65535)", name, text));
  return static_cast<uint16_t>(*v);
}

/// Rank 0's store server on `port` (0: ephemeral): on loopback when every
/// rank is on this host, else on HVD_MASTER_BIND (default all interfaces).
std::unique_ptr<store::HttpStoreServer> start_server(uint16_t port, const std::string& secret, bool all_local) {
  store::ServerOptions so;
  so.bind_address = all_local ? std::string("127.0.0.1") : env::get_or(job_env::kMasterBind, "0.0.0.0");
  so.port = port;
  so.secret = secret;
  auto server = std::make_unique<store::HttpStoreServer>(so);
  server->start();
  return server;
}

/// The source address this machine uses towards `host` (a UDP connect()
/// sends nothing), or "" when `host` is not a numeric IPv4 address or has
/// no route.
std::string source_address_towards(const std::string& host) {
  const net::Resolution to = net::resolve(host, 9, Deadline::never(), {SOCK_DGRAM, false, true, AF_INET});
  return net::source_address_towards(to.addresses);
}

/// Publishes this rank's place and fills in the topology from everyone's.
/// Ranks are grouped by host name plus the source address towards the
/// store, so machines (or network namespaces) that share a host name are
/// still told apart.
void exchange_topology(store::Store& store, WorldInfo& w, const std::string& store_host,
                       std::chrono::milliseconds timeout) {
  std::string node = w.hostname;
  if (std::string src = source_address_towards(store_host); !src.empty() && src.rfind("127.", 0) != 0) {
    node += "@" + src;
  }
  store.set_string(fmt::format("{}{}", kTopologyPrefix, w.rank), fmt::format("{}\n{}", node, w.local_rank));
  std::vector<std::string> keys;
  for (int r = 0; r < w.size; ++r) keys.push_back(fmt::format("{}{}", kTopologyPrefix, r));
  store.wait(keys, timeout);
  std::vector<RankPlace> places;
  for (const auto& key : keys) {
    std::string v = store.get_string(key, timeout);
    auto nl = v.find('\n');
    RankPlace p;
    p.hostname = v.substr(0, nl);
    auto lr = nl == std::string::npos ? std::nullopt : env::parse_int(v.substr(nl + 1));
    if (!lr) throw IoError(fmt::format("store key {}: malformed topology entry", key));
    p.local_rank = static_cast<int>(*lr);
    places.push_back(std::move(p));
  }
  Topology t = compute_cross_ranks(places).at(static_cast<std::size_t>(w.rank));
  w.local_rank = t.local_rank;
  w.local_size = t.local_size;
  w.cross_rank = t.cross_rank;
  w.cross_size = t.cross_size;
}

/// HVD_MASTER_* or the MPI plug-in: rank 0 starts the store, the others
/// learn where it is. Collective when the plug-in is used.
JobStore find_job_store(const WorldInfo& w) {
  JobStore js;
  if (env::get(job_env::kMasterAddr) || env::get(job_env::kMasterPort)) {
    auto addr_var = env::get(job_env::kMasterAddr);
    auto port_var = env::get(job_env::kMasterPort);
    if (!addr_var || addr_var->empty() || !port_var) {
      throw InvalidArgument("set both HVD_MASTER_ADDR and HVD_MASTER_PORT (rank 0's host and a free port), or neither");
    }
    js.port = parse_port(job_env::kMasterPort, *port_var);
    js.mode = job_env::kMasterAddr;
    js.host = *addr_var;
    js.secret = env::get_or(job_env::kSecret, "");
    if (js.secret.empty()) js.secret = env::get_or(job_env::kMasterSecret, "");
    if (js.secret.empty()) {
      std::string why;
      auto fn = load_plugin(w, why);
      if (fn == nullptr) {
        throw InvalidArgument(fmt::format(
            "HVD_MASTER_ADDR is set but no job secret: set HVD_MASTER_SECRET to the same random value on every rank "
            "(e.g. mpirun -x HVD_MASTER_SECRET=$(openssl rand -hex 32)); the MPI bootstrap plug-in that could "
            "distribute one is not available ({})",
            why));
      }
      js.secret = broadcast(fn, w, w.rank == 0 ? random_secret() : std::string());
    }
    if (w.rank == 0) {
      try {
        js.server = start_server(js.port, js.secret, false);
      } catch (const Error& e) {
        throw IoError(fmt::format("rank 0 cannot serve the store on HVD_MASTER_PORT={}: {}", js.port, e.what()));
      }
    }
    return js;
  }
  std::string why;
  auto fn = load_plugin(w, why);
  if (fn == nullptr) {
    throw InvalidArgument(fmt::format(
        "started by an MPI launcher ({}, size {}) without hvdrun: set HVD_MASTER_ADDR and HVD_MASTER_PORT, run "
        "under hvdrun --mpi, or install the MPI bootstrap plug-in {} ({})",
        w.source, w.size, kMpiBootstrapLibrary, why));
  }
  std::string payload;
  std::string rank0_error;
  if (w.rank == 0) {
    try {
      js.secret = random_secret();
      js.server = start_server(0, js.secret, w.local_size == w.size && env::get_or(job_env::kGlooIface, "").empty());
      payload = fmt::format("{} {} {}", advertised_address(w), js.server->port(), js.secret);
    } catch (const std::exception& e) {
      // The others are waiting in the broadcast: tell them why, then fail.
      rank0_error = e.what();
      payload = "error " + rank0_error;
    }
  }
  payload = broadcast(fn, w, payload);
  if (!rank0_error.empty()) throw IoError(fmt::format("rank 0 cannot serve the store: {}", rank0_error));
  if (payload.rfind("error ", 0) == 0)
    throw IoError(fmt::format("rank 0 could not start the store: {}", payload.substr(6)));
  std::istringstream in(payload);
  std::string port_text;
  in >> js.host >> port_text >> js.secret;
  if (js.host.empty() || js.secret.empty()) throw IoError("MPI bootstrap: malformed broadcast from rank 0");
  js.port = parse_port("broadcast port", port_text);
  js.mode = "MPI";
  return js;
}

}  // namespace

std::optional<WorldInfo> detect_mpi_world(const EnvLookup& lookup) {
  static const Family kOpenMpi{job_env::kOmpiRank, job_env::kOmpiSize, job_env::kOmpiLocalRank, job_env::kOmpiLocalSize,
                               "OMPI_COMM_WORLD_* (Open MPI)"};
  static const Family kPmi{job_env::kPmiRank, job_env::kPmiSize, job_env::kMpiLocalRankId, job_env::kMpiLocalNumRanks,
                           "PMI_* (MPICH/Intel MPI)"};
  static const Family kPmix{job_env::kPmixRank, job_env::kPmixSize, nullptr, nullptr, "PMIX_RANK (PMIx)"};
  std::optional<WorldInfo> w = read_family(lookup, kOpenMpi, kOpenMpi.size);
  if (!w) w = read_family(lookup, kPmi, kPmi.size);
  if (!w && lookup(job_env::kPmixRank)) {
    // PMIx publishes no size variable of its own; take the launcher's.
    const char* size_var = nullptr;
    for (const char* v : {job_env::kPmixSize, job_env::kSlurmNtasks}) {
      if (size_var == nullptr && lookup(v)) size_var = v;
    }
    if (size_var == nullptr) {
      throw InvalidArgument("PMIX_RANK is set but no job size is (PMIX_SIZE, SLURM_NTASKS or OMPI_COMM_WORLD_SIZE)");
    }
    w = read_family(lookup, kPmix, size_var);
  }
  if (w) w->hostname = lookup(job_env::kHostname).value_or(net::local_hostname());
  return w;
}

std::optional<WorldInfo> detect_mpi_world() {
  return detect_mpi_world([](const std::string& name) { return env::get(name); });
}

std::vector<Topology> compute_cross_ranks(const std::vector<RankPlace>& places) {
  // Hosts in order of their lowest rank; ranks of each host in rank order.
  std::vector<std::string> host_order;
  std::map<std::string, std::vector<int>> ranks_of;
  for (int r = 0; r < static_cast<int>(places.size()); ++r) {
    const auto& h = places[static_cast<std::size_t>(r)].hostname;
    if (ranks_of.find(h) == ranks_of.end()) host_order.push_back(h);
    ranks_of[h].push_back(r);
  }
  std::vector<Topology> out(places.size());
  for (const auto& host : host_order) {
    const auto& ranks = ranks_of[host];
    const int local_size = static_cast<int>(ranks.size());
    std::vector<bool> taken(ranks.size(), false);
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      int given = places[static_cast<std::size_t>(ranks[i])].local_rank;
      int lr = given < 0 ? static_cast<int>(i) : given;
      if (given >= 0 && given >= local_size) {
        throw InvalidArgument(fmt::format("rank {} on {} claims local rank {} but the host has only {} rank(s)",
                                          ranks[i], host, given, local_size));
      }
      if (taken[static_cast<std::size_t>(lr)]) {
        throw InvalidArgument(fmt::format("two ranks on {} have local rank {}", host, lr));
      }
      taken[static_cast<std::size_t>(lr)] = true;
      out[static_cast<std::size_t>(ranks[i])].local_rank = lr;
      out[static_cast<std::size_t>(ranks[i])].local_size = local_size;
    }
  }
  // cross_rank: index of the host among hosts that have this local rank.
  std::map<int, int> hosts_with_local_rank;
  for (const auto& host : host_order) {
    for (int r : ranks_of[host]) {
      auto& t = out[static_cast<std::size_t>(r)];
      t.cross_rank = hosts_with_local_rank[t.local_rank]++;
    }
  }
  for (auto& t : out) t.cross_size = hosts_with_local_rank[t.local_rank];
  return out;
}

std::optional<BootstrapResult> bootstrap_from_mpi_env(std::chrono::milliseconds timeout) {
  auto world = detect_mpi_world();
  if (!world) return std::nullopt;
  BootstrapResult result;
  result.world = *world;
  WorldInfo& w = result.world;
  if (w.size == 1) {
    w.local_rank = w.cross_rank = 0;
    w.local_size = w.cross_size = 1;
    result.mode = "single";
    return result;
  }

  if (auto addr = env::get(job_env::kRendezvousAddr); addr && !addr->empty()) {
    // hvdrun --mpi: hvdrun runs the store.
    result.mode = "hvdrun";
    result.secret = env::get_or(job_env::kSecret, "");
    result.store_host = *addr;
    result.store = store::make_store_from_env(timeout);
  } else {
    std::lock_guard<std::mutex> lock(g_job_store_mu);
    if (g_job_store == nullptr) g_job_store = new JobStore(find_job_store(w));
    const JobStore& js = *g_job_store;
    result.mode = js.mode;
    result.store_host = js.host;
    result.secret = js.secret;
    // Rank 0 serves on all interfaces (or HVD_MASTER_BIND) and talks to
    // itself over loopback.
    result.store = connect_client(js.server ? std::string("127.0.0.1") : js.host, js.port, js.secret, timeout);
  }
  exchange_topology(*result.store, w, result.store_host, timeout);
  spdlog::debug("MPI bootstrap ({}): rank {}/{} local {}/{} cross {}/{} on {}", result.mode, w.rank, w.size,
                w.local_rank, w.local_size, w.cross_rank, w.cross_size, w.hostname);
  return result;
}

}  // namespace hvd::collective
