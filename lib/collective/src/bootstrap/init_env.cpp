// Settings and a Context from the environment hvdrun sets (init_env.h), and
// whether this is an elastic job. The process-wide API is in hvd.cpp.
#include "hvd/collective/init_env.h"

#include "hvd/collective/elastic.h"
#include "hvd/collective/mpi_env.h"

#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/horovod_switches.h"
#include "hvd/common/job_env.h"
#include "hvd/common/logging.h"
#include "hvd/common/net.h"
#include "hvd/common/secret.h"
#include "hvd/store/http_store.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
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

/// HOROVOD_THREAD_AFFINITY: "3" or "2,3" -- core ids, one per local rank.
std::vector<int> core_ids(const std::string& text) {
  std::vector<int> cores;
  if (text.find_first_not_of(" ") == std::string::npos) return cores;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(start, comma - start);
    auto v = env::parse_int(item);
    if (!v || *v < 0 || *v > 1000000) {
      throw InvalidArgument(fmt::format("{}='{}': '{}' is not a core id (expected core ids, one per local rank: 0,1)",
                                        job_env::kThreadAffinity, text, item));
    }
    cores.push_back(static_cast<int>(*v));
    start = comma + 1;
  }
  return cores;
}

/// Horovod's switches: strtol(value) > 0, read as hvdrun reads them.
bool switched_on(const char* name) { return horovod_switches::switched_on(env::get(name)); }

std::string join_ints(const std::vector<int>& values) {
  std::string out;
  for (int v : values) out += (out.empty() ? "" : ",") + std::to_string(v);
  return out;
}

std::string seconds_text(std::chrono::milliseconds ms) {
  return ms.count() % 1000 == 0 ? fmt::format("{} s", ms.count() / 1000) : fmt::format("{} ms", ms.count());
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
  // Horovod's Gloo rendezvous timeout means what start_timeout means here.
  if (env::get(job_env::kGlooTimeoutSeconds)) s.start_timeout = to_ms(seconds_var(job_env::kGlooTimeoutSeconds, 30));
  if (s.start_timeout.count() == 0) s.start_timeout = std::chrono::milliseconds(1);
  s.thread_affinity = core_ids(env::get_or(job_env::kThreadAffinity, ""));
  s.dynamic_process_sets = switched_on(kDynamicProcessSetsVar);
  // Horovod's HOROVOD_TIMELINE=DYNAMIC: no file at init, start_timeline later
  // (which this library allows without it too).
  s.timeline_path = env::get_or(job_env::kTimeline, "");
  if (s.timeline_path == kTimelineDynamic) s.timeline_path.clear();
  s.timeline_mark_cycles = switched_on(job_env::kTimelineMarkCycles);
  s.hierarchical_allreduce = switched_on(job_env::kHierarchicalAllreduce);
  s.hierarchical_allgather = switched_on(job_env::kHierarchicalAllgather);
  s.autotune = switched_on(job_env::kAutotune);
  if (s.autotune) {
    s.autotune_log = env::get_or(job_env::kAutotuneLog, "");
    auto count = [](const char* var, int64_t def, int64_t min) {
      const int64_t v = env::get_int_or(var, def);
      if (v < min || v > 1000000) throw InvalidArgument(fmt::format("{}={} must be in [{}, 1000000]", var, v, min));
      return static_cast<int>(v);
    };
    s.autotune_warmup_samples = count(job_env::kAutotuneWarmupSamples, 3, 0);
    s.autotune_steps_per_sample = count(job_env::kAutotuneStepsPerSample, 10, 1);
    s.autotune_max_samples = count(job_env::kAutotuneBayesOptMaxSamples, 20, 1);
  }

  s.secret = env::get_or(job_env::kSecret, "");
  if (auto iface = env::get(job_env::kGlooIface); iface && !iface->empty()) s.bind_address = interface_address(*iface);
  s.route_hint = env::get_or(job_env::kRendezvousAddr, "");
  return s;
}

LogSettings log_settings_from_env() {
  LogSettings l;
  l.verbose = env::get_bool_or(job_env::kVerbose, false);
  const auto level = env::get(job_env::kLogLevel);
  l.level = level ? parse_log_level(*level) : l.verbose ? spdlog::level::info : spdlog::level::warn;
  l.hide_time = env::get_bool_or(job_env::kLogHideTime, false);
  return l;
}

std::string describe_settings(const Settings& s, const LogSettings& log) {
  std::vector<std::string> items;
  items.push_back(fmt::format("fusion_threshold={} bytes", s.fusion_threshold));
  items.push_back(fmt::format("cycle_time={} ms", s.cycle_time.count() / 1000.0));
  items.push_back(fmt::format("cache_capacity={}", s.cache_capacity));
  items.push_back(
      s.stall_check
          ? fmt::format("stall_check=on (warn after {}, fail {})", seconds_text(s.stall_warn_after),
                        s.stall_fail_after.count() ? "after " + seconds_text(s.stall_fail_after) : std::string("never"))
          : std::string("stall_check=off"));
  items.push_back(fmt::format("rendezvous_timeout={} ({})", seconds_text(s.start_timeout),
                              env::get(job_env::kGlooTimeoutSeconds) ? job_env::kGlooTimeoutSeconds
                              : env::get(job_env::kStartTimeout)     ? job_env::kStartTimeout
                                                                     : "default"));
  if (s.thread_affinity.empty()) {
    items.push_back("thread_affinity=none");
  } else if (static_cast<int>(s.thread_affinity.size()) < s.local_size) {
    items.push_back(fmt::format("thread_affinity=none ({}={} lists fewer cores than the {} local ranks)",
                                job_env::kThreadAffinity, join_ints(s.thread_affinity), s.local_size));
  } else {
    items.push_back(fmt::format("thread_affinity={} (this rank: core {})", join_ints(s.thread_affinity),
                                s.thread_affinity[s.local_rank]));
  }
  items.push_back(fmt::format("log_timestamps={}", log.hide_time ? "off" : "on"));
  items.push_back(fmt::format("process_sets={} static{}", s.process_sets.size(),
                              s.dynamic_process_sets ? ", dynamic (HOROVOD_DYNAMIC_PROCESS_SETS=1)" : ""));
  // Requests the library cannot honour yet (hvdrun warns about each once).
  auto requested = [&](const char* key, const char* variable, bool on, const char* why) {
    if (!on) {
      items.push_back(fmt::format("{}=off", key));
    } else {
      items.push_back(fmt::format("{}=off ({}={} ignored: {})", key, variable, env::get_or(variable, ""), why));
    }
  };
  items.push_back(fmt::format("hierarchical_allreduce={}", s.hierarchical_allreduce ? "on" : "off"));
  items.push_back(fmt::format("hierarchical_allgather={}", s.hierarchical_allgather ? "on" : "off"));
  requested("torus_allreduce", job_env::kTorusAllreduce, switched_on(job_env::kTorusAllreduce), "not implemented");
  if (s.autotune) {
    items.push_back(fmt::format("autotune=on (warmup {} samples of {} steps, at most {} samples, log {})",
                                s.autotune_warmup_samples, s.autotune_steps_per_sample, s.autotune_max_samples,
                                s.autotune_log.empty() ? "none" : s.autotune_log));
  } else {
    items.push_back("autotune=off");
  }
  if (s.timeline_path.empty()) {
    items.push_back(env::get_or(job_env::kTimeline, "") == kTimelineDynamic
                        ? "timeline=off (HOROVOD_TIMELINE=DYNAMIC: until start_timeline)"
                        : "timeline=off");
  } else {
    items.push_back(fmt::format("timeline={} (rank 0 writes it{})", s.timeline_path,
                                s.timeline_mark_cycles ? ", cycle marks" : ""));
  }
  const std::string streams = env::get_or(job_env::kNumNcclStreams, "");
  items.push_back(streams.empty() || streams == "1"
                      ? std::string("nccl_streams=1")
                      : fmt::format("nccl_streams=1 ({}={} ignored: one stream)", job_env::kNumNcclStreams, streams));
  std::string out = "settings:";
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", " : " ") + items[i];
  return out;
}

std::vector<std::string> ignored_settings_warnings() {
  std::vector<std::string> out;
  auto ignored = [&](const char* variable, bool on, const std::string& what) {
    if (on) out.push_back(fmt::format("{}={} is ignored: {} (issue 20)", variable, env::get_or(variable, ""), what));
  };
  ignored(job_env::kTorusAllreduce, switched_on(job_env::kTorusAllreduce), "the library has no torus allreduce yet");
  ignored(job_env::kAutotuneGaussianProcessNoise,
          switched_on(job_env::kAutotune) && !env::get_or(job_env::kAutotuneGaussianProcessNoise, "").empty(),
          "autotune searches a grid of settings, not by Bayesian optimisation: there is no Gaussian process");
  for (const auto& u : horovod_switches::unhonoured([](const char* name) { return env::get(name); })) {
    out.push_back(fmt::format("{}={} is ignored: {}", u.variable, u.value, u.why));
  }
  return out;
}

std::unique_ptr<Context> context_from_env(const std::string& comm_prefix,
                                          const std::vector<std::vector<int>>& process_sets) {
  Settings s = settings_from_env();
  s.comm_prefix = comm_prefix;
  s.process_sets = process_sets;
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
  // --start-timeout bounds the whole init: the store connection and then the
  // mesh get one deadline between them, not one each.
  const auto deadline = std::chrono::steady_clock::now() + s.start_timeout;
  std::shared_ptr<store::Store> store;
  try {
    store = store::make_store_from_env(s.start_timeout);
  } catch (const IoError& e) {
    throw IoError(fmt::format("hvd init: rank {}: rendezvous store unreachable within {} s (HOROVOD_START_TIMEOUT): {}",
                              s.rank, s.start_timeout.count() / 1000.0, e.what()));
  }
  s.init_deadline = deadline;
  return Context::create(s, std::move(store));
}

}  // namespace hvd::collective

namespace hvd::elastic {

bool enabled() { return env::get_bool_or(job_env::kElastic, false); }

}  // namespace hvd::elastic
