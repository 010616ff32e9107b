// Init from the environment hvdrun sets, and the process-wide C++ API (hvd.h).
#include "hvd/collective/context.h"
#include "hvd/collective/elastic.h"
#include "hvd/collective/elastic_member.h"
#include "hvd/collective/hvd.h"
#include "hvd/collective/mpi_env.h"

#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/logging.h"
#include "hvd/common/net.h"
#include "hvd/common/secret.h"
#include "hvd/store/http_store.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <mutex>

namespace hvd::collective {

namespace {

constexpr std::array<const char*, 6> kTopologyVars = {"HOROVOD_RANK",       "HOROVOD_SIZE",
                                                      "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
                                                      "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE"};

std::string local_hostname() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
}

/// IPv4 address of a network interface, for HOROVOD_GLOO_IFACE.
std::string interface_address(const std::string& iface) {
  std::vector<net::InterfaceAddress> all;
  try {
    all = net::interface_addresses();
  } catch (const IoError& e) {
    throw IoError(fmt::format("{} while resolving HOROVOD_GLOO_IFACE", e.what()));
  }
  for (const auto& a : all) {
    if (!a.ipv6 && a.interface == iface) return a.address;
  }
  throw InvalidArgument(fmt::format("HOROVOD_GLOO_IFACE='{}': no such interface with an IPv4 address", iface));
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
    s.size = int_var("HOROVOD_SIZE", 1, 1, kMaxRanks);
    s.rank = int_var("HOROVOD_RANK", 0, 0, s.size - 1);
    s.local_size = int_var("HOROVOD_LOCAL_SIZE", 1, 1, s.size);
    s.local_rank = int_var("HOROVOD_LOCAL_RANK", 0, 0, s.local_size - 1);
    s.cross_size = int_var("HOROVOD_CROSS_SIZE", 1, 1, s.size);
    s.cross_rank = int_var("HOROVOD_CROSS_RANK", 0, 0, s.cross_size - 1);
  }
  s.hostname = env::get_or("HOROVOD_HOSTNAME", local_hostname());

  double cycle_ms = env::get_double_or("HOROVOD_CYCLE_TIME", 1.0);
  if (!std::isfinite(cycle_ms) || cycle_ms < 0 || cycle_ms > 60000) {
    throw InvalidArgument(fmt::format("HOROVOD_CYCLE_TIME={} must be milliseconds in [0, 60000]", cycle_ms));
  }
  s.cycle_time = std::chrono::microseconds(static_cast<int64_t>(std::llround(cycle_ms * 1000.0)));
  int64_t fusion = env::get_int_or("HOROVOD_FUSION_THRESHOLD", int64_t(64) << 20);
  if (fusion < 0) throw InvalidArgument(fmt::format("HOROVOD_FUSION_THRESHOLD={} must be >= 0 bytes", fusion));
  s.fusion_threshold = static_cast<std::size_t>(fusion);
  int64_t cache = env::get_int_or("HOROVOD_CACHE_CAPACITY", 1024);
  if (cache < 0 || cache > (1 << 20)) {
    throw InvalidArgument(fmt::format("HOROVOD_CACHE_CAPACITY={} must be in [0, 1048576]", cache));
  }
  s.cache_capacity = static_cast<std::size_t>(cache);
  s.stall_check = !env::get_bool_or("HOROVOD_STALL_CHECK_DISABLE", false);
  s.stall_warn_after = to_ms(seconds_var("HOROVOD_STALL_CHECK_TIME_SECONDS", 60));
  s.stall_fail_after = to_ms(seconds_var("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", 0));
  s.start_timeout = to_ms(seconds_var("HOROVOD_START_TIMEOUT", 30));
  if (s.start_timeout.count() == 0) s.start_timeout = std::chrono::milliseconds(1);

  s.secret = env::get_or(kSecretEnv, "");
  if (auto iface = env::get("HOROVOD_GLOO_IFACE"); iface && !iface->empty()) s.bind_address = interface_address(*iface);
  s.route_hint = env::get_or("HOROVOD_GLOO_RENDEZVOUS_ADDR", "");
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
  if (!env::get("HOROVOD_GLOO_RENDEZVOUS_ADDR")) {
    throw InvalidArgument(fmt::format(
        "HOROVOD_SIZE={} but HOROVOD_GLOO_RENDEZVOUS_ADDR is not set: start the job with hvdrun", s.size));
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

namespace hvd {

namespace {
std::mutex g_mu;
std::shared_ptr<collective::Context> g_context;
int g_generation = 0;
/// Set in an elastic job (HOROVOD_ELASTIC=1): owns g_context's world.
std::shared_ptr<elastic::ElasticMember> g_member;

/// Runs at exit for programs that never call shutdown(). Registered after
/// the logger exists, so it runs before the logger is destroyed (a static
/// Context's destructor would run after it).
void shutdown_at_exit() {
  try {
    hvd::shutdown();
  } catch (...) {
  }
}

std::shared_ptr<collective::Context> current() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (!g_context) throw collective::NotInitializedError("hvd: not initialised; call hvd::init() first");
  return g_context;
}
}  // namespace

void init() {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_context) return;
  auto level = parse_log_level(env::get_or("HOROVOD_LOG_LEVEL", "warning"));
  auto rank = env::get("HOROVOD_RANK");
  init_logging(fmt::format("hvd[{}]", rank ? *rank : "0"), level);
  if (elastic::enabled()) {
    // Elastic job: rank and size come from the world hvdrun publishes, and
    // the member's generations are the world versions.
    elastic::MemberOptions options = elastic::member_options_from_env();
    init_logging(fmt::format("hvd[{}]", options.worker_id), level);
    auto member = std::make_shared<elastic::ElasticMember>(std::move(options));
    member->join();
    g_context = member->shared_context();
    g_member = std::move(member);
    init_logging(fmt::format("hvd[{}]", g_context->rank()), level);
  } else {
    // Every init after a shutdown forms a new communicator generation, so a
    // re-init never reads the previous generation's addresses.
    g_context = collective::context_from_env(fmt::format("gen{}/", g_generation));
    ++g_generation;
    if (!rank) init_logging(fmt::format("hvd[{}]", g_context->rank()), level);  // rank learned from MPI
  }
  static bool at_exit_registered = false;
  if (!at_exit_registered) {
    std::atexit(shutdown_at_exit);
    at_exit_registered = true;
  }
}

void shutdown() {
  std::shared_ptr<collective::Context> ctx;
  std::shared_ptr<elastic::ElasticMember> member;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    ctx = std::move(g_context);
    g_context.reset();
    member = std::move(g_member);
    g_member.reset();
  }
  if (member) member->close();
  if (ctx) ctx->shutdown();
}

bool is_initialized() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_context != nullptr;
}

int rank() { return current()->rank(); }
int size() { return current()->size(); }
int local_rank() { return current()->local_rank(); }
int local_size() { return current()->local_size(); }
int cross_rank() { return current()->cross_rank(); }
int cross_size() { return current()->cross_size(); }

collective::Context& context() { return *current(); }

collective::Handle allreduce_async(const collective::AllreduceArgs& a) { return current()->allreduce_async(a); }
collective::Handle allgather_async(const collective::AllgatherArgs& a) { return current()->allgather_async(a); }
collective::Handle broadcast_async(const collective::BroadcastArgs& a) { return current()->broadcast_async(a); }
collective::Handle alltoall_async(const collective::AlltoallArgs& a) { return current()->alltoall_async(a); }
collective::Handle reducescatter_async(const collective::ReducescatterArgs& a) {
  return current()->reducescatter_async(a);
}
collective::Handle barrier_async(const collective::BarrierArgs& a) { return current()->barrier_async(a); }

void allreduce(const collective::AllreduceArgs& a) { allreduce_async(a).wait(); }
collective::Handle allgather(const collective::AllgatherArgs& a) {
  auto h = allgather_async(a);
  h.wait();
  return h;
}
void broadcast(const collective::BroadcastArgs& a) { broadcast_async(a).wait(); }
collective::Handle alltoall(const collective::AlltoallArgs& a) {
  auto h = alltoall_async(a);
  h.wait();
  return h;
}
collective::Handle reducescatter(const collective::ReducescatterArgs& a) {
  auto h = reducescatter_async(a);
  h.wait();
  return h;
}
void barrier(const collective::BarrierArgs& a) { barrier_async(a).wait(); }
int join() { return current()->join(); }
collective::Handle join_async() { return current()->join_async(); }

}  // namespace hvd

namespace hvd::elastic {

namespace {

std::shared_ptr<ElasticMember> process_member() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_member;
}

/// The process-wide Membership: hvd::init()'s Context and member.
class ProcessMembership final : public Membership {
 public:
  collective::Context& context() override { return hvd::context(); }
  bool elastic() const override { return process_member() != nullptr; }
  bool hosts_updated() const override { return elastic::hosts_updated(); }
  void reset() override { elastic::reset(); }
};

}  // namespace

Membership& process_membership() {
  static ProcessMembership membership;
  return membership;
}

uint64_t world_version() {
  auto m = process_member();
  return m ? m->version() : 0;
}

bool hosts_updated() {
  auto m = process_member();
  return m && m->hosts_updated();
}

void reset() {
  auto m = process_member();
  if (!m) {
    throw InvalidArgument(
        "hvd::elastic::reset: not an elastic job (HOROVOD_ELASTIC=1 unset) or hvd::init() was not called");
  }
  m->reset();
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_member != m) return;  // shut down meanwhile
  g_context = m->shared_context();
  init_logging(fmt::format("hvd[{}]", g_context->rank()),
               parse_log_level(env::get_or("HOROVOD_LOG_LEVEL", "warning")));
}

}  // namespace hvd::elastic
