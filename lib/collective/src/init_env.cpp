// Settings and a Context from the environment hvdrun sets (init_env.h), and
// whether this is an elastic job. The process-wide API is in hvd.cpp.
#include "hvd/collective/init_env.h"

#include "hvd/collective/elastic.h"
#include "hvd/collective/mpi_env.h"

#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/job_env.h"
#include "hvd/common/logging.h"
#include "hvd/common/net.h"
#include "hvd/common/secret.h"
#include "hvd/store/http_store.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace hvd::collective {

namespace {

constexpr std::array<const char*, 6> kTopologyVars = {job_env::kRank,      job_env::kSize,      job_env::kLocalRank,
                                                      job_env::kLocalSize, job_env::kCrossRank, job_env::kCrossSize};

/// IPv4 address of a network interface, for HOROVOD_GLOO_IFACE.
std::string interface_address(const std::string& iface) {
  std::vector<net::InterfaceAddress> all;
  try {
    all = net::interface_addresses();
  } catch (const IoError& e) {
    throw IoError(fmt::format("{} while resolving {}", e.what(), job_env::kGlooIface));
  }
  for (const auto& a : all) {
    if (!a.ipv6 && a.interface == iface) return a.address;
  }
  throw InvalidArgument(fmt::format("{}='{}': no such interface with an IPv4 address", job_env::kGlooIface, iface));
}

int int_var(const char* name, int64_t fallback, int64_t min, int64_t max) {
  int64_t v = env::get_int_or(name, fallback);
  if (v < min || v > max) {
    throw InvalidArgument(fmt::format("{}={} is out of range [{}, {}]", name, v, min, max));
  }
  return static_cast<int>(v);
}

double seconds_var(const char* name, double fallback) {
  double v = env::get_double_or(name, fallback);
  if (!std::isfinite(v) || v < 0) throw InvalidArgument(fmt::format("{}={} must be a non-negative number", name, v));
  return v;
}

std::chrono::milliseconds to_ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
}

}  // namespace

Settings settings_from_env() {
  Settings s;
  int present = 0;
  std::string missing, found;
  for (const char* v : kTopologyVars) {
    if (env::get(v)) {
      ++present;
      if (found.empty()) found = v;
    } else if (missing.empty()) {
      missing = v;
    }
  }
  if (present != 0 && present != static_cast<int>(kTopologyVars.size())) {
    throw InvalidArgument(fmt::format(
        "{} is set but {} is not: run under hvdrun, or set all of HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK, "
        "HOROVOD_LOCAL_SIZE, HOROVOD_CROSS_RANK, HOROVOD_CROSS_SIZE (or none for a job of size 1)",
        found, missing));
  }
  if (present != 0) {
    constexpr int64_t kMaxRanks = 1 << 20;
    s.size = int_var(job_env::kSize, 1, 1, kMaxRanks);
    s.rank = int_var(job_env::kRank, 0, 0, s.size - 1);
    s.local_size = int_var(job_env::kLocalSize, 1, 1, s.size);
    s.local_rank = int_var(job_env::kLocalRank, 0, 0, s.local_size - 1);
    s.cross_size = int_var(job_env::kCrossSize, 1, 1, s.size);
    s.cross_rank = int_var(job_env::kCrossRank, 0, 0, s.cross_size - 1);
  }
  s.hostname = env::get_or(job_env::kHostname, net::local_hostname());

  double cycle_ms = env::get_double_or(job_env::kCycleTime, 1.0);
  if (!std::isfinite(cycle_ms) || cycle_ms < 0 || cycle_ms > 60000) {
    throw InvalidArgument(fmt::format("{}={} must be milliseconds in [0, 60000]", job_env::kCycleTime, cycle_ms));
  }
  s.cycle_time = std::chrono::microseconds(static_cast<int64_t>(std::llround(cycle_ms * 1000.0)));
  int64_t fusion = env::get_int_or(job_env::kFusionThreshold, int64_t(64) << 20);
  if (fusion < 0) throw InvalidArgument(fmt::format("{}={} must be >= 0 bytes", job_env::kFusionThreshold, fusion));
  s.fusion_threshold = static_cast<std::size_t>(fusion);
  int64_t cache = env::get_int_or(job_env::kCacheCapacity, 1024);
  if (cache < 0 || cache > (1 << 20)) {
    throw InvalidArgument(fmt::format("{}={} must be in [0, 1048576]", job_env::kCacheCapacity, cache));
  }
  s.cache_capacity = static_cast<std::size_t>(cache);
  s.stall_check = !env::get_bool_or(job_env::kStallCheckDisable, false);
  s.stall_warn_after = to_ms(seconds_var(job_env::kStallCheckTimeSeconds, 60));
  s.stall_fail_after = to_ms(seconds_var(job_env::kStallShutdownTimeSeconds, 0));
  s.start_timeout = to_ms(seconds_var(job_env::kStartTimeout, 30));
  if (s.start_timeout.count() == 0) s.start_timeout = std::chrono::milliseconds(1);

  s.secret = env::get_or(job_env::kSecret, "");
  if (auto iface = env::get(job_env::kGlooIface); iface && !iface->empty()) s.bind_address = interface_address(*iface);
  s.route_hint = env::get_or(job_env::kRendezvousAddr, "");
  return s;
}

std::unique_ptr<Context> context_from_env(const std::string& comm_prefix) {
  Settings s = settings_from_env();
  s.comm_prefix = comm_prefix;
  const bool topology_in_env =
      std::any_of(kTopologyVars.begin(), kTopologyVars.end(), [](const char* v) { return env::get(v).has_value(); });
  if (!topology_in_env) {
    // Started by an MPI launcher rather than hvdrun (docs/mpi.md)? Else this
    // is a plain process: a job of size 1.
    if (auto boot = bootstrap_from_mpi_env(s.start_timeout)) {
      const WorldInfo& w = boot->world;
      s.rank = w.rank;
      s.size = w.size;
      s.local_rank = w.local_rank;
      s.local_size = w.local_size;
      s.cross_rank = w.cross_rank;
      s.cross_size = w.cross_size;
      if (!w.hostname.empty()) s.hostname = w.hostname;
      if (!boot->secret.empty()) s.secret = boot->secret;
      if (!boot->store_host.empty()) s.route_hint = boot->store_host;
      if (s.size == 1) return Context::create(s, nullptr);
      return Context::create(s, std::shared_ptr<store::Store>(std::move(boot->store)));
    }
  }
  if (s.size == 1) return Context::create(s, nullptr);
  if (!env::get(job_env::kRendezvousAddr)) {
    throw InvalidArgument(
        fmt::format("HOROVOD_SIZE={} but HOROVOD_GLOO_RENDEZVOUS_ADDR is not set: start the job with hvdrun", s.size));
  }
  std::shared_ptr<store::Store> store;
  try {
    store = store::make_store_from_env(s.start_timeout);
  } catch (const IoError& e) {
    throw IoError(fmt::format("hvd init: rank {}: rendezvous store unreachable within {} s (HOROVOD_START_TIMEOUT): {}",
                              s.rank, s.start_timeout.count() / 1000.0, e.what()));
  }
  return Context::create(s, std::move(store));
}

}  // namespace hvd::collective

namespace hvd::elastic {

bool enabled() { return env::get_bool_or(job_env::kElastic, false); }

}  // namespace hvd::elastic
