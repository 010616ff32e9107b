#include "hvd/collective/context.h"

#include "engine/autotune.h"
#include "engine/controller.h"
#include "device_executor.h"
#include "engine/fusion.h"
#include "engine/hierarchy.h"
#include "engine/message.h"
#include "engine/negotiation.h"
#include "engine/operations.h"
#include "engine/process_sets.h"
#include "engine/stall_inspector.h"
#include "engine/timeline.h"

#include "hvd/collective/algorithms.h"
#include "hvd/collective/cuda.h"
#include "hvd/collective/elastic.h"
#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/job_env.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

namespace hvd::collective {

using detail::OpState;
using detail::OpType;
using detail::Request;

namespace {

/// The communicator of a job of size 1: no links, nothing to wait for.
class LocalComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  transport::Link& link(int peer) override {
    throw InvalidArgument(fmt::format("a job of size 1 has no link to rank {}", peer));
  }
  void abort(const std::string&) override { aborted_ = true; }
  bool aborted() const override { return aborted_; }

 private:
  std::atomic<bool> aborted_{false};
};

enum class FailureKind { Io, Timeout, Other };

/// Where settings.thread_affinity puts this rank's background thread.
struct BackgroundCore {
  int core = -1;  ///< -1: not pinned
  std::string warning;  ///< why not, when the setting cannot apply
};

/// Throws InvalidArgument for a core this process may not run on, so a
/// typo fails every rank at once instead of pinning nothing.
BackgroundCore background_core(const Settings& s) {
  BackgroundCore out;
  if (s.thread_affinity.empty()) return out;
  std::string list;
  for (int c : s.thread_affinity) list += (list.empty() ? "" : ",") + std::to_string(c);
  if (static_cast<int>(s.thread_affinity.size()) < s.local_size) {
    out.warning = fmt::format(
        "{}={} lists {} core id(s) for {} local ranks; background threads are not pinned (give one core id per "
        "local rank, e.g. {}=0,1)",
        job_env::kThreadAffinity, list, s.thread_affinity.size(), s.local_size, job_env::kThreadAffinity);
    return out;
  }
  const int core = s.thread_affinity[static_cast<std::size_t>(s.local_rank)];
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) CPU_ZERO(&allowed);
  if (core >= CPU_SETSIZE || !CPU_ISSET(core, &allowed)) {
    std::string usable;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &allowed)) usable += (usable.empty() ? "" : ",") + std::to_string(c);
    }
    throw InvalidArgument(fmt::format("hvd: {}={}: core {} (local rank {}) is not one this process may run on ({})",
                                      job_env::kThreadAffinity, list, core, s.local_rank, usable));
  }
  out.core = core;
  return out;
}

}  // namespace

struct Context::Impl {
  Settings settings;
  std::shared_ptr<store::Store> store;
  std::unique_ptr<Comm> comm;
  detail::Controller controller;
  detail::StallInspector stall;
  detail::FusionBuffer fusion;
  /// Device-buffer operations (docs/cuda.md): created by the background
  /// thread at the first device response, released when that thread ends
  /// (shutdown, failure -- and so at every elastic re-formation, which
  /// builds a new Context).
  std::unique_ptr<cuda::detail::DeviceExecutor> device;
  /// Hierarchical host collectives (hierarchy.h); null unless requested.
  std::unique_ptr<detail::Hierarchy> hierarchy;
  /// What the executor runs with now: the settings, or autotune's choice.
  bool hier_allreduce = false;
  bool hier_allgather = false;
  std::chrono::microseconds cycle_time{1000};
  /// HOROVOD_AUTOTUNE (autotune.h); null when off or in a process set.
  std::unique_ptr<detail::Autotuner> autotuner;
  /// The process sets (process_sets.h); set by the Context's constructor.
  std::unique_ptr<detail::ProcessSetTable> psets;
  /// The timeline (timeline.h): recorded by rank 0 of the global set only.
  detail::Timeline timeline;
  /// Announcements seen this cycle (for cycle marks; background thread).
  std::size_t announced = 0;

  mutable std::mutex mu;
  std::condition_variable cv;
  /// Submitted since the last cycle began (not yet announced).
  std::vector<std::shared_ptr<OpState>> queue;
  /// Every unfinished operation by name (announced or not).
  std::unordered_map<std::string, std::shared_ptr<OpState>> pending;
  bool shutdown_requested = false;
  bool abort_requested = false;
  std::string abort_reason;
  enum class State { Running, Failed, Stopped } state = State::Running;
  /// The rank whose shutdown stopped this Context (-1 while running).
  int stopped_by = -1;
  FailureKind failure_kind = FailureKind::Io;
  std::string failure;
  std::array<uint64_t, 6> noname_counter{};
  ContextStats stats;
  std::thread thread;
  std::mutex join_mu;

  // Background-thread only.
  detail::Exchange wire;  // negotiation.h
  Clock::time_point last_stall_check;

  Impl(const Settings& s, std::unique_ptr<Comm> c, std::shared_ptr<store::Store> st)
      : settings(s),
        store(std::move(st)),
        comm(c ? std::move(c) : std::make_unique<LocalComm>()),
        controller(detail::ControllerOptions{s.rank, s.size, s.cache_capacity, s.fusion_threshold, cuda::cuda_built()}),
        stall(detail::StallOptions{s.stall_check, s.stall_warn_after, s.stall_fail_after}),
        fusion(s.fusion_threshold),
        hier_allreduce(s.hierarchical_allreduce),
        hier_allgather(s.hierarchical_allgather),
        cycle_time(s.cycle_time) {
    // Every survivor of a lost rank names the same one (docs/collective.md).
    if (store && s.size > 1) comm->set_failure_board(std::make_shared<FailureBoard>(store, s.comm_prefix));
    if (records_timeline()) {
      controller.on_announce = [this](const Request& q, int rank) {
        ++announced;
        timeline.negotiate_rank_ready(q.name, detail::timeline_op_name(q.type), rank);
      };
    }
    if (s.autotune && s.process_set_id == kGlobalProcessSet) {
      detail::AutotuneOptions o;
      o.rank = s.rank;
      o.warmup_samples = s.autotune_warmup_samples;
      o.steps_per_sample = s.autotune_steps_per_sample;
      o.max_samples = s.autotune_max_samples;
      o.tune_hierarchical = s.cross_size > 1;
      o.log_path = s.autotune_log;
      const detail::TuneParams initial{static_cast<double>(s.fusion_threshold) / (1024 * 1024),
                                       static_cast<double>(s.cycle_time.count()) / 1000.0, s.hierarchical_allreduce,
                                       s.hierarchical_allgather};
      autotuner = std::make_unique<detail::Autotuner>(o, initial);
      stats.autotune_active = autotuner->active();
    }
  }

  /// Only the coordinator writes the timeline (as Horovod), and only for
  /// the global process set.
  bool records_timeline() const { return settings.rank == 0 && settings.process_set_id == kGlobalProcessSet; }

  std::string tag() const {
    return settings.process_set_id == kGlobalProcessSet
               ? fmt::format("hvd[{}]", settings.rank)
               : fmt::format("hvd[set {}, rank {}]", settings.process_set_id, settings.rank);
  }

  [[noreturn]] void throw_failure() const {
    switch (failure_kind) {
      // A peer died or a link dropped: typed for elastic recovery (still an IoError).
      case FailureKind::Io: throw elastic::PeerFailureError(failure);
      case FailureKind::Timeout: throw TimeoutError(failure);
      case FailureKind::Other: throw Error(failure);
    }
    throw Error(failure);
  }
  std::exception_ptr failure_ptr() const {
    try {
      throw_failure();
    } catch (...) {
      return std::current_exception();
    }
  }

  Handle submit(std::shared_ptr<OpState> op) {
    if (op->request.device >= 0 && cuda::cuda_built()) {
      // Outside the lock (a CUDA call): what the caller queued so far.
      try {
        op->ready = cuda::detail::record_ready_event(op->request.device, op->stream);
      } catch (...) {
        op->submit_error = std::current_exception();
      }
    }
    std::unique_lock<std::mutex> lock(mu);
    Request& q = op->request;
    if (q.name.empty()) {
      q.name =
          fmt::format("{}.noname.{}", detail::op_type_name(q.type), noname_counter[static_cast<std::size_t>(q.type)]++);
    }
    if (state == State::Failed) throw_failure();
    if (state == State::Stopped && !shutdown_requested && left_world(stopped_by)) {
      throw elastic::PeerFailureError(fmt::format("hvd: {} of tensor '{}' submitted after rank {} shut down (left the world)",
                                                  detail::op_type_name(q.type), q.name, stopped_by));
    }
    if (state == State::Stopped || shutdown_requested) {
      throw ShutdownError(fmt::format("hvd: {} of tensor '{}' submitted after the job was shut down",
                                      detail::op_type_name(q.type), q.name));
    }
    detail::check_request(*op, settings.size);
    if (pending.count(q.name)) {
      throw InvalidArgument(
          fmt::format("hvd: tensor '{}' is already pending on rank {}; wait for it before submitting the name again",
                      q.name, settings.rank));
    }
    op->submitted = Clock::now();
    pending.emplace(q.name, op);
    queue.push_back(op);
    lock.unlock();
    cv.notify_all();
    return Handle(std::move(op));
  }

  // ---- background thread ---------------------------------------------------

  void run() {
    try {
      loop();
    } catch (const IoError& e) {
      fail(FailureKind::Io, e.what());
    } catch (const TimeoutError& e) {
      fail(FailureKind::Timeout, e.what());
    } catch (const std::exception& e) {
      fail(FailureKind::Other, e.what());
    } catch (...) {
      fail(FailureKind::Other, "unknown exception in the background thread");
    }
    release_device();
  }

  /// GroupComms of `comm` by member list (background thread only).
  std::map<std::vector<int>, std::unique_ptr<GroupComm>> groups;
  Comm& group_comm(const std::vector<int>& members) {
    auto& slot = groups[members];
    if (!slot) slot = std::make_unique<GroupComm>(*comm, members);
    return *slot;
  }

  cuda::detail::DeviceExecutor& device_executor() {
    if (!device) {
      cuda::detail::DeviceExecutorOptions o;
      o.job = {settings.rank,       settings.size,       settings.local_rank,
               settings.local_size, settings.cross_rank, settings.cross_size};
      o.comm_prefix = settings.comm_prefix;
      o.fusion_threshold = settings.fusion_threshold;
      o.timeout = settings.start_timeout;
      o.path = cuda::detail::parse_device_path_setting(env::get_or("HVD_CUDA_ALLREDUCE_PATH", "auto"));
      o.wait_timeout = std::chrono::seconds(env::get_int_or("HVD_CUDA_WAIT_TIMEOUT", 600));
      device = std::make_unique<cuda::detail::DeviceExecutor>(store, o);
    }
    return *device;
  }

  /// Background thread, at its end: every operation has finished or failed.
  /// After a failure, local peers in an intra-host pipeline are woken first
  /// so that neither side waits for the other's teardown.
  void release_device() noexcept {
    if (!device) return;
    try {
      bool failed_state;
      {
        std::lock_guard<std::mutex> lock(mu);
        failed_state = state == State::Failed;
      }
      if (failed_state) device->abort();
      device.reset();
    } catch (...) {
      spdlog::error("{}: releasing CUDA resources failed", tag());
    }
  }

  void loop() {
    auto next_cycle = Clock::now();
    while (true) {
      std::vector<std::shared_ptr<OpState>> fresh;
      bool shutting;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait_until(lock, next_cycle, [&] { return !queue.empty() || shutdown_requested || abort_requested; });
        if (abort_requested) throw IoError(abort_reason);
        fresh.swap(queue);
        shutting = shutdown_requested;
      }
      const auto now = Clock::now();
      next_cycle = now + cycle_time;

      std::vector<Request> requests;
      requests.reserve(fresh.size());
      for (const auto& op : fresh) requests.push_back(op->request);

      std::vector<std::string> stalled;
      if (settings.rank == 0) stalled = check_stalls(now);

      detail::RankMessage mine = controller.make_message(requests, shutting, std::move(stalled));
      std::vector<detail::RankMessage> all = wire.exchange(*comm, mine);
      announced = 0;
      detail::Controller::Outcome outcome = controller.process(all, now);
      if (timeline.active()) timeline_negotiated(outcome);
      // Before any handle completes, so a waiter sees this cycle's counts.
      publish_stats();
      for (const detail::Response& r : outcome.responses) run_response(r);
      if (autotuner) autotune_step(outcome.responses);
      if (outcome.shutdown_rank >= 0) {
        stop(outcome.shutdown_rank);
        return;
      }
    }
  }

  /// The tensor's name and this rank's request (a stalled tensor may lack
  /// some ranks' requests, this rank's included).
  static const Request& announced_request(const detail::TensorRequests& t, int rank) {
    if (!t[rank].name.empty()) return t[rank];
    for (const Request& q : t) {
      if (!q.name.empty()) return q;
    }
    return t[rank];
  }

  /// Negotiation ended for these responses: each tensor's operation opens
  /// and waits in QUEUE until the executor takes it.
  void timeline_negotiated(const detail::Controller::Outcome& outcome) {
    if (timeline.mark_cycles() && (announced > 0 || !outcome.responses.empty())) timeline.mark_cycle();
    for (const detail::Response& r : outcome.responses) {
      for (const auto& t : r.tensors) {
        const Request& q = announced_request(t, settings.rank);
        timeline.negotiated(q.name, detail::timeline_op_name(r.type), detail::tensor_bytes(q));
      }
    }
  }

  /// After a cycle: autotune's bookkeeping, and at the end of a sample rank
  /// 0's next setting, broadcast and applied by every rank now.
  void autotune_step(const std::vector<detail::Response>& responses) {
    std::optional<detail::TuneParams> p = autotuner->after_cycle(responses, settings.rank, comm.get());
    if (!p) return;
    const auto threshold = static_cast<std::size_t>(p->fusion_mb * 1024 * 1024);
    controller.set_fusion_threshold(threshold);
    cycle_time = std::chrono::microseconds(static_cast<int64_t>(p->cycle_ms * 1000));
    hier_allreduce = p->hierarchical_allreduce;
    hier_allgather = p->hierarchical_allgather;
    std::lock_guard<std::mutex> lock(mu);
    stats.autotune_samples = autotuner->history().size();
    stats.autotune_active = autotuner->active();
    stats.fusion_threshold = threshold;
    stats.cycle_time = cycle_time;
  }

  std::vector<std::string> check_stalls(Clock::time_point now) {
    if (!settings.stall_check) return {};
    // Scanning the table every cycle would cost more than the check is worth.
    auto period = std::min<std::chrono::milliseconds>(settings.stall_warn_after / 10, std::chrono::milliseconds(100));
    if (now - last_stall_check < period) return {};
    last_stall_check = now;
    detail::StallInspector::Report report = stall.check(controller.pending(), now);
    for (const std::string& w : report.warnings) spdlog::warn("{}: {}", tag(), w);
    if (!report.warnings.empty()) {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& w : report.warnings) stats.stall_warnings.push_back(std::move(w));
    }
    return report.to_fail;
  }

  void run_response(const detail::Response& resp) {
    std::vector<std::shared_ptr<OpState>> ops;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& t : resp.tensors) {
        auto it = pending.find(t[0].name);
        if (it != pending.end()) {
          ops.push_back(it->second);
        } else if (resp.ok() && t[settings.rank].joined) {
          ops.push_back(zeros_for_joined(t[settings.rank]));
        } else if (resp.ok()) {
          throw IoError(fmt::format("negotiation state diverged: tensor '{}' is ready but not pending on rank {}",
                                    t[0].name, settings.rank));
        }
      }
    }
    if (resp.ok() && resp.type == OpType::Join) {
      // The join result: the rank that joined last, as a library-owned int32.
      for (auto& op : ops) {
        op->owned = std::make_unique<uint8_t[]>(sizeof(int32_t));
        const int32_t last = resp.last_joined;
        std::memcpy(op->owned.get(), &last, sizeof(last));
        op->out_data = op->owned.get();
        op->out_bytes = sizeof(int32_t);
        op->out_shape = {};
      }
    } else if (resp.ok()) {
      std::vector<OpState*> raw;
      for (auto& op : ops) raw.push_back(op.get());
      detail::Executors ex{*comm, fusion, [this]() -> cuda::detail::DeviceExecutor& { return device_executor(); },
                           [this](const std::vector<int>& members) -> Comm& { return group_comm(members); }};
      if (timeline.active()) {
        ex.timeline = &timeline;
        for (auto& op : ops) timeline.activity_end(op->request.name);  // QUEUE
      }
      if (hier_allreduce || hier_allgather) {
        if (!hierarchy) {
          hierarchy = std::make_unique<detail::Hierarchy>(hier_allreduce, hier_allgather, settings.local_rank,
                                                          settings.cross_rank, settings.local_size);
        }
        hierarchy->set_enabled(hier_allreduce, hier_allgather);
        ex.hierarchy = hierarchy.get();
      }
      detail::execute(resp, raw, ex);
    }
    if (timeline.active()) {
      for (const auto& t : resp.tensors) {
        const Request& q = announced_request(t, settings.rank);
        timeline.end(q.name, resp.ok() ? fmt::format("\"dtype\": \"{}\", \"shape\": \"[{}]\"", dtype_name(q.dtype),
                                                     fmt::join(q.shape, ", "))
                                       : fmt::format("\"error\": {}", detail::timeline_quote(resp.message)));
      }
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& op : ops) pending.erase(op->request.name);
      if (hierarchy) stats.hierarchical_ops = hierarchy->ops();
    }
    for (auto& op : ops) {
      std::exception_ptr e = op->local_error;
      if (resp.error == detail::ResponseError::Mismatch) e = std::make_exception_ptr(MismatchError(resp.message));
      if (resp.error == detail::ResponseError::Stalled) e = std::make_exception_ptr(TimeoutError(resp.message));
      if (resp.error == detail::ResponseError::Unsupported) e = std::make_exception_ptr(InvalidArgument(resp.message));
      if (resp.error == detail::ResponseError::Joined) e = std::make_exception_ptr(JoinedError(resp.message));
      op->finish(e);
    }
    if (!resp.ok()) spdlog::error("{}: {}", tag(), resp.message);
  }

  /// This rank has joined: its part of an allreduce the others submitted is
  /// zeros (Horovod's join), in a buffer owned by a throwaway op.
  std::shared_ptr<OpState> zeros_for_joined(const Request& made_up) {
    auto op = std::make_shared<OpState>();
    op->request = made_up;
    const std::size_t bytes = detail::tensor_bytes(made_up);
    op->owned = std::make_unique<uint8_t[]>(std::max<std::size_t>(bytes, 1));
    std::memset(op->owned.get(), 0, bytes);
    op->input = op->output = op->owned.get();
    op->submitted = Clock::now();
    return op;
  }

  void publish_stats() {
    const detail::ControllerStats& c = controller.stats();
    std::lock_guard<std::mutex> lock(mu);
    stats.cycles = c.cycles;
    stats.cache_hits = c.cache_hits;
    stats.cache_misses = c.cache_misses;
    stats.fused_responses = c.fused_responses;
    stats.fused_tensors = c.fused_tensors;
    stats.responses = c.responses;
  }

  /// Elastic worlds (Settings::peer_shutdown_is_failure): a stop another
  /// rank's shutdown caused means that member left the world.
  bool left_world(int by_rank) const {
    return settings.peer_shutdown_is_failure && by_rank >= 0 && by_rank != settings.rank;
  }

  /// Every rank agreed to stop: fail what is left.
  void stop(int by_rank) {
    std::vector<std::shared_ptr<OpState>> left;
    {
      std::lock_guard<std::mutex> lock(mu);
      state = State::Stopped;
      stopped_by = by_rank;
      for (auto& [name, op] : pending) left.push_back(op);
      pending.clear();
      queue.clear();
    }
    for (auto& op : left) {
      if (left_world(by_rank)) {
        op->finish(std::make_exception_ptr(elastic::PeerFailureError(fmt::format(
            "hvd: rank {} shut down (left the world) before tensor '{}' could run", by_rank, op->request.name))));
      } else {
        op->finish(std::make_exception_ptr(ShutdownError(
            fmt::format("hvd: rank {} shut down the job before tensor '{}' could run", by_rank, op->request.name))));
      }
    }
  }

  /// The communicator failed: fail everything now and later.
  void fail(FailureKind kind, const std::string& what) noexcept {
    try {
      std::string reason;
      bool requested = false;
      {
        std::lock_guard<std::mutex> lock(mu);
        requested = abort_requested;
        reason = requested ? "aborted: " + abort_reason : what;
      }
      std::string message = fmt::format("hvd: rank {} lost its communicator: {}", settings.rank, reason);
      try {
        comm->abort(message);
      } catch (...) {
      }
      std::vector<std::shared_ptr<OpState>> left;
      {
        std::lock_guard<std::mutex> lock(mu);
        state = State::Failed;
        failure_kind = abort_requested ? FailureKind::Io : kind;
        failure = message;
        for (auto& [name, op] : pending) left.push_back(op);
        pending.clear();
        queue.clear();
      }
      // A requested abort (an elastic world dropping a member) is a planned
      // state change, not a failure: one info line.
      spdlog::log(requested ? spdlog::level::info : spdlog::level::err, "{}: {}; failing {} pending operation(s)",
                  tag(), message, left.size());
      std::exception_ptr e = failure_ptr();
      for (auto& op : left) op->finish(e);
    } catch (...) {
      // Never let anything escape the background thread.
    }
  }
};

// ---- Context ---------------------------------------------------------------

std::unique_ptr<Context> Context::create(const Settings& settings, std::shared_ptr<store::Store> store) {
  if (settings.size < 1 || settings.rank < 0 || settings.rank >= settings.size) {
    throw InvalidArgument(fmt::format("hvd: rank {} is not valid for a job of size {}", settings.rank, settings.size));
  }
  if (settings.size == 1) return std::make_unique<Context>(settings, nullptr, std::move(store));
  if (!store) throw InvalidArgument("hvd: a job of size > 1 needs a rendezvous store");
  background_core(settings);  // a bad core fails before the peers are connected
  CommOptions options;
  options.rank = settings.rank;
  options.size = settings.size;
  options.prefix = settings.comm_prefix;
  options.bind_address = settings.bind_address;
  options.route_hint = settings.route_hint;
  options.secret = settings.secret;
  options.timeout = settings.start_timeout;
  if (settings.init_deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*settings.init_deadline -
                                                                            std::chrono::steady_clock::now());
    options.timeout = std::clamp(left, std::chrono::milliseconds(1), settings.start_timeout);
  }
  std::unique_ptr<Comm> comm;
  // The messages of connect_comm name the step (publishing or reading an
  // address in the store, connecting, the data-path hello, shared-memory
  // pairing) and the peer that failed it; the first failure goes on the
  // store's failure board, so ranks that fail later in the cascade report
  // the same one (FailureBoard).
  auto record = [&](const std::string& what) {
    try {
      return FailureBoard(store, settings.comm_prefix).report(what);
    } catch (...) {
      return what;
    }
  };
  try {
    comm = connect_comm(*store, options);
  } catch (const TimeoutError& e) {
    const std::string first = record(e.what());
    throw TimeoutError(fmt::format("hvd init: rank {} of {} could not rendezvous with its peers within {} ms: {}{}",
                                   settings.rank, settings.size, settings.start_timeout.count(), e.what(),
                                   first == e.what() ? "" : " (first failure in the job: " + first + ")"));
  } catch (const IoError& e) {
    const std::string first = record(e.what());
    throw IoError(fmt::format("hvd init: rank {} of {} could not rendezvous with its peers: {}{}", settings.rank,
                              settings.size, e.what(),
                              first == e.what() ? "" : " (first failure in the job: " + first + ")"));
  }
  return std::make_unique<Context>(settings, std::move(comm), std::move(store));
}

Context::Context(const Settings& settings, std::unique_ptr<Comm> comm, std::shared_ptr<store::Store> store) {
  if (settings.size < 1 || settings.rank < 0 || settings.rank >= settings.size) {
    throw InvalidArgument(fmt::format("hvd: rank {} is not valid for a job of size {}", settings.rank, settings.size));
  }
  if (comm && (comm->size() != settings.size || comm->rank() != settings.rank)) {
    throw InvalidArgument(fmt::format("hvd: communicator is rank {} of {} but settings say rank {} of {}", comm->rank(),
                                      comm->size(), settings.rank, settings.size));
  }
  if (!comm && settings.size != 1) throw InvalidArgument("hvd: a job of size > 1 needs a communicator");
  const BackgroundCore pin = background_core(settings);
  if (!pin.warning.empty() && settings.local_rank == 0) spdlog::warn("{}", pin.warning);
  impl_ = std::make_unique<Impl>(settings, std::move(comm), std::move(store));
  impl_->psets = std::make_unique<detail::ProcessSetTable>(*this, impl_->store);
  if (impl_->records_timeline() && !settings.timeline_path.empty()) {
    // As Horovod: a timeline that cannot be opened is logged, not fatal.
    try {
      impl_->timeline.start(settings.timeline_path, settings.timeline_mark_cycles);
    } catch (const IoError& e) {
      spdlog::error("{}; the job runs without a timeline", e.what());
    }
  }
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
  // The name lets people (and tests) find the thread: top -H, /proc/PID/task.
  pthread_setname_np(impl_->thread.native_handle(), "hvd-background");
  if (pin.core >= 0) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(pin.core, &one);
    if (int err = pthread_setaffinity_np(impl_->thread.native_handle(), sizeof one, &one); err != 0) {
      spdlog::warn("{}: pinning the background thread to core {} failed: {}", job_env::kThreadAffinity, pin.core,
                   std::strerror(err));
    }
  }
  if (!settings.process_sets.empty()) {
    // Collective over every rank, now that the background thread runs.
    try {
      impl_->psets->register_static(settings.process_sets, settings.skip_unfit_process_sets);
    } catch (...) {
      shutdown();
      throw;
    }
  }
}

Context::~Context() { shutdown(); }

void Context::shutdown() {
  std::lock_guard<std::mutex> join_lock(impl_->join_mu);
  if (!impl_->thread.joinable()) return;
  // The sets first: their members stop them together, each set on its own.
  impl_->psets->shutdown_all();
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->shutdown_requested = true;
  }
  impl_->cv.notify_all();
  impl_->thread.join();
  impl_->timeline.stop();
}

void Context::start_timeline(const std::string& path, bool mark_cycles) {
  if (path.empty()) throw InvalidArgument("hvd: start_timeline: the file path is empty");
  if (impl_->records_timeline()) impl_->timeline.start(path, mark_cycles);
}

void Context::stop_timeline() { impl_->timeline.stop(); }

bool Context::timeline_active() const { return impl_->timeline.active(); }

void Context::abort(const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->state != Impl::State::Running || impl_->abort_requested) return;
    impl_->abort_requested = true;
    impl_->abort_reason = reason;
  }
  impl_->cv.notify_all();
  // Peers see our links close: tell them why first (Comm::report_failure),
  // so they do not report this rank as failed.
  impl_->comm->report_failure(fmt::format("rank {} aborted the communicator ({})", impl_->settings.rank, reason));
  // Unblocks the background thread if it is inside a collective.
  impl_->comm->abort(reason);
  impl_->psets->abort_all(reason);
}

bool Context::failed() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->state == Impl::State::Failed;
}

ContextStats Context::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->stats;
}

const Settings& Context::settings() const { return impl_->settings; }
int Context::rank() const { return impl_->settings.rank; }
int Context::size() const { return impl_->settings.size; }
int Context::local_rank() const { return impl_->settings.local_rank; }
int Context::local_size() const { return impl_->settings.local_size; }
int Context::cross_rank() const { return impl_->settings.cross_rank; }
int Context::cross_size() const { return impl_->settings.cross_size; }

namespace {
/// kAutoDevice -> where CUDA says the buffers are (host without the CUDA
/// component); any other value is the caller's answer, checked at submit.
/// `both`: input and output must be on the same device (allreduce; a
/// non-root's broadcast input is ignored).
int32_t resolve_device(int32_t device, const void* input, const void* output, const std::string& name, bool both) {
  if (device != kAutoDevice) return device;
  if (!cuda::cuda_built()) return kHostDevice;
  if (input == nullptr && output == nullptr) {
    // An empty tensor (zero rows on this rank, say) has no pointer to ask
    // about; guessing "host" would make a mismatch with ranks that pass
    // device buffers.
    throw InvalidArgument(fmt::format(
        "hvd: tensor '{}': kAutoDevice cannot tell where a null buffer is; pass the device (or kHostDevice)", name));
  }
  const int in = input ? cuda::pointer_device(input) : -1;
  const int out = output ? cuda::pointer_device(output) : -1;
  if (both && input && output && in != out) {
    throw InvalidArgument(fmt::format("hvd: tensor '{}': input is on {} but output on {}", name,
                                      in < 0 ? std::string("the host") : fmt::format("CUDA device {}", in),
                                      out < 0 ? std::string("the host") : fmt::format("CUDA device {}", out)));
  }
  return output ? out : in;
}

/// "allreduce of tensor 'x'", for process-set errors.
std::string op_what(const char* op, const std::string& name) {
  return name.empty() ? fmt::format("{} of an unnamed tensor", op) : fmt::format("{} of tensor '{}'", op, name);
}

std::shared_ptr<OpState> make_op(OpType type, const std::string& name, DataType dtype,
                                 const std::vector<int64_t>& shape) {
  auto op = std::make_shared<OpState>();
  op->request.type = type;
  op->request.name = name;
  op->request.dtype = dtype;
  op->request.shape = shape;
  return op;
}
}  // namespace

// ---- The one submit path -----------------------------------------------------
// Every op's entry point describes its buffers in an OpState and hands it to
// submit(): on another process set it goes to that set's Context, the root
// of a broadcast renumbered within the set; then the device is resolved and
// the request queued for the next negotiation cycle.

struct Context::Submission {
  int32_t process_set = kGlobalProcessSet;
  int32_t device = kHostDevice;
  /// The op writes the caller's output buffer (allreduce, broadcast): its
  /// memory decides the device.
  bool caller_output = false;
  /// Input and output must then be one kind of memory (allreduce).
  bool same_memory = false;
};

Handle Context::submit(std::shared_ptr<detail::OpState> op, const Submission& how) {
  detail::Request& q = op->request;
  if (how.process_set != kGlobalProcessSet) {
    const std::string what = op_what(detail::op_type_name(q.type), q.name);
    auto set = impl_->psets->member(how.process_set, what);
    if (q.type == OpType::Broadcast) {
      const int global_root = q.root;
      q.root = impl_->psets->set_rank_of(how.process_set, global_root);
      if (q.root < 0) {
        throw InvalidArgument(fmt::format(
            "hvd: {}: root rank {} is not a member of process set {} [{}] (the root is a global rank)", what,
            global_root, how.process_set, fmt::join(impl_->psets->ranks(how.process_set), ", ")));
      }
    }
    Submission inner = how;
    inner.process_set = kGlobalProcessSet;
    return set->submit(std::move(op), inner);
  }
  if (q.type != OpType::Barrier && q.type != OpType::Join) {
    q.device = resolve_device(how.device, op->input, how.caller_output ? op->output : nullptr, q.name,
                              how.same_memory);
  }
  return impl_->submit(std::move(op));
}

Handle Context::allreduce_async(const AllreduceArgs& a) {
  auto op = make_op(OpType::Allreduce, a.name, a.dtype, a.shape);
  op->request.op = a.op;
  op->request.prescale = a.prescale;
  op->request.postscale = a.postscale;
  op->input = a.input;
  op->output = a.output;
  op->stream = a.stream;
  return submit(std::move(op), {a.process_set, a.device, true, true});
}

Handle Context::allgather_async(const AllgatherArgs& a) {
  auto op = make_op(OpType::Allgather, a.name, a.dtype, a.shape);
  op->input = a.input;
  op->allocator = a.allocator;
  op->stream = a.stream;
  return submit(std::move(op), {a.process_set, a.device, false, false});
}

Handle Context::broadcast_async(const BroadcastArgs& a) {
  auto op = make_op(OpType::Broadcast, a.name, a.dtype, a.shape);
  op->request.root = a.root;
  op->input = a.input;
  op->output = a.output;
  op->stream = a.stream;
  return submit(std::move(op), {a.process_set, a.device, true, false});
}

Handle Context::alltoall_async(const AlltoallArgs& a) {
  auto op = make_op(OpType::Alltoall, a.name, a.dtype, a.shape);
  op->request.splits = a.splits;
  op->input = a.input;
  op->allocator = a.allocator;
  op->stream = a.stream;
  return submit(std::move(op), {a.process_set, a.device, false, false});
}

Handle Context::reducescatter_async(const ReducescatterArgs& a) {
  auto op = make_op(OpType::Reducescatter, a.name, a.dtype, a.shape);
  op->request.op = a.op;
  op->request.prescale = a.prescale;
  op->request.postscale = a.postscale;
  op->input = a.input;
  op->allocator = a.allocator;
  op->stream = a.stream;
  return submit(std::move(op), {a.process_set, a.device, false, false});
}

Handle Context::barrier_async(const BarrierArgs& a) {
  return submit(make_op(OpType::Barrier, a.name, DataType::UInt8, {0}), {a.process_set, kHostDevice, false, false});
}

Handle Context::join_async() {
  auto op = make_op(OpType::Join, detail::kJoinName, DataType::UInt8, {0});
  return impl_->submit(std::move(op));
}

int Context::join() {
  Handle h = join_async();
  h.wait();
  int32_t last = -1;
  std::memcpy(&last, h.output(), sizeof(last));
  return last;
}

int32_t Context::add_process_set(std::vector<int> ranks) { return impl_->psets->add(std::move(ranks)); }
void Context::remove_process_set(int32_t id) { impl_->psets->remove(id); }
std::vector<int32_t> Context::process_set_ids() const { return impl_->psets->ids(); }
std::vector<int> Context::process_set_ranks(int32_t id) const { return impl_->psets->ranks(id); }
bool Context::process_set_included(int32_t id) const { return impl_->psets->included(id); }
int Context::process_set_rank(int32_t id) const { return impl_->psets->rank(id); }
int Context::process_set_size(int32_t id) const { return impl_->psets->size(id); }

Handle Context::allgather(const AllgatherArgs& args) {
  Handle h = allgather_async(args);
  h.wait();
  return h;
}
Handle Context::alltoall(const AlltoallArgs& args) {
  Handle h = alltoall_async(args);
  h.wait();
  return h;
}
Handle Context::reducescatter(const ReducescatterArgs& args) {
  Handle h = reducescatter_async(args);
  h.wait();
  return h;
}

}  // namespace hvd::collective
