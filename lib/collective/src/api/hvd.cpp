// The process-wide C++ API (hvd.h) and the process's elastic membership
// (the free functions of elastic.h): one Context, or one ElasticMember in an
// elastic job, behind a mutex. Reading the environment is init_env.cpp's.
#include "hvd/collective/hvd.h"

#include "hvd/collective/context.h"
#include "hvd/collective/elastic.h"
#include "hvd/collective/elastic_member.h"
#include "hvd/collective/init_env.h"

#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/job_env.h"
#include "hvd/common/logging.h"

#include <fmt/format.h>

#include <cstdlib>
#include <mutex>

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

void init() { init(std::vector<std::vector<int>>{}); }

void init(const std::vector<std::vector<int>>& process_sets) {
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_context) return;
  const collective::LogSettings log = collective::log_settings_from_env();
  auto start_logging = [&log](const std::string& who) {
    init_logging(fmt::format("hvd[{}]", who), log.level, !log.hide_time);
  };
  auto rank = env::get(job_env::kRank);
  start_logging(rank ? *rank : "0");
  if (elastic::enabled()) {
    // Elastic job: rank and size come from the world hvdrun publishes, and
    // the member's generations are the world versions.
    elastic::MemberOptions options = elastic::member_options_from_env();
    // Every world registers the static sets again; one that names a rank
    // the world lacks waits for a world that has it.
    options.settings.process_sets = process_sets;
    options.settings.skip_unfit_process_sets = true;
    start_logging(options.worker_id);
    auto member = std::make_shared<elastic::ElasticMember>(std::move(options));
    member->join();
    g_context = member->shared_context();
    g_member = std::move(member);
    start_logging(std::to_string(g_context->rank()));
  } else {
    // Every init after a shutdown forms a new communicator generation, so a
    // re-init never reads the previous generation's addresses.
    // Counted before: a failed init (a bad static process set fails every
    // rank after the mesh formed) must not leave its addresses to the next.
    const int generation = g_generation++;
    g_context = collective::context_from_env(fmt::format("gen{}/", generation), process_sets);
    if (!rank) start_logging(std::to_string(g_context->rank()));  // rank learned from MPI
  }
  if (g_context->rank() == 0) {
    // What took effect, once per init (hvdrun --verbose shows it).
    spdlog::log(log.verbose ? spdlog::level::info : spdlog::level::debug, "{}",
                collective::describe_settings(g_context->settings(), log));
    // Set but not honoured: one line each (nothing is silently ignored). A
    // job hvdrun started (its secret is in the environment) has had these
    // lines from hvdrun already, once for the job: then only with --verbose.
    const bool reported_by_hvdrun = env::get(job_env::kSecret).has_value();
    for (const auto& line : collective::ignored_settings_warnings()) {
      spdlog::log(reported_by_hvdrun ? (log.verbose ? spdlog::level::info : spdlog::level::debug) : spdlog::level::warn,
                  "{}", line);
    }
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

int32_t add_process_set(const std::vector<int>& ranks) { return current()->add_process_set(ranks); }
void remove_process_set(int32_t id) { current()->remove_process_set(id); }

void start_timeline(const std::string& path, bool mark_cycles) { current()->start_timeline(path, mark_cycles); }
void stop_timeline() { current()->stop_timeline(); }

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
  void synced() override {
    if (auto m = process_member()) m->synced();
  }
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

void state_synced() {
  if (auto m = process_member()) m->synced();
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
  const collective::LogSettings log = collective::log_settings_from_env();
  init_logging(fmt::format("hvd[{}]", g_context->rank()), log.level, !log.hide_time);
}

}  // namespace hvd::elastic
