// ElasticDriver: the elastic job's decisions as a pure state machine (see
// elastic_driver.h for the rules). No clock, no threads, no I/O: every
// event carries its own `now`, every decision comes out as an action.
//
// Choices the header leaves open, made here:
//  * The first world waits until every started worker is ready (and at
//    least min_np are): a job coming up does not burn resets while its
//    first workers report one by one. Later admissions are batched by
//    admit_delay (or immediate when every started worker is ready).
//  * A removal (failure, host gone, blacklist) publishes at once; workers
//    already ready and waiting are admitted in that same world.
//  * World::final is never set: the runner ends the job (it stops the
//    workers after Finish), members never need to be told. A final world
//    would also make every member waiting in reset() throw
//    WorkerRemovedError, so a member whose peer exited 0 mid-training (a
//    crash that exits 0) would end quietly too and the job would report a
//    success; without one it waits, is named after finish_grace, and the
//    job fails.
//  * A newcomer admitted to a world that never formed, when the job starts
//    finishing, is stopped instead of waited for: the members that are done
//    will never arrive at its barrier, so waiting would only turn a
//    finished training into a grace timeout (kElastic). Formation comes
//    from the store (on_world_formed), never from timing guesses.
//  * A lost worker's host backs off (unreachable_backoff, doubled per
//    consecutive loss) instead of counting a failure: one loss episode
//    (several slots lost at once) counts once. Its restart waits for the
//    back-off or for the host to come back, whichever is first.
//  * cooldown_min == cooldown_max == 0 means "blacklisted until the end of
//    the job" (horovodrun's default). blacklist_failures <= 0 disables
//    blacklisting.
//  * A worker that exits 0 before it was ever admitted, in a running job,
//    counts as a failure (its slot is restarted); during initial formation
//    it starts the ending like a member would.
//  * Ready timeout during initial formation ends the job (exit_code::kLaunch,
//    like static mode's start timeout) unless the other usable hosts still
//    offer -np slots; otherwise (and later) it counts as a failure of the
//    worker's host and the worker is stopped (its slot is restarted once it
//    has exited).
//  * Grace expiry with no failed member ends the job with kElastic.
//  * A worker lost during initial formation before it was ready (host
//    unreachable, SSH refused) ends the job with kLaunch, like static mode,
//    unless the other usable hosts still offer -np slots: then it counts as
//    a failure of its host (restart or blacklist) and workers restarted on
//    a host with recent failures do not hold back the first world (they
//    join it later, as a scale-up).
#include "hvd/launcher/elastic/elastic_driver.h"

#include "hvd/launcher/options/options.h"
#include "hvd/launcher/plan/placement.h"
#include "hvd/launcher/process/status.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <limits>

namespace hvd::launcher {

namespace {

namespace se = store::elastic;
using std::chrono::milliseconds;

std::string seconds_text(milliseconds d) {
  if (d.count() % 1000 == 0) return fmt::format("{} s", d.count() / 1000);
  return fmt::format("{:g} s", static_cast<double>(d.count()) / 1000.0);
}

std::string plural(std::size_t n, const char* word) { return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s"); }

/// Discovered hosts as "a:2 b:1", at most 8 of them.
std::string hosts_text(const std::vector<HostSpec>& hosts) {
  if (hosts.empty()) return "none";
  std::string out;
  std::size_t shown = std::min<std::size_t>(hosts.size(), 8);
  for (std::size_t i = 0; i < shown; ++i) {
    if (i) out += ' ';
    out += format_host(hosts[i]);
  }
  if (shown < hosts.size()) out += fmt::format(" (+{} more)", hosts.size() - shown);
  return out;
}

constexpr std::size_t kMaxLoggedDiscoveryReasons = 64;
/// How long a host with a record (health, incarnation) may be unlisted by
/// discovery before the record is dropped (at least the failure window).
constexpr std::chrono::milliseconds kForgetAbsentAfter{60000};

ElasticAction action(ElasticAction::Kind kind) {
  ElasticAction a;
  a.kind = kind;
  return a;
}

}  // namespace

struct ElasticDriver::Impl {
  struct Worker {
    uint64_t serial = 0;
    std::string id;
    std::string host;
    int slot = 0;
    ElasticTime started{};
    bool ready = false;
    /// Stop was sent; its exit is expected and not a failure.
    bool stopping = false;
    /// Its host was dropped: out of the world, training on to its next
    /// commit, where it leaves. Its exit is expected and not a failure.
    bool draining = false;
    ElasticTime drain_until{};
    /// Its host was dropped, but it is the last worker holding the trained
    /// state that is not leaving: it stays a member until a newcomer
    /// reported its sync in a world with it (on_worker_synced), then drains.
    bool keeper = false;
    ElasticTime keeper_until{};
    /// Called back from draining (recall_drainer).
    bool recalled = false;
    /// Its time as a keeper ran out with no newcomer taking the state over:
    /// it is not called back again (recall_drainer).
    bool keeper_expired = false;
    /// It wrote left_key: it knows it is out of the job.
    bool left = false;
    /// Out of the job's worlds: being stopped or draining.
    bool leaving() const { return stopping || draining; }
    /// Started on a host with failures in the current window: the first
    /// world does not wait for it.
    bool retry = false;
    /// The oldest world whose keys it may still read or write: the newest
    /// world listing it whose barrier completed, else the first world that
    /// listed it; 0 while no world has (oldest_world_in_use).
    uint64_t oldest_world = 0;
  };
  struct Exited {
    int status = 0;
    std::string description;  ///< describe_status or "lost: ..."
    bool ok = false;
    bool lost = false;  ///< no exit status seen (host unreachable, connection dropped)
    /// The job's exit code when this worker is the reason it failed: its
    /// own status, or kLaunch when it was lost (as in static mode).
    int failure_code() const { return lost || status == 0 ? exit_code::kLaunch : status; }
  };
  struct Health {
    std::deque<ElasticTime> failures;
    int times_blacklisted = 0;
    bool blacklisted = false;
    std::optional<ElasticTime> until;  ///< none while blacklisted: until the end of the job
    /// Consecutive lost workers (unreachable host); 0 once it answers again.
    int losses = 0;
    /// Unreachable: no worker is started on it before this.
    std::optional<ElasticTime> retry_at;
  };

  ElasticPolicy policy;
  std::mt19937_64 rng;
  std::vector<ElasticAction> actions;

  bool have_hosts = false;
  std::vector<HostSpec> hosts;
  std::set<std::string> logged_discovery_reasons;
  bool discovery_reasons_capped = false;

  uint64_t next_serial = 1;
  std::map<uint64_t, Worker> live;  ///< started, not yet exited; by serial (= start order)
  std::map<std::pair<std::string, int>, uint64_t> occupied;  ///< (host, slot) -> serial
  std::map<std::string, std::pair<std::string, int>> placement;  ///< every worker ever: id -> (host, slot)
  std::map<std::string, Exited> exited;
  /// The first worker that failed (exited non-zero or was lost) unasked.
  std::string first_failure;

  std::map<std::string, Health> health;
  /// The last incarnation discovery reported for each host (when it does).
  std::map<std::string, std::string> incarnations;
  /// Since when each host with a record above has not been listed.
  std::map<std::string, ElasticTime> absent_since;

  bool started = false;  ///< the initial start happened (start_np slots were offered)
  int last_waiting_slots = -1;
  se::World world;
  int resets = 0;
  std::vector<std::string> pending_reasons;
  std::optional<ElasticTime> admit_at;
  std::optional<ElasticTime> below_since;
  ElasticTime world_published{};
  /// Members of the newest world that asked to re-form it, and why (the
  /// first reason heard); reform_at: when the same members are published
  /// again (set once every live member asked).
  std::set<std::string> reform_asked;
  std::string reform_why;
  std::optional<ElasticTime> reform_at;
  /// Consecutive worlds that failed within failed_world_stable.
  int quick_failures = 0;

  bool finishing = false;
  std::string finishing_trigger;  ///< "w3 (node1 slot 0)"
  ElasticTime grace_deadline{};
  std::vector<std::string> finishing_members;  ///< ids, in rank order
  std::vector<std::string> finishing_failures;  ///< ids, in exit order

  /// Published worlds of more than one member whose arrival barrier has not
  /// been reported complete: version -> member ids.
  std::map<uint64_t, std::vector<std::string>> unformed;
  /// Workers that were members of a world that formed.
  std::set<std::string> joined_ids;
  bool any_formed = false;
  /// Workers that hold the job's trained state (on_worker_synced).
  std::set<std::string> holders;
  /// Live workers' last reported sync (world version), holders or not.
  std::map<std::string, uint64_t> synced_in;
  /// Published worlds whose sync gives the trained state: they listed a
  /// holder, or no running worker held it. The newest kSyncWorlds only.
  std::map<uint64_t, bool> sync_gives_state;
  static constexpr std::size_t kSyncWorlds = 64;

  bool signalled = false;
  int signal = 0;
  bool finished = false;

  // ---- helpers ----
  void emit(ElasticAction a) { actions.push_back(std::move(a)); }
  void log(std::string m) {
    ElasticAction a = action(ElasticAction::Kind::Log);
    a.message = std::move(m);
    emit(std::move(a));
  }
  void warn(std::string m) {
    ElasticAction a = action(ElasticAction::Kind::Warn);
    a.message = std::move(m);
    emit(std::move(a));
  }

  bool active() const { return !finishing && !signalled && !finished; }

  std::string signal_message() const {
    return fmt::format("received signal {} ({}); stopped every worker", signal, strsignal(signal));
  }

  /// The live worker with this id ("w<serial>"), or null.
  Worker* find(const std::string& id) {
    if (id.size() < 2 || id[0] != 'w' || id.size() > 20) return nullptr;
    uint64_t serial = 0;
    for (std::size_t i = 1; i < id.size(); ++i) {
      if (id[i] < '0' || id[i] > '9') return nullptr;
      serial = serial * 10 + static_cast<uint64_t>(id[i] - '0');
    }
    auto it = live.find(serial);
    return it != live.end() && it->second.id == id ? &it->second : nullptr;
  }

  std::string where(const std::string& id) const {
    auto it = placement.find(id);
    if (it == placement.end()) return id;
    return fmt::format("{} ({} slot {})", id, it->second.first, it->second.second);
  }
  std::string on_host(const Worker& w) const { return fmt::format("{} on {} slot {}", w.id, w.host, w.slot); }

  bool blacklisted(const std::string& host, ElasticTime now) const {
    auto it = health.find(host);
    if (it == health.end() || !it->second.blacklisted) return false;
    return !it->second.until || *it->second.until > now;
  }

  /// Lost recently: its slots wait for the back-off (or for it to come back).
  bool backing_off(const std::string& host, ElasticTime now) const {
    auto it = health.find(host);
    return it != health.end() && it->second.retry_at && *it->second.retry_at > now;
  }

  /// `host` came back (`why`): a fresh host. Without `all` only after a
  /// loss, and an active blacklisting stays; with `all` (a new incarnation:
  /// another pod, or the same pod's restarted container, is not the host
  /// that failed) everything is forgotten.
  void revive(const std::string& host, const std::string& why, bool all) {
    auto it = health.find(host);
    if (it == health.end()) return;
    Health& h = it->second;
    const bool was_blacklisted = h.blacklisted;
    if (!all && h.losses == 0) return;
    if (!all && was_blacklisted) {
      h.losses = 0;
      h.retry_at.reset();
      return;
    }
    const bool news = h.losses > 0 || !h.failures.empty() || was_blacklisted || h.retry_at;
    health.erase(it);
    if (news) {
      log(fmt::format("host {} is back ({}): a fresh host{}", host, why,
                      was_blacklisted ? " (no longer blacklisted)" : ""));
    }
  }

  const HostSpec* listed(const std::string& host) const {
    for (const auto& h : hosts) {
      if (h.name == host) return &h;
    }
    return nullptr;
  }

  int active_count() const {
    int n = 0;
    for (const auto& [s, w] : live) n += w.leaving() ? 0 : 1;
    return n;
  }

  /// Usable slots on listed hosts other than `host`, occupied or not.
  int usable_slots_except(const std::string& host, ElasticTime now) const {
    int n = 0;
    for (const auto& h : hosts) {
      if (h.name != host && !blacklisted(h.name, now)) n += h.slots;
    }
    return n;
  }

  int usable_free_slots(ElasticTime now) const {
    int n = 0;
    for (const auto& h : hosts) {
      if (blacklisted(h.name, now)) continue;
      for (int s = 0; s < h.slots; ++s) n += occupied.count({h.name, s}) ? 0 : 1;
    }
    return n;
  }

  void stop(Worker& w) {
    if (w.stopping) return;
    w.stopping = true;
    if (w.draining) drain_failed(w, "stopped by hvdrun while draining");
    ElasticAction a = action(ElasticAction::Kind::Stop);
    a.worker_id = w.id;
    a.host = w.host;
    a.slot = w.slot;
    emit(std::move(a));
  }

  /// The members of a world that still lists draining `w` must not wait for
  /// it: DrainFailed (the runner writes drain_failed_key).
  void drain_failed(const Worker& w, std::string why) {
    ElasticAction a = action(ElasticAction::Kind::DrainFailed);
    a.worker_id = w.id;
    a.host = w.host;
    a.slot = w.slot;
    a.message = std::move(why);
    emit(std::move(a));
  }

  /// Takes `w` (its host dropped: `why`) out of the worlds: drains it when it
  /// has trained in a formed world and draining is on, else stops it.
  void remove(Worker& w, std::string why, ElasticTime now) {
    pending_reasons.push_back(std::move(why));
    if (policy.drain_timeout.count() > 0 && joined_ids.count(w.id) && world.find(w.id)) {
      w.draining = true;
      w.drain_until = now + policy.drain_timeout;
      return;
    }
    stop(w);
  }

  void stop_all() {
    for (auto& [s, w] : live) stop(w);
  }

  void finish(int code, std::string message) {
    if (finished) return;
    finished = true;
    ElasticAction a = action(ElasticAction::Kind::Finish);
    a.code = code;
    a.message = std::move(message);
    emit(std::move(a));
    stop_all();
  }

  void spawn(const std::string& host, int slot, ElasticTime now) {
    Worker w;
    w.serial = next_serial++;
    w.id = fmt::format("w{}", w.serial);
    w.host = host;
    w.slot = slot;
    w.started = now;
    auto health_it = health.find(host);
    w.retry = health_it != health.end() && (!health_it->second.failures.empty() || health_it->second.losses > 0);
    occupied[{host, slot}] = w.serial;
    placement[w.id] = {host, slot};
    ElasticAction a = action(ElasticAction::Kind::Spawn);
    a.worker_id = w.id;
    a.host = host;
    a.slot = slot;
    emit(std::move(a));
    live.emplace(w.serial, std::move(w));
  }

  /// World members for `workers` listed in rank order (the list's order is
  /// the ranks: rank stability is the caller's), local and cross ranks from
  /// the launcher's one placement rule (plan/placement.h).
  static std::vector<se::Member> members_in_rank_order(const std::vector<const Worker*>& workers) {
    std::vector<std::string> rank_hosts;
    for (const Worker* w : workers) rank_hosts.push_back(w->host);
    const std::vector<SlotAssignment> slots = place_ranks(rank_hosts);
    std::vector<se::Member> members;
    for (std::size_t r = 0; r < workers.size(); ++r) {
      se::Member m;
      m.worker_id = workers[r]->id;
      m.host = slots[r].hostname;
      m.rank = slots[r].rank;
      m.local_rank = slots[r].local_rank;
      m.local_size = slots[r].local_size;
      m.cross_rank = slots[r].cross_rank;
      m.cross_size = slots[r].cross_size;
      members.push_back(std::move(m));
    }
    return members;
  }

  // ---- the rules ----

  /// Brings workers in line with the discovered hosts, then publishes and
  /// updates the elastic-timeout clock. Called after every event.
  void reconcile(ElasticTime now) {
    if (!active()) return;
    recall_drainer(now);
    // Hosts gone or shrunk: drain or stop their (excess) workers, but keep
    // one that holds the trained state when nobody staying does.
    std::vector<std::pair<Worker*, std::string>> gone;
    for (auto& [s, w] : live) {
      if (w.leaving()) continue;
      const HostSpec* h = listed(w.host);
      if (!h) {
        gone.emplace_back(&w, fmt::format("host {} no longer listed by discovery", w.host));
      } else if (w.slot >= h->slots) {
        gone.emplace_back(&w, fmt::format("host {} now offers {}", w.host, plural(h->slots, "slot")));
      } else if (w.keeper) {
        w.keeper = false;  // its host is back: an ordinary member again
        log(fmt::format("{}: its host is listed again; it stays", on_host(w)));
      }
    }
    const Worker* keeper = choose_keeper(gone, now);
    for (auto& [w, why] : gone) {
      if (w == keeper) continue;
      if (w->keeper) {
        w->keeper = false;
        if (w->keeper_until <= now) {
          give_up_state(*w);
          warn(fmt::format("{} kept the job's trained state for --elastic-drain-timeout {} after its host's removal "
                           "and no newcomer took it over; it leaves now, and the workers after it start from their own initial state",
                           on_host(*w), seconds_text(policy.drain_timeout)));
        } else {
          log(fmt::format("{} handed the job's state over to the workers that stay; it leaves", on_host(*w)));
        }
      }
      remove(*w, std::move(why), now);
    }
    if (!started) {
      int free = usable_free_slots(now);
      if (free < policy.start_np) {
        if (free != last_waiting_slots) {
          last_waiting_slots = free;
          log(fmt::format("waiting for {} usable slots to start (-np); discovery offers {}", policy.start_np, free));
        }
      } else {
        started = true;
        log(fmt::format("starting {} (discovery offers {}; -np {}, max-np {})",
                        plural(static_cast<std::size_t>(std::min(free, policy.max_np)), "worker"),
                        plural(static_cast<std::size_t>(free), "usable slot"), policy.start_np,
                        policy.max_np >= (1 << 20) ? std::string("unlimited") : std::to_string(policy.max_np)));
      }
    }
    if (started) fill(now);
    dedupe_reasons();
    maybe_publish(now);
    publish_hold_if_draining(now);
    update_below_min(now);
    end_if_nothing_can_run(now);
  }

  /// Workers whose host was dropped (`gone`) normally drain or stop. When
  /// none of the workers that stay holds the trained state (`holders`) but
  /// one of the dropped ones does, the job's committed state lives only in
  /// dropped workers: letting them all go would start the next world from
  /// the newcomers' initial state. One of them -- the keeper, the one with
  /// the lowest rank in the current world -- then stays a member until a
  /// newcomer synced in a world with it (State::sync gives the newcomers the
  /// state of the member with the most commits), or for at most
  /// --elastic-drain-timeout; then it drains as the others did. Returns the
  /// keeper, or nullptr.
  Worker* choose_keeper(const std::vector<std::pair<Worker*, std::string>>& gone, ElasticTime now) {
    if (gone.empty() || policy.drain_timeout.count() == 0) return nullptr;
    auto is_gone = [&](const Worker& w) {
      return std::any_of(gone.begin(), gone.end(), [&](const auto& g) { return g.first == &w; });
    };
    for (const auto& [s, w] : live) {
      if (!w.leaving() && !is_gone(w) && holders.count(w.id)) return nullptr;  // someone staying has it
    }
    Worker* best = nullptr;
    for (const auto& [w, why] : gone) {
      if (w->keeper) return w->keeper_until > now ? w : nullptr;  // one keeper, once
    }
    int best_rank = std::numeric_limits<int>::max();
    for (const auto& [w, why] : gone) {
      const se::Member* m = world.find(w->id);
      if (!m || !holders.count(w->id) || m->rank >= best_rank) continue;
      best = w;
      best_rank = m->rank;
    }
    if (!best) return nullptr;
    best->keeper = true;
    best->keeper_until = now + policy.drain_timeout;
    pending_reasons.push_back(gone.front().second);
    log(fmt::format("{} keeps training although {}: no worker staying holds the job's trained state; it stays "
                    "until a newcomer has it (at most --elastic-drain-timeout {})",
                    on_host(*best), gone.front().second, seconds_text(policy.drain_timeout)));
    return best;
  }

  /// A worker draining from a dropped host still holds the trained state
  /// (it trains on to its next commit, or, when its world failed before
  /// that commit, waits -- the library's ElasticMember::wait_or_leave). When
  /// nobody that is not leaving holds the state any more -- the last
  /// trained worker that stayed failed or was stopped before any newcomer
  /// synced from it -- letting the drainers go would start the next world
  /// from the newcomers' initial state. The draining worker started first
  /// is then called back: a keeper (choose_keeper), a member of the next
  /// worlds until a newcomer synced from it, for at most
  /// --elastic-drain-timeout. If it left before it saw that world, its exit
  /// is a departure, not the job's end (on_worker_exit).
  void recall_drainer(ElasticTime now) {
    if (policy.drain_timeout.count() == 0 || world.version == 0) return;
    Worker* best = nullptr;
    for (auto& [s, w] : live) {
      if (!w.leaving() && holders.count(w.id)) return;  // someone not leaving holds it (a keeper too)
      if (!best && w.draining && !w.stopping && !w.left && !w.keeper_expired && holders.count(w.id)) best = &w;
    }
    if (!best) return;
    best->draining = false;
    best->recalled = true;
    best->keeper = true;
    best->keeper_until = now + policy.drain_timeout;
    pending_reasons.push_back(fmt::format("{} called back", on_host(*best)));
    log(fmt::format("{} is called back from draining: no other worker holds the job's trained state any more; it "
                    "stays until a newcomer has it (at most --elastic-drain-timeout {})",
                    on_host(*best), seconds_text(policy.drain_timeout)));
  }

  /// Horovod's rule: once every host is blacklisted the job fails. Here:
  /// no worker is left (none running, starting or being stopped) and every
  /// host discovery lists is blacklisted until the end of the job -- no
  /// cooldown will bring one back, so waiting out --elastic-timeout would
  /// only delay the same failure. A host still cooling down or backing off,
  /// or an empty discovery, keeps the job waiting as before.
  void end_if_nothing_can_run(ElasticTime now) {
    if (!active() || !started || !live.empty() || hosts.empty() || first_failure.empty()) return;
    std::string names;
    for (const auto& h : hosts) {
      auto it = health.find(h.name);
      if (!blacklisted(h.name, now) || it->second.until) return;
      names += (names.empty() ? "" : ", ") + h.name;
    }
    const Exited& first = exited.at(first_failure);
    finish(first.failure_code(),
           fmt::format("every host discovery lists is blacklisted until the end of the job ({}) and no worker is "
                       "left; first failure: {} {}",
                       names, where(first_failure), first.description));
  }

  void dedupe_reasons() {
    std::vector<std::string> out;
    for (auto& r : pending_reasons) {
      if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(std::move(r));
    }
    pending_reasons.swap(out);
  }

  /// Starts workers on free usable slots, hosts in discovery order, up to max_np.
  void fill(ElasticTime now) {
    const std::size_t first_new = actions.size();
    int count = active_count();
    // A keeper alone never keeps its successor out (a world of max_np + 1
    // for one commit interval, with --max-np 1).
    if (count >= policy.max_np && count == 1 && std::any_of(live.begin(), live.end(), [](const auto& kv) {
          return kv.second.keeper && !kv.second.leaving();
        })) {
      count = policy.max_np - 1;
    }
    for (const auto& h : hosts) {
      if (count >= policy.max_np) break;
      if (blacklisted(h.name, now) || backing_off(h.name, now)) continue;
      for (int s = 0; s < h.slots && count < policy.max_np; ++s) {
        if (occupied.count({h.name, s})) continue;
        spawn(h.name, s, now);
        ++count;
      }
    }
    if (actions.size() > first_new) plan_spawned_ranks(first_new);
  }

  /// Fills ElasticAction::planned of the Spawn actions from `first` on: the
  /// world the new workers are started for is the current world's live
  /// members in rank order, then every live worker not in it, in start order.
  void plan_spawned_ranks(std::size_t first) {
    std::vector<const Worker*> order;
    std::set<std::string> in_world;
    for (const auto& m : world.members) {
      in_world.insert(m.worker_id);
      const Worker* w = find(m.worker_id);
      if (w && !w->leaving()) order.push_back(w);
    }
    for (const auto& [serial, w] : live) {
      if (!w.leaving() && !in_world.count(w.id)) order.push_back(&w);
    }
    const std::vector<se::Member> planned = members_in_rank_order(order);
    for (std::size_t i = first; i < actions.size(); ++i) {
      ElasticAction& a = actions[i];
      if (a.kind != ElasticAction::Kind::Spawn) continue;
      for (const auto& m : planned) {
        if (m.worker_id != a.worker_id) continue;
        a.planned = SlotAssignment{m.host, m.rank, m.local_rank, m.local_size, m.cross_rank, m.cross_size};
        a.planned_size = static_cast<int>(planned.size());
      }
    }
  }

  void update_below_min(ElasticTime now) {
    if (!active()) {
      below_since.reset();
      return;
    }
    bool deficit = !started || active_count() < policy.min_np;
    if (deficit && !below_since) below_since = now;
    if (!deficit) below_since.reset();
  }

  /// Publishes the next world when the rules say so.
  void maybe_publish(ElasticTime now) {
    if (!active()) return;
    std::vector<const Worker*> survivors;
    bool removals = false;
    for (const auto& m : world.members) {
      const Worker* w = find(m.worker_id);
      if (w && !w->leaving()) {
        survivors.push_back(w);
      } else {
        removals = true;
      }
    }
    std::set<std::string> in_world;
    for (const auto& m : world.members) in_world.insert(m.worker_id);
    std::vector<const Worker*> newcomers;
    bool all_ready = true;
    for (const auto& [s, w] : live) {
      if (w.leaving()) continue;
      if (!w.ready) {
        if (!(world.version == 0 && w.retry)) all_ready = false;
        continue;
      }
      if (!in_world.count(w.id)) newcomers.push_back(&w);
    }
    const bool reform_due = reform_at && *reform_at <= now;
    if (world.version == 0) {
      if (!started || !all_ready || newcomers.empty()) return;
    } else if (!removals && !reform_due) {
      if (newcomers.empty()) return;
      if (!all_ready && !(admit_at && *admit_at <= now)) return;
    }
    int size = static_cast<int>(survivors.size() + newcomers.size());
    if (size < policy.min_np) return;  // members wait in reset(); the elastic-timeout clock runs
    if (world.version >= 1 && policy.reset_limit && resets + 1 > *policy.reset_limit) {
      finish(exit_code::kElastic,
             fmt::format("the job needed a {} re-formation ({}), more than --reset-limit {} allows",
                         ordinal(resets + 1), reason_text(!newcomers.empty()), *policy.reset_limit));
      return;
    }

    std::vector<const Worker*> in_rank_order = survivors;
    in_rank_order.insert(in_rank_order.end(), newcomers.begin(), newcomers.end());
    se::World next = next_world(in_rank_order, reason_text(!newcomers.empty()));
    if (next.version > 1) ++resets;

    std::string joined;
    for (const Worker* w : newcomers) joined += (joined.empty() ? "" : ", ") + where(w->id);
    log(fmt::format("world {}: size {} -> {}, joined {}; left: {}; reason: {}", next.version, world.size(), next.size(),
                    joined.empty() ? "-" : joined, left_text(next), next.reason));
    std::vector<std::string> member_ids;
    for (const auto& m : next.members) member_ids.push_back(m.worker_id);
    if (next.size() == 1) {
      formed(next.version, member_ids, /*arrived=*/false);  // no barrier to wait for
    } else {
      unformed[next.version] = std::move(member_ids);
    }
    admit_at.reset();
    publish(std::move(next), now);
  }

  /// The world after the current one: `members` in rank order, every live
  /// draining worker listed as such.
  se::World next_world(const std::vector<const Worker*>& members, std::string reason) const {
    se::World next;
    next.version = world.version + 1;
    next.members = members_in_rank_order(members);
    next.reason = std::move(reason);
    for (const auto& [s, w] : live) {
      if (w.draining && !w.stopping) next.draining.push_back(w.id);
    }
    return next;
  }

  /// The current world's members that `next` does not list, for the log.
  std::string left_text(const se::World& next) const {
    std::string left;
    for (const auto& m : world.members) {
      if (next.find(m.worker_id)) continue;
      const bool drains = std::find(next.draining.begin(), next.draining.end(), m.worker_id) != next.draining.end();
      left += (left.empty() ? "" : ", ") + where(m.worker_id) + (drains ? " (draining)" : "");
    }
    return left.empty() ? "-" : left;
  }

  /// `id` exited: it holds nothing any more. When it was the last running
  /// holder, the job's state is now whatever the workers that synced since
  /// trained (a world published while no holder ran, e.g. after a keeper's
  /// time ran out): they become the holders, so a keeper or a call-back
  /// protects that progress too. A worker that never synced is not one.
  void lose_holder(const std::string& id) {
    synced_in.erase(id);
    if (!holders.erase(id)) return;
    for (const auto& [s, w] : live) {
      if (holders.count(w.id)) return;
    }
    for (const auto& [s, w] : live) {
      if (!w.stopping && synced_in.count(w.id)) holders.insert(w.id);
    }
  }

  /// `keeper`'s --elastic-drain-timeout ran out with no newcomer taking the
  /// state over: the job lets that state go. The keeper and the other
  /// drainers holding it (the same state) are holders no more and are never
  /// called back, so no worker of a removed host is held longer than the
  /// timeout; the next world's sync (no holder runs) starts the state anew.
  void give_up_state(Worker& keeper) {
    std::vector<std::string> stale{keeper.id};
    for (auto& [s, w] : live) {
      if (&w != &keeper && w.draining && holders.count(w.id)) stale.push_back(w.id);
    }
    for (const auto& id : stale) {
      find(id)->keeper_expired = true;
      lose_holder(id);
    }
  }

  /// Makes `next` the current world and tells the runner to write it.
  void publish(se::World next, ElasticTime now) {
    world = std::move(next);
    bool held = false;  // by a running worker, member or not
    for (const auto& m : world.members) {
      Worker* w = find(m.worker_id);
      if (w && w->oldest_world == 0) w->oldest_world = world.version;
      if (w && holders.count(w->id)) world.holders.push_back(w->id);
    }
    for (const auto& [s, w] : live) held = held || holders.count(w.id) > 0;
    if (!world.hold) {
      sync_gives_state[world.version] = !world.holders.empty() || !held;
      while (sync_gives_state.size() > kSyncWorlds) sync_gives_state.erase(sync_gives_state.begin());
    }
    pending_reasons.clear();
    reform_asked.clear();
    reform_why.clear();
    reform_at.reset();
    world_published = now;
    ElasticAction a = action(ElasticAction::Kind::Publish);
    a.world = world;
    emit(std::move(a));
    forget_departed();
  }

  /// Workers drain but no world could be published without them (fewer
  /// than min_np would remain): publish a world that holds -- the members
  /// without them, never formed -- so everyone raises HostsUpdatedInterrupt
  /// at the next commit, the drained workers leave, and the others wait in
  /// reset() with their live state for the next world (Horovod's members
  /// wait in its rendezvous the same way). The elastic-timeout clock runs.
  void publish_hold_if_draining(ElasticTime now) {
    if (!active() || world.version == 0) return;
    bool drains = false;
    for (const auto& [s, w] : live) drains = drains || (w.draining && !w.stopping && world.find(w.id));
    if (!drains) return;
    std::vector<const Worker*> staying;
    for (const auto& m : world.members) {
      const Worker* w = find(m.worker_id);
      if (w && !w->leaving()) staying.push_back(w);
    }
    se::World next = next_world(
        staying, reason_text(false) + fmt::format("; fewer than --min-np {} remain: holding", policy.min_np));
    next.hold = true;
    log(fmt::format("world {} holds: size {} -> {}, below --min-np {}; left: {}; the others wait for a world of {} "
                    "(reason: {})",
                    next.version, world.size(), next.size(), policy.min_np, left_text(next), policy.min_np,
                    next.reason));
    publish(std::move(next), now);
  }

  /// Once every live member of the newest world asked to re-form it,
  /// schedules the same members again (maybe_publish), at once or after
  /// the back-off for repeated quick failures.
  void check_reform(ElasticTime now) {
    if (reform_at || world.version == 0) return;
    for (const auto& m : world.members) {
      const Worker* w = find(m.worker_id);
      // A member gone or being removed explains the failure: the world is
      // replaced without it as soon as --min-np allows (maybe_publish).
      if (!w || w->leaving()) return;
      if (!reform_asked.count(m.worker_id)) return;  // still training, or not yet told
    }
    if (now - world_published >= policy.failed_world_stable) quick_failures = 0;
    milliseconds wait{0};
    if (quick_failures > 0) {
      wait = policy.failed_world_backoff * (int64_t{1} << std::min(quick_failures - 1, 16));
      wait = std::min(wait, std::max(policy.failed_world_backoff_max, policy.failed_world_backoff));
    }
    ++quick_failures;
    reform_at = now + wait;
    constexpr std::size_t kMaxWhy = 300;
    std::string why = reform_why.size() > kMaxWhy ? reform_why.substr(0, kMaxWhy) + "..." : reform_why;
    pending_reasons.push_back(fmt::format("world {} failed: {}", world.version, why));
    warn(fmt::format("world {} failed with every member alive ({}); re-forming the same {} {}", world.version, why,
                     plural(world.members.size(), "member"),
                     wait.count() == 0 ? std::string("now")
                                       : fmt::format("in {} ({} quick failures in a row)", seconds_text(wait),
                                                     quick_failures)));
  }

  /// Drops what is kept of exited workers that no rule can ask about any
  /// more (not in the newest world, not the job's first failure), so that
  /// a job re-forming for a week keeps a driver of constant size; their
  /// names in later messages fall back to their ids.
  void forget_departed() {
    auto needed = [&](const std::string& id) {
      return find(id) || world.find(id) || id == first_failure ||
             std::find(world.draining.begin(), world.draining.end(), id) != world.draining.end() ||
             std::find(finishing_members.begin(), finishing_members.end(), id) != finishing_members.end();
    };
    for (auto it = exited.begin(); it != exited.end();) {
      if (needed(it->first)) {
        ++it;
        continue;
      }
      placement.erase(it->first);
      joined_ids.erase(it->first);
      it = exited.erase(it);
    }
  }

  /// Drops what is kept about hosts discovery no longer lists, so that a
  /// job whose hosts come and go under fresh names (a Deployment's pods)
  /// keeps a bounded record. A host's health record and its last
  /// incarnation go once it has been unlisted for kForgetAbsentAfter (at
  /// least the failure window: its failures are out of it by then), no
  /// worker runs there, and it was never blacklisted (a blacklisting lasts,
  /// and doubles the next cooldown, when the name comes back). A host that
  /// comes back before that is still reported back ("host b is back ...",
  /// "replaced or restarted") and keeps its failures.
  void forget_absent_hosts(ElasticTime now) {
    const auto keep_for = std::max(policy.failure_window, kForgetAbsentAfter);
    std::set<std::string> busy;
    for (const auto& [s, w] : live) busy.insert(w.host);
    std::set<std::string> recorded;
    for (const auto& [name, h] : health) recorded.insert(name);
    for (const auto& [name, inc] : incarnations) recorded.insert(name);
    for (auto it = absent_since.begin(); it != absent_since.end();) {
      it = recorded.count(it->first) && !listed(it->first) ? std::next(it) : absent_since.erase(it);
    }
    for (const auto& name : recorded) {
      if (!listed(name)) absent_since.emplace(name, now);
    }
    auto forgettable = [&](const std::string& host) {
      auto a = absent_since.find(host);
      return a != absent_since.end() && !busy.count(host) && a->second + keep_for <= now;
    };
    for (auto it = health.begin(); it != health.end();) {
      const Health& h = it->second;
      it = forgettable(it->first) && !h.blacklisted && h.times_blacklisted == 0 ? health.erase(it) : std::next(it);
    }
    for (auto it = incarnations.begin(); it != incarnations.end();) {
      it = forgettable(it->first) && !health.count(it->first) ? incarnations.erase(it) : std::next(it);
    }
    for (auto it = absent_since.begin(); it != absent_since.end();) {
      it = health.count(it->first) || incarnations.count(it->first) ? std::next(it) : absent_since.erase(it);
    }
  }

  /// World `version` with these members formed: they all joined, and no
  /// older world can matter any more. `arrived`: its barrier completed, so
  /// its members have left every older world; a world of one member (no
  /// barrier, formed when published) says nothing of where its member is --
  /// it may still be cancelling an older world's barrier, writing there.
  void formed(uint64_t version, const std::vector<std::string>& member_ids, bool arrived = true) {
    joined_ids.insert(member_ids.begin(), member_ids.end());
    for (const auto& id : member_ids) {
      Worker* w = find(id);
      if (w && arrived) w->oldest_world = std::max(w->oldest_world, version);
    }
    any_formed = true;
    unformed.erase(unformed.begin(), unformed.upper_bound(version));
  }

  static std::string ordinal(int n) {
    const char* suffix = "th";
    if (n % 100 < 11 || n % 100 > 13) {
      if (n % 10 == 1) suffix = "st";
      if (n % 10 == 2) suffix = "nd";
      if (n % 10 == 3) suffix = "rd";
    }
    return fmt::format("{}{}", n, suffix);
  }

  std::string reason_text(bool joiners) const {
    if (world.version == 0) return "initial formation";
    if (pending_reasons.empty()) return joiners ? "scale-up" : "re-formation";
    std::string out;
    std::size_t shown = std::min<std::size_t>(pending_reasons.size(), 3);
    for (std::size_t i = 0; i < shown; ++i) out += (i ? "; " : "") + pending_reasons[i];
    if (shown < pending_reasons.size()) out += fmt::format("; and {} more", pending_reasons.size() - shown);
    if (joiners) out += "; scale-up";
    return out;
  }

  /// Counts a failure on `host`. Returns the number of failures within the
  /// window when that reaches the blacklist threshold (the caller then
  /// calls blacklist()), else 0.
  std::size_t count_failure(const std::string& host, ElasticTime now) {
    if (policy.blacklist_failures <= 0 || blacklisted(host, now)) return 0;
    Health& h = health[host];
    h.failures.push_back(now);
    while (!h.failures.empty() && h.failures.front() + policy.failure_window < now) h.failures.pop_front();
    if (static_cast<int>(h.failures.size()) < policy.blacklist_failures) return 0;
    return h.failures.size();
  }

  /// Takes `host` out for a cooldown (doubled per earlier blacklisting, at
  /// most 2^6 times) and stops its workers.
  void blacklist(const std::string& host, std::size_t failures, ElasticTime now) {
    Health& h = health[host];
    h.failures.clear();
    h.blacklisted = true;
    int doublings = std::min(h.times_blacklisted, 6);
    ++h.times_blacklisted;
    std::string how_long;
    if (policy.cooldown_min.count() == 0 && policy.cooldown_max.count() == 0) {
      h.until.reset();
      how_long = "until the end of the job";
    } else {
      auto lo = std::min(policy.cooldown_min, policy.cooldown_max).count();
      auto hi = std::max(policy.cooldown_min, policy.cooldown_max).count();
      std::uniform_int_distribution<int64_t> draw(lo, hi);
      milliseconds cooldown(draw(rng) << doublings);
      h.until = now + cooldown;
      how_long = "for " + seconds_text(cooldown);
    }
    warn(fmt::format("host {} blacklisted {} after {} within {}", host, how_long, plural(failures, "failure"),
                     seconds_text(policy.failure_window)));
    pending_reasons.push_back(fmt::format("host {} blacklisted", host));
    for (auto& [s, w] : live) {
      if (w.host == host) stop(w);
    }
  }

  void start_finishing(const Worker& trigger, ElasticTime now) {
    finishing = true;
    finishing_trigger = where(trigger.id);
    grace_deadline = now + policy.finish_grace;
    admit_at.reset();
    below_since.reset();
    std::string never_joined;
    if (world.version > 0) {
      for (const auto& m : world.members) {
        const Worker* w = find(m.worker_id);
        if (w && w->leaving()) continue;  // the driver removed it; its exit says nothing
        if (any_formed && !joined_ids.count(m.worker_id) && m.worker_id != trigger.id) {
          // Admitted to a world that never formed: still in its join, waiting
          // for members that are done. It trained nothing; stopped below.
          if (w) never_joined += (never_joined.empty() ? "" : ", ") + where(m.worker_id);
          continue;
        }
        finishing_members.push_back(m.worker_id);
      }
    } else {
      finishing_members.push_back(trigger.id);
      for (const auto& [s, w] : live) {
        if (!w.leaving() && w.id != trigger.id) finishing_members.push_back(w.id);
      }
    }
    for (const auto& id : finishing_members) {
      auto it = exited.find(id);
      if (it != exited.end() && !it->second.ok) finishing_failures.push_back(id);
    }
    // Workers not in the ending world have nothing to finish.
    for (auto& [s, w] : live) {
      if (std::find(finishing_members.begin(), finishing_members.end(), w.id) == finishing_members.end()) stop(w);
    }
    std::size_t others = 0;
    for (const auto& id : finishing_members) others += find(id) ? 1 : 0;
    log(fmt::format("{} exited 0: the job is finishing; waiting up to {} for {}{}", finishing_trigger,
                    seconds_text(policy.finish_grace), plural(others, "other member"),
                    never_joined.empty() ? std::string()
                                         : fmt::format("; stopping {}: admitted to world {}, which never formed",
                                                       never_joined, world.version)));
    check_finished();
  }

  std::string failures_text() const {
    std::string out;
    for (const auto& id : finishing_failures) {
      out += (out.empty() ? "" : ", ") + where(id) + " " + exited.at(id).description;
    }
    return out;
  }

  void check_finished() {
    for (const auto& id : finishing_members) {
      if (find(id)) return;  // still running
    }
    if (finishing_failures.empty()) {
      finish(exit_code::kOk, "");
      return;
    }
    const Exited& first = exited.at(finishing_failures.front());
    finish(first.failure_code(),
           fmt::format("{} exited 0 but not every member did: {}", finishing_trigger, failures_text()));
  }

  void grace_expired() {
    std::string stragglers;
    for (const auto& id : finishing_members) {
      if (find(id)) stragglers += (stragglers.empty() ? "" : ", ") + where(id);
    }
    std::string message = fmt::format("{} did not exit within {} after {} exited 0", stragglers,
                                      seconds_text(policy.finish_grace), finishing_trigger);
    int code = exit_code::kElastic;
    if (!finishing_failures.empty()) {
      const Exited& first = exited.at(finishing_failures.front());
      code = first.failure_code();
      message += "; failed: " + failures_text();
    }
    finish(code, message);
  }
};

ElasticDriver::ElasticDriver(ElasticPolicy policy, uint64_t seed) : impl_(std::make_shared<Impl>()) {
  impl_->policy = policy;
  impl_->rng.seed(seed);
}

void ElasticDriver::on_discovery(const DiscoveryResult& result, ElasticTime now) {
  Impl& d = *impl_;
  if (!d.active()) return;
  if (!result.ok()) {
    if (!d.have_hosts) {
      d.finish(exit_code::kLaunch, "cannot start the elastic job: host discovery failed: " + *result.error);
      return;
    }
    if (!d.logged_discovery_reasons.count(*result.error)) {
      if (d.logged_discovery_reasons.size() < kMaxLoggedDiscoveryReasons) {
        d.logged_discovery_reasons.insert(*result.error);
        d.warn(fmt::format("discovery failed (kept previous {}): {}", plural(d.hosts.size(), "host"), *result.error));
      } else if (!d.discovery_reasons_capped) {
        d.discovery_reasons_capped = true;
        d.warn(fmt::format("discovery keeps failing for new reasons; not logging further ones (latest: {})",
                           *result.error));
      }
    }
    d.update_below_min(now);
    return;
  }
  if (!d.have_hosts || result.hosts != d.hosts) {
    d.log(fmt::format("discovery: {} (was {})", hosts_text(result.hosts), d.have_hosts ? hosts_text(d.hosts) : "-"));
  }
  // Hosts that come back are fresh hosts (see the header).
  for (const auto& h : result.hosts) {
    const auto inc = result.incarnations.find(h.name);
    if (inc != result.incarnations.end()) {
      const auto known = d.incarnations.find(h.name);
      if (known != d.incarnations.end() && known->second != inc->second) {
        std::size_t stopped = 0;
        for (auto& [s, w] : d.live) {
          if (w.host != h.name || w.stopping) continue;
          d.stop(w);
          ++stopped;
        }
        if (stopped > 0) {
          d.pending_reasons.push_back(fmt::format("host {} was replaced or restarted", h.name));
          d.log(fmt::format("host {} was replaced or restarted (a new pod or container): stopping its {} there",
                            h.name, plural(stopped, "worker")));
        }
        d.revive(h.name, "a new pod or container", true);
      }
      d.incarnations[h.name] = inc->second;
    }
    if (d.have_hosts && !d.listed(h.name)) d.revive(h.name, "listed by discovery again", false);
  }
  d.have_hosts = true;
  d.hosts = result.hosts;
  d.forget_absent_hosts(now);
  d.reconcile(now);
}

void ElasticDriver::on_worker_ready(const std::string& worker_id, ElasticTime now) {
  Impl& d = *impl_;
  Impl::Worker* w = d.find(worker_id);
  if (!w || w->leaving() || w->ready) return;
  w->ready = true;
  if (!d.active()) return;
  if (auto h = d.health.find(w->host); h != d.health.end() && h->second.losses > 0) {
    d.revive(w->host, "a worker there got ready after a loss", false);
  }
  if (d.world.version > 0 && !d.world.find(worker_id) && !d.admit_at) d.admit_at = now + d.policy.admit_delay;
  d.reconcile(now);
}

void ElasticDriver::on_worker_exit(const std::string& worker_id, int status, const std::string& lost_reason,
                                   ElasticTime now) {
  Impl& d = *impl_;
  Impl::Worker* found = d.find(worker_id);
  if (!found) return;  // unknown or already reported
  Impl::Worker w = *found;
  d.occupied.erase({w.host, w.slot});
  d.live.erase(w.serial);
  d.lose_holder(w.id);
  Impl::Exited e;
  e.status = status;
  e.ok = status == 0 && lost_reason.empty();
  e.lost = !lost_reason.empty();
  e.description = lost_reason.empty() ? describe_status(status, 0) : "lost: " + lost_reason;
  d.exited[w.id] = e;

  if (d.finished) return;
  if (d.signalled) {
    if (d.live.empty()) d.finish(128 + d.signal, d.signal_message());
    return;
  }
  if (d.finishing) {
    if (!e.ok && std::find(d.finishing_members.begin(), d.finishing_members.end(), w.id) != d.finishing_members.end()) {
      d.finishing_failures.push_back(w.id);
    }
    d.check_finished();
    return;
  }
  if (w.stopping) {  // the driver asked for this exit
    d.reconcile(now);
    return;
  }
  if (w.draining) {  // it left at a commit (Horovod's removed worker), or failed doing so
    if (e.ok || w.left) {
      d.log(fmt::format("{} left the job (drained{})", d.on_host(w), e.ok ? "" : "; " + e.description));
    } else {
      d.log(fmt::format("{} {} while draining; the members still with it give up that world", d.on_host(w),
                        e.description));
      d.drain_failed(w, fmt::format("{} {} while draining", d.on_host(w), e.description));
    }
    d.reconcile(now);
    return;
  }
  if (w.recalled && w.left) {
    // Called back from draining (recall_drainer), but it had already left
    // at the world before: a departure, not the job's end.
    d.log(fmt::format("{} had left the job before it was called back ({})", d.on_host(w), e.description));
    d.pending_reasons.push_back(fmt::format("{} left", d.on_host(w)));
    d.reconcile(now);
    return;
  }
  const bool member = d.world.find(w.id) != nullptr;
  if (e.ok && (member || d.world.version == 0)) {
    d.start_finishing(w, now);
    return;
  }
  if (!e.ok && d.first_failure.empty()) d.first_failure = w.id;
  std::string what = e.ok ? std::string("exited 0 before it joined the job") : e.description;
  if (d.world.version == 0 && !w.ready && (!e.lost || d.usable_slots_except(w.host, now) < d.policy.start_np)) {
    int code = e.failure_code();
    d.finish(code, fmt::format("{} failed before the job formed: {}", d.on_host(w), what));
    return;
  }
  std::size_t blacklist_after = 0;
  std::optional<milliseconds> backoff;
  if (e.lost) {
    // Unreachable, not failing: back off, never blacklist (see the header).
    Impl::Health& h = d.health[w.host];
    if (!d.backing_off(w.host, now)) {
      ++h.losses;
      milliseconds wait = d.policy.unreachable_backoff * (int64_t{1} << std::min(h.losses - 1, 16));
      wait = std::min(wait, std::max(d.policy.unreachable_backoff_max, d.policy.unreachable_backoff));
      h.retry_at = now + wait;
    }
    backoff = std::chrono::duration_cast<milliseconds>(*h.retry_at - now);
  } else {
    blacklist_after = d.count_failure(w.host, now);
  }
  std::string next;
  if (blacklist_after > 0 || d.blacklisted(w.host, now)) {
    next = "not restarting it (host blacklisted)";
  } else if (!d.listed(w.host)) {
    next = "not restarting it (host no longer listed)";
  } else if (backoff) {
    next = fmt::format("host unreachable: restarting the slot in {} (at once if the host comes back)",
                       seconds_text(*backoff));
  } else {
    next = "restarting the slot";
  }
  d.warn(fmt::format("{} failed ({}); {}", d.on_host(w), what, next));
  d.pending_reasons.push_back(fmt::format("{} failed", d.on_host(w)));
  if (blacklist_after > 0) d.blacklist(w.host, blacklist_after, now);
  d.reconcile(now);
}

void ElasticDriver::on_signal(int sig, ElasticTime /*now*/) {
  Impl& d = *impl_;
  if (d.signalled || d.finished) {
    d.stop_all();
    return;
  }
  d.signalled = true;
  d.signal = sig;
  d.admit_at.reset();
  d.below_since.reset();
  d.stop_all();
  if (d.live.empty()) d.finish(128 + sig, d.signal_message());
}

void ElasticDriver::on_worker_left(const std::string& worker_id, ElasticTime /*now*/) {
  if (Impl::Worker* w = impl_->find(worker_id)) w->left = true;
}

void ElasticDriver::on_world_formed(uint64_t version, ElasticTime /*now*/) {
  // A keeper hands over once a successor synced (on_worker_synced), not here.
  Impl& d = *impl_;
  auto it = d.unformed.find(version);
  if (it == d.unformed.end()) return;
  const std::vector<std::string> member_ids = it->second;
  d.formed(version, member_ids);
}

void ElasticDriver::on_worker_synced(const std::string& worker_id, uint64_t version, ElasticTime now) {
  Impl& d = *impl_;
  Impl::Worker* w = d.find(worker_id);
  if (!w || w->stopping || d.holders.count(worker_id)) return;
  uint64_t& last = d.synced_in[worker_id];
  last = std::max(last, version);
  auto it = d.sync_gives_state.find(version);
  if (it == d.sync_gives_state.end() || !it->second) return;
  d.holders.insert(worker_id);
  // A keeper's successor now holds the state: the keeper may leave.
  for (const auto& [s, other] : d.live) {
    if (other.keeper && !other.leaving()) {
      d.reconcile(now);
      break;
    }
  }
}

std::vector<std::string> ElasticDriver::workers_not_holding() const {
  std::vector<std::string> out;
  for (const auto& [s, w] : impl_->live) {
    if (!w.stopping && !impl_->holders.count(w.id)) out.push_back(w.id);
  }
  return out;
}

void ElasticDriver::on_reform_request(uint64_t version, const std::string& worker_id, const std::string& why,
                                      ElasticTime now) {
  Impl& d = *impl_;
  if (!d.active() || version != d.world.version || !d.world.find(worker_id)) return;
  const Impl::Worker* w = d.find(worker_id);
  if (!w || w->leaving()) return;
  if (!d.reform_asked.insert(worker_id).second) return;
  if (d.reform_why.empty()) d.reform_why = why.empty() ? fmt::format("{} asked to re-form", worker_id) : why;
  d.check_reform(now);
  d.reconcile(now);
}

void ElasticDriver::tick(ElasticTime now) {
  Impl& d = *impl_;
  if (d.finished || d.signalled) return;

  if (d.finishing) {
    if (now >= d.grace_deadline) d.grace_expired();
    return;
  }

  // Back-offs over: unreachable hosts are tried again (reconcile below).
  for (auto& [host, h] : d.health) {
    if (h.retry_at && *h.retry_at <= now) h.retry_at.reset();
  }
  // Cooldowns over: hosts usable again.
  for (auto& [host, h] : d.health) {
    if (h.blacklisted && h.until && *h.until <= now) {
      h.blacklisted = false;
      h.until.reset();
      d.log(fmt::format("host {} is usable again (blacklist cooldown over)", host));
    }
  }

  // Drained workers that did not leave in time.
  for (auto& [s, w] : d.live) {
    if (!w.draining || w.stopping || w.drain_until > now) continue;
    d.warn(fmt::format("{} did not leave within --elastic-drain-timeout {} of its host's removal; stopping it",
                       d.on_host(w), seconds_text(d.policy.drain_timeout)));
    d.stop(w);
  }

  // Workers that never became ready.
  for (auto& [s, w] : d.live) {
    if (w.leaving() || w.ready || w.started + d.policy.ready_timeout > now) continue;
    std::string what =
        fmt::format("{} did not become ready within {}", d.on_host(w), seconds_text(d.policy.ready_timeout));
    if (d.world.version == 0 && d.usable_slots_except(w.host, now) < d.policy.start_np) {
      d.finish(exit_code::kLaunch, what + " (the job could not form)");
      return;
    }
    d.stop(w);
    d.warn(what + "; stopping it");
    d.pending_reasons.push_back(fmt::format("{} not ready in time", d.on_host(w)));
    if (std::size_t n = d.count_failure(w.host, now)) d.blacklist(w.host, n, now);
  }

  d.reconcile(now);  // publishes a due admission batch, fills freed hosts
  if (d.admit_at && *d.admit_at <= now) d.admit_at.reset();

  if (d.below_since && now >= *d.below_since + d.policy.elastic_timeout) {
    if (!d.started) {
      d.finish(exit_code::kElastic,
               fmt::format("discovery offered only {} usable slots in {}; -np needs {} (--elastic-timeout)",
                           d.usable_free_slots(now), seconds_text(d.policy.elastic_timeout), d.policy.start_np));
    } else {
      d.finish(exit_code::kElastic, fmt::format("only {} for {}, fewer than --min-np {} (--elastic-timeout)",
                                                plural(static_cast<std::size_t>(d.active_count()), "usable worker"),
                                                seconds_text(d.policy.elastic_timeout), d.policy.min_np));
    }
  }
}

std::vector<ElasticAction> ElasticDriver::take_actions() {
  std::vector<ElasticAction> out;
  out.swap(impl_->actions);
  return out;
}

std::vector<uint64_t> ElasticDriver::unformed_worlds() const {
  std::vector<uint64_t> out;
  for (const auto& [version, ids] : impl_->unformed) out.push_back(version);
  return out;
}

std::optional<ElasticTime> ElasticDriver::next_deadline() const {
  const Impl& d = *impl_;
  if (d.finished || d.signalled) return std::nullopt;
  std::optional<ElasticTime> best;
  auto consider = [&](ElasticTime t) {
    if (!best || t < *best) best = t;
  };
  if (d.finishing) return d.grace_deadline;
  if (d.admit_at) consider(*d.admit_at);
  if (d.reform_at) consider(*d.reform_at);
  if (d.below_since) consider(*d.below_since + d.policy.elastic_timeout);
  for (const auto& [s, w] : d.live) {
    if (!w.leaving() && !w.ready) consider(w.started + d.policy.ready_timeout);
    if (w.draining && !w.stopping) consider(w.drain_until);
    if (w.keeper && !w.leaving()) consider(w.keeper_until);
  }
  for (const auto& [host, h] : d.health) {
    if (h.blacklisted && h.until) consider(*h.until);
    if (h.retry_at) consider(*h.retry_at);
  }
  return best;
}

bool ElasticDriver::done() const { return impl_->finished && impl_->live.empty(); }

const store::elastic::World& ElasticDriver::current_world() const { return impl_->world; }

int ElasticDriver::resets() const { return impl_->resets; }

bool ElasticDriver::is_blacklisted(const std::string& host, ElasticTime now) const {
  return impl_->blacklisted(host, now);
}

std::size_t ElasticDriver::history_size() const {
  return impl_->placement.size() + impl_->exited.size() + impl_->joined_ids.size() + impl_->holders.size();
}

std::size_t ElasticDriver::host_records() const {
  return impl_->health.size() + impl_->incarnations.size() + impl_->absent_since.size();
}

uint64_t ElasticDriver::oldest_world_in_use() const {
  const Impl& d = *impl_;
  uint64_t oldest = d.world.version;
  for (const auto& [s, w] : d.live) {
    if (w.oldest_world != 0) oldest = std::min(oldest, w.oldest_world);
  }
  return oldest;
}

std::vector<std::string> ElasticDriver::live_workers() const {
  std::vector<std::string> out;
  for (const auto& [s, w] : impl_->live) out.push_back(w.id);
  return out;
}

}  // namespace hvd::launcher
