#pragma once
/// The elastic job's decisions (issue 5), as a pure state machine: events in
/// (discovery results, workers ready / exited, signals, time), actions out
/// (spawn, stop, publish a world, finish). No threads, no clock, no I/O:
/// run_elastic_job (elastic_run.cpp) feeds it real events and carries out
/// its actions; unit tests feed it a fake clock and check every rule.
///
/// Rules (docs/elastic.md):
///  * Start: wait until discovery offers at least `start_np` usable slots
///    (giving up after elastic_timeout), then start workers on free slots up
///    to max_np, hosts in discovery order, slots in order.
///  * A started worker is not a member until it reports ready (its
///    ready_key appears in the store). Ready workers are admitted in
///    batches: `admit_delay` after the first not-yet-admitted ready worker,
///    or at once when every started worker is ready. A world is published
///    only when it has at least min_np members; below that, members wait in
///    reset() and the elastic_timeout clock runs.
///  * Rank stability: a new world lists surviving members in their previous
///    rank order (so the old rank 0, if alive, stays rank 0), then newcomers
///    in start order. Local/cross ranks follow place_ranks (plan/placement.h),
///    the rule static jobs use, with ranks = positions in that list.
///  * Host gone from discovery (or its slot count lowered): a world without
///    its (excess) workers is published at once. Those that were members of
///    a world that formed drain, as in Horovod: they are not stopped but
///    listed in the world's `draining`, so the others do not abort the
///    current communicator; everyone trains on to the next commit, where
///    HostsUpdatedInterrupt takes the survivors to the new world with their
///    live state (no rollback) and the drained workers leave (their exit,
///    whatever its status, is not a failure). A drained worker still running
///    after `drain_timeout` is stopped, and one that fails or is lost before
///    it left gets an abort action (DrainFailed), so the others give up the
///    world at once instead of hanging on a vanished peer. When fewer than
///    min_np would remain, the published world `hold`s: it is never formed,
///    the drained workers leave at the commit and the others wait with their
///    live state for the next world (Horovod's rendezvous waits the same
///    way). Workers that never trained (never in a formed world) and
///    drain_timeout 0 stop at once, as before.
///  * Holding the trained state (store/elastic_world.h): a worker holds it
///    once it reported a completed State::sync (on_worker_synced) in a
///    world that listed a holder, or in a world published while no running
///    worker held it (the job's first world; after a total loss). A world
///    whose barrier completed is not enough: a newcomer whose world failed
///    during the sync has only its initial state. Each published world
///    lists its holders (World::holders). When the last running holder
///    exits, the workers that synced since (in a world without one) hold
///    what the job has left.
///  * The keeper: when every worker that holds the state is on a dropped
///    host, the one with the lowest rank stays a member (the others drain)
///    until a newcomer has synced from it, or for at most drain_timeout;
///    then it drains too. Training goes on from the
///    job's state instead of the newcomers' initial one. When nobody that is
///    not leaving holds the state any more while trained workers drain (the
///    last holder that stayed failed before their commit), the drainer
///    started first is called back as the keeper (it waits for that: the
///    library's stranded drain). Its exit with left_key written means it
///    left before the call reached it: a departure. A keeper whose time
///    ran out with no newcomer taking over is not called back again: the
///    job lets that state go (it and the drainers holding it are holders
///    no more), and the next world's sync starts the state anew.
///  * New host / more slots: workers are started on free slots up to max_np.
///  * A worker that fails (non-zero exit, signal, lost) leaves the world at
///    once (a world without it is published) and its slot is restarted
///    unless the host is blacklisted or unreachable.
///  * A lost worker (no exit status: SSH refused or dropped) says its host
///    is unreachable, not that the job fails there (a Kubernetes container
///    restarting in place, a pod being replaced): it never counts towards
///    the blacklist. The host's slots are retried after a back-off of
///    `unreachable_backoff`, doubled per consecutive loss up to
///    `unreachable_backoff_max`.
///  * A host that comes back is a fresh host: its failures, back-off and
///    blacklisting are forgotten when discovery reports a new incarnation
///    for it (DiscoveryResult::incarnations: a new pod UID, IP or container
///    restart count; its workers still running on the old one are stopped),
///    and its failures and back-off are forgotten when SSH answers again
///    after a loss (a worker there gets ready) or when, after a loss,
///    discovery drops the host and lists it again. A StatefulSet's pod name
///    is never blacklisted for good because its container restarted.
///  * A host is blacklisted when
///    `blacklist_failures` failures happen on it within `failure_window`:
///    its remaining workers are stopped and discovery ignores it for a
///    cooldown drawn uniformly from [cooldown_min, cooldown_max], doubled for
///    each earlier blacklisting of that host (capped at 2^6 times). One
///    crash never stops a host's healthy workers.
///  * A world whose every live member asked to re-form it (reset_key: its
///    communicator failed with no process gone -- a network blip -- or it
///    did not form) is published again with the same members, the first
///    failure named; repeated quick failures back off (failed_world_*).
///    It counts as a reset. A member that exits is removed as usual.
///  * During initial formation (no world published yet), a worker that
///    exits non-zero before it is ready ends the job with its status (a bad
///    command must fail fast, as in static mode).
///  * Every world after the first counts as a reset; more than reset_limit
///    resets ends the job (exit_code::kElastic).
///  * Fewer than min_np usable workers for longer than elastic_timeout ends
///    the job (exit_code::kElastic).
///  * Ending: a member that exits 0 starts finishing: nothing is spawned or
///    published any more, not-yet-admitted workers are stopped, and the
///    other members get `finish_grace` to exit. The job succeeds only if
///    every member of the last world exits 0; otherwise it fails with the
///    first failing member's status, naming the members that did not exit 0.
///    A member of the last world that never was in a world that formed (a
///    newcomer admitted after the others' last commit, still waiting in its
///    join for peers that are done) has trained nothing: it is stopped like
///    a not-yet-admitted worker and its exit does not count. Formation is
///    reported by on_world_formed; until any world has been reported formed,
///    every member counts.
///  * A signal stops every worker; the job ends with 128+signal once every
///    worker has exited (the runner escalates to SIGKILL).
///  * Discovery: a failing first run ends the job (exit_code::kLaunch, the
///    script's reason in the message). Later failures keep the previous host
///    set and are logged once per distinct reason.
#include "hvd/launcher/discovery/discovery.h"
#include "hvd/launcher/plan/job_plan.h"
#include "hvd/store/elastic_world.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace hvd::launcher {

using ElasticClock = std::chrono::steady_clock;
using ElasticTime = ElasticClock::time_point;

struct ElasticPolicy {
  int start_np = 1;  ///< -np: slots needed before the first start
  int min_np = 1;  ///< --min-np (defaults to -np)
  int max_np = 1 << 20;  ///< --max-np (default: no limit)
  std::chrono::milliseconds elastic_timeout{600000};
  std::optional<int> reset_limit;
  std::chrono::milliseconds cooldown_min{0};
  std::chrono::milliseconds cooldown_max{0};
  int blacklist_failures = 3;
  std::chrono::milliseconds failure_window{60000};
  std::chrono::milliseconds admit_delay{1000};
  std::chrono::milliseconds finish_grace{30000};
  /// A started worker that is not ready within this counts as failed.
  std::chrono::milliseconds ready_timeout{30000};
  /// After a lost worker, its host's slots are retried this much later,
  /// doubled per consecutive loss on that host, at most the maximum.
  std::chrono::milliseconds unreachable_backoff{1000};
  std::chrono::milliseconds unreachable_backoff_max{30000};
  /// A world that failed with every member alive is re-formed at once the
  /// first time; when the world before it also failed within
  /// `failed_world_stable` of its publication, after this back-off, doubled
  /// per consecutive failure up to the maximum (a network that stays broken
  /// does not spin).
  std::chrono::milliseconds failed_world_backoff{1000};
  std::chrono::milliseconds failed_world_backoff_max{30000};
  std::chrono::milliseconds failed_world_stable{30000};
  /// Longest a worker of a host discovery dropped may train on to its next
  /// commit before it is stopped (--elastic-drain-timeout); 0: stop at once.
  std::chrono::milliseconds drain_timeout{60000};
};

/// What the runner must do, in order.
struct ElasticAction {
  enum class Kind {
    Spawn,  ///< start worker `worker_id` on `host` (slot `slot`)
    Stop,  ///< stop worker `worker_id` (SIGTERM, then SIGKILL after the grace)
    Publish,  ///< write `world` to the store (world_key then kVersionKey)
    Log,  ///< one line for spdlog::info (`message`)
    Warn,  ///< one line for spdlog::warn (`message`)
    Finish,  ///< the job is over: exit code `code`, error `message` (may be empty)
    /// Draining worker `worker_id` failed, was lost or is being stopped
    /// before it left at a commit: write store::elastic::drain_failed_key
    /// with `message`, so members still in a world with it abort that world.
    DrainFailed,
  };
  Kind kind;
  std::string worker_id;
  std::string host;
  int slot = 0;
  /// Spawn: the worker's place in the world it is started for -- the
  /// current world's members (in rank order), then every started worker not
  /// yet in a world (in start order), this one included -- and that world's
  /// size. Its HOROVOD_RANK & co., as horovodrun gives an elastic worker the
  /// ranks of the assignment it was started for; the world it joins decides
  /// its real ranks (hvd.rank()).
  SlotAssignment planned;
  int planned_size = 0;
  store::elastic::World world;
  int code = 0;
  std::string message;
};

class ElasticDriver {
 public:
  /// `seed` drives the cooldown draws (tests pass a fixed one).
  ElasticDriver(ElasticPolicy policy, uint64_t seed);

  // ---- events ----
  void on_discovery(const DiscoveryResult& result, ElasticTime now);
  void on_worker_ready(const std::string& worker_id, ElasticTime now);
  /// `status` as a shell reports it; `lost_reason` non-empty when the
  /// worker was lost rather than seen exiting.
  void on_worker_exit(const std::string& worker_id, int status, const std::string& lost_reason, ElasticTime now);
  void on_signal(int sig, ElasticTime now);
  /// Worker `worker_id` learned that it is no longer in the job (it wrote
  /// store::elastic::left_key): reported just before its exit. A draining
  /// worker that did so left at a commit, whatever its exit status.
  void on_worker_left(const std::string& worker_id, ElasticTime now);
  /// World `version` formed: its arrival barrier completed (the library
  /// wrote comm_prefix(version) + "formed"), so each of its members has
  /// joined the job. Unknown or already reported versions are ignored.
  /// Worlds of one member need no barrier and count as formed when published.
  void on_world_formed(uint64_t version, ElasticTime now);
  /// Worker `worker_id` completed State::sync in world `version` (it wrote
  /// store::elastic::synced_key). It holds the job's trained state from now
  /// on if that world listed a holder or was published while no running
  /// worker held the state; a keeper whose successors now hold it hands
  /// over. Unknown workers and versions are ignored.
  void on_worker_synced(const std::string& worker_id, uint64_t version, ElasticTime now);
  /// Member `worker_id` of world `version` left it and asks to re-form
  /// (store::elastic::reset_key); `why` is one line (the world's first
  /// failure when its ranks recorded one). Ignored unless `version` is the
  /// newest world and the worker one of its live members.
  void on_reform_request(uint64_t version, const std::string& worker_id, const std::string& why, ElasticTime now);
  /// Timers: admission batches, grace periods, timeouts, cooldown expiry.
  void tick(ElasticTime now);

  // ---- outputs ----
  /// Actions produced since the last call.
  std::vector<ElasticAction> take_actions();
  /// Published worlds of more than one member not yet reported formed, in
  /// version order. The runner checks them before it reports an exit: a
  /// member that trained in a world wrote its "formed" key before it could
  /// exit, so the ending rules never miss it.
  std::vector<uint64_t> unformed_worlds() const;
  /// Live workers, not being stopped, that are not known to hold the
  /// trained state: the runner reads their synced_key and reports it
  /// (on_worker_synced) before every event and timer it hands over.
  std::vector<std::string> workers_not_holding() const;
  /// When tick() next has something to do (none: only events matter).
  std::optional<ElasticTime> next_deadline() const;
  /// The oldest published world a live worker may still use: the keys of
  /// every older world (world_key, comm_prefix) can be erased. For each
  /// live worker, the newest world listing it that was reported formed
  /// (its barrier completed: it arrived there, so it reads and writes no
  /// older one; a world of one member has no barrier and does not count),
  /// else the first world that listed it (it may still be forming that
  /// one, or be about to see that a later one superseded it); workers no
  /// world listed yet read only the newest. The newest world's version when
  /// no live worker holds an older one; 0 before the first.
  uint64_t oldest_world_in_use() const;
  /// True once a Finish action has been produced and every started worker
  /// has exited (the runner may stop then).
  bool done() const;

  // ---- inspection (tests, logs) ----
  const store::elastic::World& current_world() const;  ///< version 0 before the first
  int resets() const;
  bool is_blacklisted(const std::string& host, ElasticTime now) const;
  /// Workers started and not yet exited.
  std::vector<std::string> live_workers() const;
  /// Entries kept about workers (live or exited: their place, exit, and
  /// whether they trained). What is kept of an exited worker is dropped at
  /// the next publication once no rule can need it (not in the newest
  /// world, not the first failure), so this stays bounded over re-formations.
  std::size_t history_size() const;
  /// Entries kept about hosts (health: failures, losses, blacklisting; the
  /// last incarnation discovery reported; since when an unlisted one is
  /// away). A host's entries go once discovery has not listed it for 60 s
  /// (or the failure window, if longer) and no worker runs there; a
  /// blacklisted host's health entry stays for the rest of the job.
  std::size_t host_records() const;

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace hvd::launcher
