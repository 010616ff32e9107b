// ElasticMember: joining the worlds hvdrun publishes, the arrival barrier
// that makes a world form entirely or not at all, and the watcher thread
// (protocol in hvd/collective/elastic_member.h and hvd/store/elastic_world.h).
#include "hvd/collective/elastic_member.h"

#include "hvd/collective/init_env.h"

#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/io.h"
#include "hvd/common/job_env.h"
#include "hvd/store/http_store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

namespace hvd::elastic {

namespace selastic = hvd::store::elastic;
using Clock = std::chrono::steady_clock;

namespace {

/// Added to "<prefix>arrived" to cancel a barrier. Far beyond any job size,
/// so a poisoned counter stays negative whatever arrives later.
constexpr int64_t kPoison = int64_t(1) << 40;

std::string text_of(const store::Bytes& b) { return std::string(b.begin(), b.end()); }

std::chrono::milliseconds remaining(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(0));
}

/// Latest published version (0 before the first).
uint64_t latest_version(store::Store& st) {
  auto v = st.try_get(selastic::kVersionKey);
  if (!v) return 0;
  auto n = env::parse_int(text_of(*v));
  if (!n || *n < 0) {
    throw IoError(
        fmt::format("elastic: store key '{}' holds '{}', not a version number", selastic::kVersionKey, text_of(*v)));
  }
  return static_cast<uint64_t>(*n);
}

std::set<std::string> ids_of(const selastic::World& w) {
  std::set<std::string> ids;
  for (const auto& m : w.members) ids.insert(m.worker_id);
  return ids;
}

}  // namespace

/// State shared by the joining thread and the watcher.
struct WatchState {
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;
  /// The watcher waits for world `base + 1`, then for each later one
  /// (`seen + 1`) until one drops a member of `base` or is final.
  uint64_t base = 0;
  /// World base+1 has been seen (it may be final).
  bool newer = false;
  bool newer_final = false;
  /// The newest world seen (base+1 or later) and whether one of the worlds
  /// seen dropped a member of `base` outright (or a draining one failed):
  /// `base` is over and there is nothing more to watch for.
  uint64_t seen = 0;
  bool departed = false;
  std::string departed_why;
  /// Members of world `base` (to tell whether a newer world dropped one).
  std::set<std::string> members;
  /// Members of `base` that the newest world seen lists as draining: they
  /// train on to the next commit, unless hvdrun writes drain_failed_key.
  std::set<std::string> draining;
  /// kDrainFailuresKey's text when `draining`'s keys were last read (none:
  /// read them at the next slice).
  std::optional<std::string> drain_mark;
  /// The Context of world `base` once formed; aborted when a newer world drops a member.
  std::weak_ptr<collective::Context> context;
  std::string worker_id;

  /// With mu held: why `next` ends world `base` -- the members of `base` it
  /// drops outright ("world 3 dropped worker(s) b (reason)"), not those it
  /// lists as draining -- or "" when it drops none (or is final: training
  /// goes on to its end).
  std::string departure_locked(const selastic::World& next) const {
    if (newer_final) return "";
    std::string gone;
    for (const auto& id : members) {
      if (next.find(id)) continue;
      if (std::find(next.draining.begin(), next.draining.end(), id) != next.draining.end()) continue;
      gone += (gone.empty() ? "" : ", ") + id;
    }
    if (gone.empty()) return "";
    return fmt::format("world {} dropped worker(s) {} ({})", next.version, gone,
                       next.reason.empty() ? "no reason given" : next.reason);
  }

  /// With mu held: world `base` is over because of `why`. Aborts its
  /// Context; while it is still forming (no Context yet) returns `why`, for
  /// the caller to record as the forming communicator's first failure
  /// outside the lock; "" otherwise.
  std::string end_base_locked(const std::string& why) {
    departed = true;
    departed_why = why;
    if (auto ctx = context.lock()) {
      ctx->abort(why);
      return "";
    }
    return why;
  }

  /// With mu held: whether the watcher waits for another world.
  bool watching_locked() const { return !newer || (!departed && !newer_final); }
};

struct ElasticMember::Impl {
  MemberOptions options;
  std::shared_ptr<store::Store> store;
  std::shared_ptr<collective::Context> context;
  selastic::World world;
  /// Read by hosts_updated() from any thread.
  std::atomic<bool> ever_member{false};
  bool closed = false;
  /// Set by reset() when the current world's communicator had failed (not a
  /// commit's HostsUpdatedInterrupt): a draining member then does not leave
  /// while it may be the last holder of the trained state (wait_or_leave).
  bool stranded = false;
  /// Set by synced(): this worker completed a State::sync, so it may hold
  /// the trained state. One that never did has nothing worth keeping and
  /// never waits as a stranded drainer.
  std::atomic<bool> synced_ever{false};
  /// Worlds newer than the stranded base that formed listing no other holder.
  std::set<uint64_t> formed_without_holder;
  bool stranded_said = false;
  std::shared_ptr<WatchState> watch = std::make_shared<WatchState>();
  std::thread watcher;
  mutable std::mutex mu;  // guards context and world for readers on other threads

  std::string tag() const { return fmt::format("elastic worker {}", options.worker_id); }

  void start_watcher() {
    if (watcher.joinable()) return;
    std::shared_ptr<store::Store> own = options.open_store();
    if (!own) throw InvalidArgument("elastic: open_store returned no store");
    watcher = std::thread([w = watch, own, slice = options.watch_slice] { watch_loop(*w, *own, slice); });
  }

  /// Records `why` as the first failure of world `version`'s communicator,
  /// which is still forming: its members waiting at init look there every
  /// 250 ms and give up.
  static void record_forming_failure(WatchState& w, store::Store& st, uint64_t version, const std::string& why) {
    try {
      collective::FailureBoard::record(st, selastic::comm_prefix(version),
                                       why + ", while world " + std::to_string(version) + " was forming");
    } catch (const std::exception& e) {
      spdlog::debug("elastic watcher of {}: could not tell world {} that it cannot form: {}", w.worker_id, version,
                    e.what());
    }
  }

  /// Once per slice while members of `base` drain: did hvdrun say one of
  /// them failed or was stopped before it left (drain_failed_key)? Then
  /// `base` is over: a peer that vanished without a TCP reset must not hang
  /// the others.
  static void check_draining(WatchState& w, store::Store& st, uint64_t base, const std::vector<std::string>& ids) {
    std::string mark;
    try {
      auto counter = st.try_get(selastic::kDrainFailuresKey);
      mark = counter ? text_of(*counter) : "";
    } catch (const std::exception&) {
      return;  // the world poll reports an unreachable store
    }
    {
      std::lock_guard<std::mutex> lock(w.mu);
      if (w.stop || w.base != base || w.departed || w.drain_mark == mark) return;
    }
    for (const auto& id : ids) {
      std::optional<store::Bytes> failed;
      try {
        failed = st.try_get(selastic::drain_failed_key(id));
      } catch (const std::exception&) {
        return;  // the world poll reports an unreachable store
      }
      if (!failed) continue;
      std::string forming;
      {
        std::lock_guard<std::mutex> lock(w.mu);
        if (w.stop || w.base != base || w.departed) return;
        spdlog::info("elastic worker {}: draining worker {} did not leave at a commit: {}", w.worker_id, id,
                     text_of(*failed));
        forming = w.end_base_locked(fmt::format("draining worker {} did not leave at a commit ({})", id,
                                                text_of(*failed)));
      }
      if (!forming.empty()) record_forming_failure(w, st, base, forming);
      return;
    }
    std::lock_guard<std::mutex> lock(w.mu);
    if (w.base == base) w.drain_mark = mark;
  }

  static void watch_loop(WatchState& w, store::Store& st, std::chrono::milliseconds slice) {
    std::string last_error;
    for (;;) {
      uint64_t target = 0, base = 0;
      std::vector<std::string> draining;
      {
        std::unique_lock<std::mutex> lock(w.mu);
        w.cv.wait(lock, [&] { return w.stop || w.watching_locked(); });
        if (w.stop) return;
        base = w.base;
        target = w.newer ? w.seen + 1 : w.base + 1;
        draining.assign(w.draining.begin(), w.draining.end());
      }
      if (!draining.empty()) check_draining(w, st, base, draining);
      std::optional<selastic::World> next;
      try {
        next = selastic::decode_world(text_of(st.get(selastic::world_key(target), slice)));
        last_error.clear();
      } catch (const TimeoutError&) {
        continue;
      } catch (const std::exception& e) {
        // Store unreachable or a malformed world: say so once, retry calmly.
        if (last_error != e.what()) spdlog::warn("elastic watcher of {}: {}", w.worker_id, e.what());
        last_error = e.what();
        std::unique_lock<std::mutex> lock(w.mu);
        w.cv.wait_for(lock, slice, [&] { return w.stop; });
        continue;
      }
      std::string forming_fails;  // why world `base`, still forming, cannot form
      {
        std::lock_guard<std::mutex> lock(w.mu);
        if (w.stop) return;
        if (w.base != base || target != (w.newer ? w.seen + 1 : w.base + 1)) continue;  // retargeted while polling
        w.newer = true;
        w.newer_final = w.newer_final || next->final;
        w.seen = target;
        std::set<std::string> draining;
        for (const auto& id : next->draining) {
          if (w.members.count(id)) draining.insert(id);
        }
        if (draining != w.draining) w.drain_mark.reset();  // new ids: read their keys
        w.draining = std::move(draining);
        // A worker not yet in a world (base 0: a newcomer) that the world does
        // not list is only catching up with worlds that predate it: debug,
        // not a state change of its own.
        spdlog::log(w.base > 0 || next->find(w.worker_id) ? spdlog::level::info : spdlog::level::debug,
                    "elastic worker {}: world {} published ({} members{}{})", w.worker_id, next->version,
                    next->members.size(), next->final ? ", final" : "",
                    next->reason.empty() ? "" : ": " + next->reason);
        // A newer world that drops a member of `base` outright ends it: a
        // formed Context is aborted; one still forming (no context yet) will
        // never form -- the dropped member is being stopped, and the others
        // would wait for it until their start timeout.
        const std::string why = w.departure_locked(*next);
        if (!why.empty()) forming_fails = w.end_base_locked(why);
      }
      if (!forming_fails.empty()) record_forming_failure(w, st, base, forming_fails);
    }
  }

  void stop_watcher() {
    {
      std::lock_guard<std::mutex> lock(watch->mu);
      watch->stop = true;
    }
    watch->cv.notify_all();
    if (watcher.joinable()) watcher.join();
  }

  /// Points the watcher at world `w` (not yet formed: no context).
  void retarget(const selastic::World& w) {
    {
      std::lock_guard<std::mutex> lock(watch->mu);
      watch->base = w.version;
      watch->newer = false;
      watch->newer_final = false;
      watch->seen = 0;
      watch->departed = false;
      watch->departed_why.clear();
      watch->draining.clear();
      watch->drain_mark.reset();
      watch->members = ids_of(w);
      watch->context.reset();
    }
    watch->cv.notify_all();
  }

  bool newer_seen() const {
    std::lock_guard<std::mutex> lock(watch->mu);
    return watch->newer;
  }

  void shutdown_context() {
    std::shared_ptr<collective::Context> ctx;
    {
      std::lock_guard<std::mutex> lock(mu);
      ctx = context;
    }
    if (ctx) ctx->shutdown();
  }

  enum class Rendezvous { Formed, Abandoned, Failed };

  /// Steps 2 and 3 of the join (header comment).
  Rendezvous rendezvous(const selastic::World& w, const selastic::Member& me, Clock::time_point deadline) {
    const std::string prefix = selastic::comm_prefix(w.version);
    const int n = w.size();
    if (n > 1) {
      const std::string arrived = prefix + "arrived", formed = selastic::formed_key(w.version),
                        abandoned = prefix + "abandoned";
      int64_t count = store->add(arrived, 1);
      if (count < 0) return Rendezvous::Abandoned;
      if (count == n) {
        store->set_string(formed, "1");
      } else {
        for (;;) {
          try {
            store->wait({formed}, std::min(options.barrier_slice, remaining(deadline)));
            break;
          } catch (const TimeoutError&) {
          }
          if (store->try_get(abandoned)) return Rendezvous::Abandoned;
          const bool out_of_time = Clock::now() >= deadline;
          if (!newer_seen() && !out_of_time) continue;
          // Cancel the barrier unless it completed meanwhile.
          const int64_t before = store->add(arrived, -kPoison) + kPoison;
          if (before == n) break;  // complete: "formed" is on its way; join in
          store->set_string(abandoned, "1");
          if (out_of_time) {
            throw TimeoutError(fmt::format(
                "elastic: {} gave up on world {} after HOROVOD_ELASTIC_TIMEOUT ({} s): {} of {} members arrived", tag(),
                w.version, options.timeout.count() / 1000.0, before, n));
          }
          return Rendezvous::Abandoned;
        }
      }
    }
    collective::Settings s = options.settings;
    s.rank = me.rank;
    s.size = n;
    s.local_rank = me.local_rank;
    s.local_size = me.local_size;
    s.cross_rank = me.cross_rank;
    s.cross_size = me.cross_size;
    if (!me.host.empty()) s.hostname = me.host;
    s.comm_prefix = prefix;
    s.peer_shutdown_is_failure = true;
    s.start_timeout = std::max(std::chrono::milliseconds(1), std::min(s.start_timeout, remaining(deadline)));
    try {
      std::shared_ptr<collective::Context> ctx = collective::Context::create(s, n > 1 ? store : nullptr);
      if (n == 1) {
        // No barrier wrote it: a draining worker stranded by a failure
        // (wait_or_leave) reads it to know this member holds the state.
        try {
          store->set_string(selastic::formed_key(w.version), "1");
        } catch (const std::exception& e) {
          spdlog::debug("{}: could not mark world {} formed: {}", tag(), w.version, e.what());
        }
      }
      std::lock_guard<std::mutex> lock(mu);
      context = std::move(ctx);
      world = w;
      return Rendezvous::Formed;
    } catch (const IoError& e) {
      return not_formed(w, e.what());
    } catch (const TimeoutError& e) {
      return not_formed(w, e.what());
    }
  }

  /// World `w` did not form (`why`). Superseded meanwhile (a newer world
  /// exists: it dropped a member, so this one could not form): a state
  /// change, said at info; else a warning, and hvdrun is asked to re-form.
  Rendezvous not_formed(const selastic::World& w, const std::string& why) {
    if (newer_seen()) {
      spdlog::info("{}: world {} superseded while forming ({}); moving on", tag(), w.version, why);
      return Rendezvous::Abandoned;
    }
    spdlog::warn("{}: world {} did not form: {}", tag(), w.version, why);
    ask_to_reform(w.version, fmt::format("did not form: {}", why));
    return Rendezvous::Failed;
  }

  /// Tells hvdrun that this member left world `version` and has no newer
  /// world to go to (selastic::reset_key): once every live member did,
  /// hvdrun re-forms the same members. Best effort: a store that does not
  /// answer leaves the elastic timeout to end the wait.
  void ask_to_reform(uint64_t version, const std::string& why) {
    if (newer_seen()) return;  // a newer world is already there to join
    try {
      store->set_string(selastic::reset_key(version, options.worker_id), why);
    } catch (const std::exception& e) {
      spdlog::warn("{}: could not ask hvdrun to re-form world {}: {}", tag(), version, e.what());
    }
  }

  /// Tells hvdrun this worker left the job (left_key: the version of world
  /// `w`, the newest, which does not list it) and throws WorkerRemovedError.
  [[noreturn]] void leave(const selastic::World& w, const std::string& why) {
    try {
      store->set_string(selastic::left_key(options.worker_id), std::to_string(w.version));
    } catch (const std::exception& e) {
      spdlog::debug("{}: could not tell hvdrun that it left: {}", tag(), e.what());
    }
    throw WorkerRemovedError(fmt::format("elastic: {} was removed from the job in world {}{}{}", tag(), w.version,
                                         why.empty() ? "" : ": ", why));
  }

  /// Whether a world newer than `world` (the last one this worker was a
  /// member of) has formed listing another worker among its `holders`:
  /// hvdrun knew that worker to hold the trained state, and the formation
  /// shows it outlived this worker's failed world (State::sync gives the
  /// state to the others), so this one is not needed to keep it. A member
  /// that formed a world but never synced (a newcomer whose world failed
  /// during the sync) is not listed there.
  bool state_held_elsewhere(uint64_t newest) {
    for (uint64_t v = world.version + 1; v <= newest; ++v) {
      if (formed_without_holder.count(v)) continue;
      auto text = store->try_get(selastic::world_key(v));
      if (!text || !store->try_get(selastic::formed_key(v))) continue;
      const selastic::World later = selastic::decode_world(text_of(*text));
      for (const auto& id : later.holders) {
        if (id != options.worker_id) return true;
      }
      formed_without_holder.insert(v);
    }
    return false;
  }

  /// World `w` (the newest) does not list this worker, which has been a
  /// member. It leaves (left_key, WorkerRemovedError) -- unless its world
  /// failed while it was draining (`stranded`: a peer died before the commit
  /// it was training to), it has synced (it may hold the trained state) and
  /// no other holder of the state is known to be in a formed world yet:
  /// then it may be the last one, and hvdrun calls it back as a member when
  /// nobody else holds the state. It then waits (one slice; returns) for a
  /// newer world, and leaves once a formed world lists another holder
  /// (state_held_elsewhere), once `w` no longer lists it as draining, or at
  /// `deadline`.
  void wait_or_leave(const selastic::World& w, Clock::time_point deadline) {
    const bool drains = std::find(w.draining.begin(), w.draining.end(), options.worker_id) != w.draining.end();
    if (!stranded || !drains || !synced_ever) leave(w, w.reason);
    if (state_held_elsewhere(w.version)) {
      spdlog::info("{}: a world newer than world {} formed with another holder of the trained state; it leaves",
                   tag(), world.version);
      leave(w, w.reason);
    }
    if (!stranded_said) {
      stranded_said = true;
      spdlog::info("{}: world {} failed while this worker was draining; it waits to leave until another holder of "
                   "the trained state is in a formed world, in case hvdrun calls it back",
                   tag(), world.version);
    }
    try {
      store->wait({selastic::world_key(w.version + 1)}, std::min(options.watch_slice, remaining(deadline)));
    } catch (const TimeoutError&) {
    }
    if (Clock::now() >= deadline) {
      leave(w, fmt::format("no other holder of the trained state formed a world within HOROVOD_ELASTIC_TIMEOUT ({} s)",
                           options.timeout.count() / 1000.0));
    }
  }

  /// Joins the newest world with a version >= `wanted` that lists us.
  void join_from(uint64_t wanted) {
    const auto deadline = Clock::now() + options.timeout;
    const auto started = Clock::now();
    for (;;) {
      if (Clock::now() >= deadline) {
        throw TimeoutError(
            fmt::format("elastic: {} was not admitted to a world (version >= {}) within HOROVOD_ELASTIC_TIMEOUT ({} s)",
                        tag(), wanted, options.timeout.count() / 1000.0));
      }
      const uint64_t candidate = std::max(wanted, latest_version(*store));
      selastic::World w;
      try {
        w = selastic::decode_world(text_of(store->get(selastic::world_key(candidate), remaining(deadline))));
      } catch (const TimeoutError&) {
        continue;  // the deadline check above reports it
      }
      if (w.final) {
        throw WorkerRemovedError(fmt::format("elastic: {}: the job is ending (world {} is final{}{})", tag(), w.version,
                                             w.reason.empty() ? "" : ": ", w.reason));
      }
      const selastic::Member* me = w.find(options.worker_id);
      if (!me) {
        if (ever_member) {
          wait_or_leave(w, deadline);  // returns only to look again
          wanted = candidate;
          continue;
        }
        wanted = candidate + 1;  // not admitted yet
        continue;
      }
      if (w.hold) {  // never formed: wait for the next world, keeping the live state
        spdlog::info("{}: world {} holds ({}); waiting for the next one", tag(), w.version,
                     w.reason.empty() ? "no reason given" : w.reason);
        wanted = candidate + 1;
        continue;
      }
      if (store->try_get(selastic::world_key(candidate + 1))) {
        wanted = candidate + 1;  // already superseded
        continue;
      }
      retarget(w);
      const selastic::Member mine = *me;
      switch (rendezvous(w, mine, deadline)) {
        case Rendezvous::Formed: {
          ever_member = true;
          stranded = false;
          stranded_said = false;
          formed_without_holder.clear();
          std::lock_guard<std::mutex> lock(watch->mu);
          watch->context = context;
          // Ended while its communicator formed (the forming failure came too late).
          if (watch->departed) context->abort(watch->departed_why);
          spdlog::info("{}: joined world {} as rank {} of {} in {:.3f} s", tag(), w.version, mine.rank, w.size(),
                       std::chrono::duration<double>(Clock::now() - started).count());
          return;
        }
        case Rendezvous::Abandoned:
          spdlog::info("{}: world {} superseded while forming; moving on", tag(), w.version);
          wanted = candidate + 1;
          break;
        case Rendezvous::Failed: wanted = candidate + 1; break;
      }
    }
  }
};

ElasticMember::ElasticMember(MemberOptions options) : impl_(std::make_unique<Impl>()) {
  if (options.worker_id.empty()) throw InvalidArgument("elastic: worker id is empty (HVDRUN_WORKER_ID)");
  if (!options.open_store) throw InvalidArgument("elastic: MemberOptions::open_store is not set");
  if (options.timeout.count() <= 0) throw InvalidArgument("elastic: HOROVOD_ELASTIC_TIMEOUT must be positive");
  if (options.barrier_slice.count() <= 0) options.barrier_slice = std::chrono::milliseconds(100);
  if (options.watch_slice.count() <= 0) options.watch_slice = std::chrono::milliseconds(250);
  impl_->options = std::move(options);
  impl_->watch->worker_id = impl_->options.worker_id;
}

ElasticMember::~ElasticMember() {
  try {
    close();
  } catch (...) {
  }
}

void ElasticMember::join() {
  Impl& d = *impl_;
  if (d.closed) throw collective::ShutdownError(fmt::format("elastic: {} was closed", d.tag()));
  if (d.ever_member) return;
  if (!d.store) {
    d.store = d.options.open_store();
    if (!d.store) throw InvalidArgument("elastic: open_store returned no store");
    d.store->set_string(selastic::ready_key(d.options.worker_id), d.options.ready_value);
  }
  d.start_watcher();
  d.join_from(1);
}

void ElasticMember::reset() {
  Impl& d = *impl_;
  if (d.closed) throw collective::ShutdownError(fmt::format("elastic: {} was closed", d.tag()));
  if (!d.ever_member) {
    join();
    return;
  }
  {
    std::lock_guard<std::mutex> lock(d.mu);
    d.stranded = d.context && d.context->failed();
  }
  d.shutdown_context();
  if (!d.newer_seen()) {
    // No newer world: the communicator failed (or the program asked for a
    // reset) while the membership did not change. Say why, as the ranks
    // agreed on it, else what this member knows.
    std::string why = "reset() called with no newer world";
    try {
      if (auto first = d.store->try_get(selastic::failure_key(d.world.version))) {
        why = "the communicator failed: " + text_of(*first);
      }
    } catch (const std::exception&) {
    }
    d.ask_to_reform(d.world.version, why);
  }
  d.join_from(d.world.version + 1);
}

void ElasticMember::close() {
  Impl& d = *impl_;
  if (d.closed) return;
  d.closed = true;
  d.stop_watcher();
  d.shutdown_context();
}

collective::Context& ElasticMember::context() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  if (!impl_->context) {
    throw collective::NotInitializedError(
        fmt::format("elastic: {} has not joined a world yet", impl_->options.worker_id));
  }
  return *impl_->context;
}

std::shared_ptr<collective::Context> ElasticMember::shared_context() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->context;
}

bool ElasticMember::hosts_updated() const {
  std::lock_guard<std::mutex> lock(impl_->watch->mu);
  return impl_->watch->newer && !impl_->watch->newer_final && impl_->ever_member;
}

uint64_t ElasticMember::version() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->world.version;
}

store::elastic::World ElasticMember::world() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->world;
}

const std::string& ElasticMember::worker_id() const { return impl_->options.worker_id; }

void ElasticMember::synced() {
  Impl& d = *impl_;
  d.synced_ever = true;
  const uint64_t v = version();
  if (v == 0 || d.closed) return;
  try {
    d.store->set_string(selastic::synced_key(d.options.worker_id), std::to_string(v));
  } catch (const std::exception& e) {
    // hvdrun then counts this worker as not holding the state: it keeps a
    // holder longer than needed, never too short.
    spdlog::debug("{}: could not tell hvdrun that it synced in world {}: {}", d.tag(), v, e.what());
  }
}

MemberOptions member_options_from_env() {
  MemberOptions o;
  auto id = env::get(job_env::kWorkerId);
  if (!id || id->empty()) {
    throw InvalidArgument(
        "HOROVOD_ELASTIC=1 but HVDRUN_WORKER_ID is not set: elastic workers must be started by hvdrun "
        "--host-discovery-script");
  }
  o.worker_id = *id;
  o.settings = collective::settings_from_env();
  if (!env::get(job_env::kRendezvousAddr)) {
    throw InvalidArgument("HOROVOD_ELASTIC=1 but HOROVOD_GLOO_RENDEZVOUS_ADDR is not set: start the job with hvdrun");
  }
  double seconds = env::get_double_or(job_env::kElasticTimeout, 600);
  if (!std::isfinite(seconds) || seconds <= 0 || seconds > 1e7) {
    throw InvalidArgument(fmt::format("{}={} must be a positive number of seconds", job_env::kElasticTimeout, seconds));
  }
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(std::llround(seconds * 1000.0)));
  const auto connect_timeout = o.settings.start_timeout;
  o.open_store = [connect_timeout]() -> std::shared_ptr<store::Store> {
    return std::shared_ptr<store::Store>(store::make_store_from_env(connect_timeout));
  };
  o.ready_value = fmt::format("{} {}", o.settings.hostname, ::getpid());
  return o;
}

}  // namespace hvd::elastic
