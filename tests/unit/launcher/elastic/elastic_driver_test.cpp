// ElasticDriver's rules, checked with a fake clock and hand-fed events.
#include <catch2/catch.hpp>

#include "hvd/launcher/elastic/elastic_driver.h"
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/plan/placement.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <set>
#include <tuple>

using namespace hvd::launcher;
using namespace std::chrono_literals;
using Kind = ElasticAction::Kind;
using hvd::store::elastic::World;

namespace {

/// A driver, a fake clock, and the runner's side of the bookkeeping (which
/// worker occupies which slot) so every test also checks the basic
/// invariants: ids never reused, one worker per slot, versions consecutive,
/// no world below min_np or above max_np.
struct Harness {
  ElasticPolicy policy;
  ElasticDriver d;
  ElasticTime now = ElasticTime{} + std::chrono::hours(1);
  std::map<std::pair<std::string, int>, std::string> occupied;
  std::map<std::string, std::pair<std::string, int>> where;
  std::set<std::string> live;
  uint64_t last_version = 0;
  int last_serial = 0;
  int finishes = 0;

  explicit Harness(ElasticPolicy p, uint64_t seed = 42) : policy(p), d(p, seed) {}

  std::vector<ElasticAction> take() {
    auto actions = d.take_actions();
    for (const auto& a : actions) {
      // HVD_TEST_PRINT_ACTIONS=1 shows the driver's lines (to judge them by eye).
      if (std::getenv("HVD_TEST_PRINT_ACTIONS") && !a.message.empty()) {
        std::printf("  %s: %s\n",
                    a.kind == Kind::Finish ? "finish"
                    : a.kind == Kind::Warn ? "warn"
                                           : "info",
                    a.message.c_str());
      }
      switch (a.kind) {
        case Kind::Spawn: {
          int serial = std::stoi(a.worker_id.substr(1));
          REQUIRE(a.worker_id == "w" + std::to_string(serial));
          REQUIRE(serial == last_serial + 1);
          last_serial = serial;
          REQUIRE(occupied.count({a.host, a.slot}) == 0);
          // Its place in the world it is started for (HOROVOD_RANK & co.).
          REQUIRE(a.planned_size >= 1);
          REQUIRE(a.planned_size <= std::max(policy.max_np, 2));  // a keeper with --max-np 1 (below)
          REQUIRE(a.planned.hostname == a.host);
          REQUIRE(a.planned.rank >= 0);
          REQUIRE(a.planned.rank < a.planned_size);
          REQUIRE(a.planned.local_rank < a.planned.local_size);
          REQUIRE(a.planned.cross_rank < a.planned.cross_size);
          occupied[{a.host, a.slot}] = a.worker_id;
          where[a.worker_id] = {a.host, a.slot};
          live.insert(a.worker_id);
          break;
        }
        case Kind::Stop: REQUIRE(live.count(a.worker_id) == 1); break;
        case Kind::DrainFailed:
          REQUIRE(live.count(a.worker_id) + exited_ids.count(a.worker_id) == 1);
          REQUIRE_FALSE(a.message.empty());
          break;
        case Kind::Publish:
          REQUIRE(a.world.version == last_version + 1);
          last_version = a.world.version;
          published[a.world.version] = a.world;
          for (const auto& id : a.world.holders) REQUIRE(a.world.find(id) != nullptr);
          if (a.world.hold) {  // workers drain and too few remain: never formed
            REQUIRE(a.world.size() < policy.min_np);
            REQUIRE_FALSE(a.world.draining.empty());
          } else {
            REQUIRE(a.world.size() >= policy.min_np);
          }
          // A keeper (one worker holding the trained state whose host was
          // dropped) and its one successor, with --max-np 1.
          REQUIRE(a.world.size() <= std::max(policy.max_np, 2));
          REQUIRE_FALSE(a.world.reason.empty());
          REQUIRE_FALSE(a.world.final);
          for (int r = 0; r < a.world.size(); ++r) {
            REQUIRE(a.world.members[r].rank == r);
            REQUIRE(live.count(a.world.members[r].worker_id) == 1);
          }
          for (const auto& id : a.world.draining) {
            REQUIRE(live.count(id) == 1);
            REQUIRE(a.world.find(id) == nullptr);
          }
          break;
        case Kind::Log:
        case Kind::Warn:
          REQUIRE_FALSE(a.message.empty());
          REQUIRE(a.message.find('\n') == std::string::npos);
          break;
        case Kind::Finish:
          ++finishes;
          REQUIRE(finishes == 1);
          if (a.code == 0) REQUIRE(a.message.empty());
          if (a.code != 0) REQUIRE_FALSE(a.message.empty());
          break;
      }
    }
    return actions;
  }

  std::vector<ElasticAction> discover(std::vector<HostSpec> hosts) {
    DiscoveryResult r;
    r.hosts = std::move(hosts);
    d.on_discovery(r, now);
    return take();
  }
  /// Discovery that knows each host's incarnation (Kubernetes: pod UID, IP,
  /// restart count), given as (host, slots, incarnation).
  std::vector<ElasticAction> discover_pods(const std::vector<std::tuple<std::string, int, std::string>>& pods) {
    DiscoveryResult r;
    for (const auto& [name, slots, incarnation] : pods) {
      r.hosts.push_back({name, slots});
      r.incarnations[name] = incarnation;
    }
    d.on_discovery(r, now);
    return take();
  }
  std::vector<ElasticAction> discover_fail(const std::string& why) {
    DiscoveryResult r;
    r.error = why;
    d.on_discovery(r, now);
    return take();
  }
  std::vector<ElasticAction> ready(const std::string& id) {
    d.on_worker_ready(id, now);
    return take();
  }
  std::vector<ElasticAction> exit(const std::string& id, int status, const std::string& lost = "") {
    REQUIRE(live.erase(id) == 1);
    exited_ids.insert(id);  // a draining worker may be reported failed after its exit
    occupied.erase(where.at(id));
    d.on_worker_exit(id, status, lost, now);
    return take();
  }
  /// The runner saw world `v`'s "formed" key, then every live member's
  /// synced_key for `v` (a trainer syncs right after its world formed).
  std::vector<ElasticAction> formed(uint64_t v) {
    auto out = formed_unsynced(v);
    for (const auto& m : published.at(v).members) {
      if (!live.count(m.worker_id)) continue;
      auto a = synced(m.worker_id, v);
      out.insert(out.end(), a.begin(), a.end());
    }
    return out;
  }
  /// Only world `v`'s "formed" key: its barrier completed, nobody synced yet.
  std::vector<ElasticAction> formed_unsynced(uint64_t v) {
    d.on_world_formed(v, now);
    return take();
  }
  /// Worker `id` wrote synced_key = v (its State::sync completed in world v).
  std::vector<ElasticAction> synced(const std::string& id, uint64_t v) {
    d.on_worker_synced(id, v, now);
    return take();
  }
  /// Worker `id` wrote reset_key(v) ("re-form world v").
  std::vector<ElasticAction> reform(uint64_t v, const std::string& id, const std::string& why = "link lost") {
    d.on_reform_request(v, id, why, now);
    return take();
  }
  std::vector<ElasticAction> signal(int sig) {
    d.on_signal(sig, now);
    return take();
  }
  /// Moves the clock and ticks; a deadline at or before `now` must have
  /// been handled by the tick (the runner would otherwise spin).
  std::vector<ElasticAction> advance(std::chrono::milliseconds dt) {
    now += dt;
    d.tick(now);
    auto out = take();
    auto next = d.next_deadline();
    if (next) REQUIRE(*next > now);
    return out;
  }
  /// Readies every live worker that has not been readied, in start order.
  std::vector<ElasticAction> ready_all() {
    std::vector<ElasticAction> out;
    std::vector<std::string> ids(live.begin(), live.end());
    std::sort(ids.begin(), ids.end(), [](const std::string& a, const std::string& b) {
      return std::stoi(a.substr(1)) < std::stoi(b.substr(1));
    });
    for (const auto& id : ids) {
      if (readied.insert(id).second) {
        auto a = ready(id);
        out.insert(out.end(), a.begin(), a.end());
      }
    }
    return out;
  }
  std::set<std::string> readied;
  std::set<std::string> exited_ids;
  std::map<uint64_t, World> published;
};

ElasticPolicy base_policy() {
  ElasticPolicy p;
  p.start_np = 1;
  p.min_np = 1;
  p.max_np = 64;
  p.elastic_timeout = 10s;
  p.admit_delay = 50ms;
  p.finish_grace = 5s;
  p.ready_timeout = 20s;
  p.blacklist_failures = 3;
  p.failure_window = 60s;
  return p;
}

std::vector<const ElasticAction*> of(const std::vector<ElasticAction>& actions, Kind kind) {
  std::vector<const ElasticAction*> out;
  for (const auto& a : actions) {
    if (a.kind == kind) out.push_back(&a);
  }
  return out;
}

std::vector<std::string> ids(const std::vector<ElasticAction>& actions, Kind kind) {
  std::vector<std::string> out;
  for (const auto* a : of(actions, kind)) out.push_back(a->worker_id);
  return out;
}

std::vector<std::string> members(const World& w) {
  std::vector<std::string> out;
  for (const auto& m : w.members) out.push_back(m.worker_id);
  return out;
}

/// The one world published among `actions` (fails if not exactly one).
World published(const std::vector<ElasticAction>& actions) {
  auto p = of(actions, Kind::Publish);
  REQUIRE(p.size() == 1);
  return p[0]->world;
}

ElasticAction finish_of(const std::vector<ElasticAction>& actions) {
  auto f = of(actions, Kind::Finish);
  REQUIRE(f.size() == 1);
  return *f[0];
}

bool has_message(const std::vector<ElasticAction>& actions, Kind kind, const std::string& needle) {
  for (const auto* a : of(actions, kind)) {
    if (a->message.find(needle) != std::string::npos) return true;
  }
  return false;
}

using Strings = std::vector<std::string>;

/// Starts a job on `hosts`, readies everyone and returns after world 1.
void form(Harness& h, std::vector<HostSpec> hosts) {
  h.discover(std::move(hosts));
  auto a = h.ready_all();
  REQUIRE(h.d.current_world().version == 1);
  REQUIRE(of(a, Kind::Publish).size() == 1);
}

}  // namespace

TEST_CASE("elastic driver: initial start waits for -np slots, then fills to max-np") {
  auto p = base_policy();
  p.start_np = 2;
  p.max_np = 3;
  Harness h(p);
  auto a = h.discover({{"a", 1}});
  REQUIRE(of(a, Kind::Spawn).empty());
  REQUIRE(has_message(a, Kind::Log, "waiting for 2 usable slots"));
  REQUIRE(h.d.live_workers().empty());

  a = h.discover({{"a", 1}, {"b", 3}});
  auto spawns = of(a, Kind::Spawn);
  REQUIRE(spawns.size() == 3);
  REQUIRE((spawns[0]->worker_id == "w1" && spawns[0]->host == "a" && spawns[0]->slot == 0));
  REQUIRE((spawns[1]->worker_id == "w2" && spawns[1]->host == "b" && spawns[1]->slot == 0));
  REQUIRE((spawns[2]->worker_id == "w3" && spawns[2]->host == "b" && spawns[2]->slot == 1));
  REQUIRE(h.d.live_workers() == Strings{"w1", "w2", "w3"});

  // The first world waits for every started worker.
  REQUIRE(of(h.ready("w2"), Kind::Publish).empty());
  REQUIRE(of(h.advance(1s), Kind::Publish).empty());
  REQUIRE(of(h.ready("w1"), Kind::Publish).empty());
  World w = published(h.ready("w3"));
  REQUIRE(w.version == 1);
  REQUIRE(w.reason == "initial formation");
  REQUIRE(members(w) == Strings{"w1", "w2", "w3"});
  // place_ranks: w1 alone on a; w2, w3 share b.
  REQUIRE((w.members[0].local_rank == 0 && w.members[0].local_size == 1 && w.members[0].cross_rank == 0));
  REQUIRE((w.members[1].local_rank == 0 && w.members[1].local_size == 2 && w.members[1].cross_rank == 1));
  REQUIRE((w.members[2].local_rank == 1 && w.members[2].cross_size == 1));
  REQUIRE(h.d.resets() == 0);
  REQUIRE(h.d.current_world().version == 1);
}

TEST_CASE("elastic driver: the first world places ranks as a static job on the same hosts does") {
  // Uneven slots, including an IPv6 host as discovery prints it ([::1]:2).
  const std::vector<HostSpec> hosts = {{"a", 2}, {"::1", 1}, {"c", 3}};
  Harness h(base_policy());
  form(h, hosts);
  const World& w = h.d.current_world();
  const auto slots = assign_slots(hosts, 6);
  REQUIRE(w.members.size() == slots.size());
  for (std::size_t r = 0; r < slots.size(); ++r) {
    const auto& m = w.members[r];
    INFO("rank " << r);
    CHECK(m.host == slots[r].hostname);
    CHECK(m.rank == slots[r].rank);
    CHECK(m.local_rank == slots[r].local_rank);
    CHECK(m.local_size == slots[r].local_size);
    CHECK(m.cross_rank == slots[r].cross_rank);
    CHECK(m.cross_size == slots[r].cross_size);
  }
}

TEST_CASE("elastic driver: a failing first discovery run ends the job with kLaunch and its reason") {
  Harness h(base_policy());
  auto a = h.discover_fail("host discovery script 'd.sh' exited with code 2: no such file");
  const ElasticAction f = finish_of(a);
  REQUIRE(f.code == exit_code::kLaunch);
  REQUIRE(f.message.find("exited with code 2: no such file") != std::string::npos);
  REQUIRE(of(a, Kind::Spawn).empty());
  REQUIRE(h.d.done());
  REQUIRE_FALSE(h.d.next_deadline());
  // Nothing happens after the end.
  REQUIRE(h.discover({{"a", 1}}).empty());
}

TEST_CASE("elastic driver: later discovery failures keep the hosts and are logged once per reason") {
  Harness h(base_policy());
  form(h, {{"a", 2}});
  auto a = h.discover_fail("host discovery script 'd.sh' timed out after 10 s and was killed");
  REQUIRE(of(a, Kind::Warn).size() == 1);
  REQUIRE(has_message(a, Kind::Warn, "discovery failed (kept previous 1 host): host discovery script"));
  REQUIRE(of(a, Kind::Stop).empty());
  REQUIRE(of(a, Kind::Publish).empty());
  // Same reason again: silent.
  REQUIRE(h.discover_fail("host discovery script 'd.sh' timed out after 10 s and was killed").empty());
  // Garbage output is another reason: logged once too.
  a = h.discover_fail("malformed discovery output line 1 'x y': embedded whitespace");
  REQUIRE(has_message(a, Kind::Warn, "line 1 'x y'"));
  REQUIRE(h.discover_fail("malformed discovery output line 1 'x y': embedded whitespace").empty());
  // The job kept its workers all along; the same hosts again change nothing.
  REQUIRE(h.d.live_workers() == Strings{"w1", "w2"});
  REQUIRE(h.discover({{"a", 2}}).empty());
  REQUIRE(h.d.current_world().version == 1);
}

TEST_CASE("elastic driver: admissions are batched by admit_delay, at once when everyone is ready") {
  auto p = base_policy();
  p.admit_delay = 100ms;
  Harness h(p);
  form(h, {{"a", 1}});
  auto a = h.discover({{"a", 1}, {"b", 2}});
  REQUIRE(ids(a, Kind::Spawn) == Strings{"w2", "w3"});
  h.readied.insert("w2");
  REQUIRE(of(h.ready("w2"), Kind::Publish).empty());
  REQUIRE(h.d.next_deadline() == h.now + 100ms);
  REQUIRE(of(h.advance(99ms), Kind::Publish).empty());
  World w = published(h.advance(1ms));
  REQUIRE(members(w) == Strings{"w1", "w2"});
  REQUIRE(w.version == 2);
  REQUIRE(w.reason == "scale-up");
  // w3 is the last not-ready worker: its readiness admits it at once.
  h.readied.insert("w3");
  w = published(h.ready("w3"));
  REQUIRE(members(w) == Strings{"w1", "w2", "w3"});
  REQUIRE(h.d.resets() == 2);

  // Two newcomers ready within one delay join together.
  h.discover({{"a", 1}, {"b", 2}, {"c", 3}});
  REQUIRE(h.d.live_workers() == Strings{"w1", "w2", "w3", "w4", "w5", "w6"});
  h.readied.insert("w4");
  h.readied.insert("w5");
  REQUIRE(of(h.ready("w4"), Kind::Publish).empty());
  h.now += 60ms;
  REQUIRE(of(h.ready("w5"), Kind::Publish).empty());
  w = published(h.advance(40ms));
  REQUIRE(members(w) == Strings{"w1", "w2", "w3", "w4", "w5"});
}

TEST_CASE("elastic driver: scale up 1 -> 2 -> 3 with one log line per change") {
  Harness h(base_policy());
  form(h, {{"a", 1}});
  REQUIRE(ids(h.discover({{"a", 1}, {"b", 1}}), Kind::Spawn) == Strings{"w2"});
  auto a = h.ready_all();
  REQUIRE(members(published(a)) == Strings{"w1", "w2"});
  REQUIRE(has_message(a, Kind::Log, "world 2: size 1 -> 2, joined w2 (b slot 0); left: -; reason: scale-up"));
  REQUIRE(ids(h.discover({{"a", 1}, {"b", 1}, {"c", 1}}), Kind::Spawn) == Strings{"w3"});
  a = h.ready_all();
  World w = published(a);
  REQUIRE(members(w) == Strings{"w1", "w2", "w3"});
  REQUIRE(w.version == 3);
  REQUIRE(w.members[2].cross_rank == 2);
  REQUIRE(w.members[2].cross_size == 3);
  REQUIRE(has_message(a, Kind::Log, "world 3: size 2 -> 3, joined w3 (c slot 0)"));
  REQUIRE(h.d.resets() == 2);
}

TEST_CASE("elastic driver: a host gone from discovery has its workers stopped and a world without them") {
  Harness h(base_policy());
  form(h, {{"a", 1}, {"b", 2}});
  auto a = h.discover({{"a", 1}});
  REQUIRE(ids(a, Kind::Stop) == Strings{"w2", "w3"});
  World w = published(a);
  REQUIRE(members(w) == Strings{"w1"});
  REQUIRE(w.reason.find("host b no longer listed by discovery") != std::string::npos);
  REQUIRE(has_message(a, Kind::Log, "left: w2 (b slot 0), w3 (b slot 1)"));
  // Their (SIGTERM) exits are expected: no failure, no respawn, no new world.
  a = h.exit("w2", 143);
  REQUIRE(a.empty());
  REQUIRE(h.exit("w3", 143).empty());
  REQUIRE_FALSE(h.d.is_blacklisted("b", h.now));
  // The host returns: its slots are filled again with new workers.
  REQUIRE(ids(h.discover({{"a", 1}, {"b", 2}}), Kind::Spawn) == Strings{"w4", "w5"});
}

TEST_CASE("elastic driver: workers of a dropped host that trained drain to their next commit (no rollback)") {
  Harness h(base_policy());
  form(h, {{"a", 1}, {"b", 2}});
  h.formed(1);
  auto a = h.discover({{"a", 1}});
  // Not stopped: out of the world, listed as draining, so the others train on
  // to their next commit instead of aborting.
  REQUIRE(of(a, Kind::Stop).empty());
  REQUIRE(of(a, Kind::DrainFailed).empty());
  World w = published(a);
  REQUIRE(members(w) == Strings{"w1"});
  REQUIRE(w.draining == Strings{"w2", "w3"});
  REQUIRE(w.reason.find("host b no longer listed by discovery") != std::string::npos);
  REQUIRE(has_message(a, Kind::Log, "left: w2 (b slot 0) (draining), w3 (b slot 1) (draining)"));
  REQUIRE(h.d.live_workers() == Strings{"w1", "w2", "w3"});

  SECTION("they leave at the commit: any exit is expected, nothing restarts, the job goes on") {
    a = h.exit("w2", 0);
    REQUIRE(has_message(a, Kind::Log, "w2 on b slot 0 left the job (drained)"));
    REQUIRE(of(a, Kind::Publish).empty());
    REQUIRE(of(a, Kind::Warn).empty());
    REQUIRE(of(a, Kind::DrainFailed).empty());
    // A non-zero exit while draining is no failure either, but the members
    // still with it are told to give up -- unless the worker said it left
    // (a script that lets WorkerRemovedError end it, as Horovod's do).
    SECTION("exit 1 after it said it left") {
      h.d.on_worker_left("w3", h.now);
      a = h.exit("w3", 1);
      REQUIRE(of(a, Kind::DrainFailed).empty());
      REQUIRE(has_message(a, Kind::Log, "w3 on b slot 1 left the job (drained; exited with code 1)"));
    }
    SECTION("exit 1 without it") {
      a = h.exit("w3", 1);
      REQUIRE(ids(a, Kind::DrainFailed) == Strings{"w3"});
      REQUIRE(has_message(a, Kind::Log, "w3 on b slot 1 exited with code 1 while draining"));
    }
    REQUIRE(of(a, Kind::Publish).empty());
    REQUIRE(of(a, Kind::Spawn).empty());
    REQUIRE_FALSE(h.d.is_blacklisted("b", h.now));
    REQUIRE(h.d.resets() == 1);
    REQUIRE(h.d.current_world().version == 2);
    const ElasticAction f = finish_of(h.exit("w1", 0));
    REQUIRE(f.code == 0);
    REQUIRE(h.d.done());
  }
  SECTION("a later world still lists a worker that has not left yet") {
    a = h.discover({{"a", 1}, {"c", 1}});
    REQUIRE(ids(a, Kind::Spawn) == Strings{"w4"});
    w = published(h.ready_all());
    REQUIRE(members(w) == Strings{"w1", "w4"});
    REQUIRE(w.draining == Strings{"w2", "w3"});
    h.exit("w2", 0);
    h.exit("w3", 0);
    h.discover({{"a", 1}, {"c", 1}, {"d", 1}});
    w = published(h.ready_all());
    REQUIRE(w.draining.empty());
  }
  SECTION("the host is listed again while they drain: their slots wait for their exit") {
    REQUIRE(of(h.discover({{"a", 1}, {"b", 2}}), Kind::Spawn).empty());
    REQUIRE(ids(h.exit("w2", 0), Kind::Spawn) == Strings{"w4"});
  }
  SECTION("one that overstays --elastic-drain-timeout is stopped and the others told") {
    REQUIRE(h.d.next_deadline() == h.now + 60s);
    REQUIRE(of(h.advance(59s), Kind::Stop).empty());
    a = h.advance(1s);
    REQUIRE(ids(a, Kind::Stop) == Strings{"w2", "w3"});
    REQUIRE(ids(a, Kind::DrainFailed) == Strings{"w2", "w3"});
    REQUIRE(has_message(a, Kind::Warn, "w2 on b slot 0 did not leave within --elastic-drain-timeout 60 s"));
    REQUIRE(h.exit("w2", 143).empty());  // asked for
    REQUIRE(h.exit("w3", 143).empty());
    REQUIRE(of(h.advance(60s), Kind::Stop).empty());
  }
  SECTION("one that is lost while draining: the others are told at once, the host is not backed off") {
    a = h.exit("w2", 0, "connection dropped");
    REQUIRE(ids(a, Kind::DrainFailed) == Strings{"w2"});
    REQUIRE(of(a, Kind::Warn).empty());
    REQUIRE(ids(h.discover({{"a", 1}, {"b", 1}}), Kind::Spawn) == Strings{"w4"});
  }
  SECTION("a signal stops them with everyone else") {
    a = h.signal(SIGTERM);
    REQUIRE(ids(a, Kind::Stop) == Strings{"w1", "w2", "w3"});
  }
}

TEST_CASE("elastic driver: the oldest world in use follows the slowest live worker") {
  Harness h(base_policy());
  REQUIRE(h.d.oldest_world_in_use() == 0);
  form(h, {{"a", 1}, {"b", 2}});
  REQUIRE(h.d.oldest_world_in_use() == 1);
  h.formed(1);
  // b's workers drain in world 1 while w1 goes on alone in world 2.
  REQUIRE(published(h.discover({{"a", 1}})).draining == Strings{"w2", "w3"});
  REQUIRE(h.d.oldest_world_in_use() == 1);
  h.exit("w2", 0);
  REQUIRE(h.d.oldest_world_in_use() == 1);
  h.exit("w3", 0);
  // World 2 has one member: no barrier tells that w1 left world 1's code
  // (it may still be cancelling an older barrier there), so world 1 stays.
  REQUIRE(h.d.oldest_world_in_use() == 1);
  // A newcomer's first world has not formed: w1 may still be in world 1 or 2.
  REQUIRE(ids(h.discover({{"a", 1}, {"c", 1}}), Kind::Spawn) == Strings{"w4"});
  REQUIRE(h.d.oldest_world_in_use() == 1);  // w4 is in no world yet
  REQUIRE(members(published(h.ready_all())) == Strings{"w1", "w4"});
  REQUIRE(h.d.oldest_world_in_use() == 1);
  h.formed(3);
  REQUIRE(h.d.oldest_world_in_use() == 3);
  // w4 crashes: world 4 is w1 alone; its replacement is in no world yet.
  auto a = h.exit("w4", 1);
  REQUIRE(members(published(a)) == Strings{"w1"});
  REQUIRE(ids(a, Kind::Spawn) == Strings{"w5"});
  REQUIRE(h.d.oldest_world_in_use() == 3);
  // The replacement is listed in world 5, which then fails to form and is
  // superseded by world 6 before either is reported formed: w5 may still be
  // forming world 5, w1 is in world 3 or later.
  h.ready_all();
  REQUIRE(h.d.current_world().version == 5);
  h.reform(5, "w1");
  a = h.reform(5, "w5");
  REQUIRE(h.d.current_world().version == 6);
  REQUIRE(h.d.oldest_world_in_use() == 3);
  h.formed(6);
  REQUIRE(h.d.oldest_world_in_use() == 6);
}

TEST_CASE("elastic driver: what is kept of exited workers stays bounded over many re-formations") {
  Harness h(base_policy());
  form(h, {{"a", 2}});
  h.formed(1);
  const std::size_t at_start = h.d.history_size();
  std::string victim = "w2";
  for (int cycle = 0; cycle < 200; ++cycle) {
    auto a = h.exit(victim, 1);  // crashes; its slot restarts
    REQUIRE(ids(a, Kind::Spawn).size() == 1);
    const std::string next = ids(a, Kind::Spawn)[0];
    h.ready_all();
    h.formed(h.d.current_world().version);
    REQUIRE(members(h.d.current_world()) == Strings{"w1", next});
    victim = next;
    h.advance(61s);  // outside the failure window: no blacklisting
  }
  // The first failure and the newest world's members are kept, nothing more.
  REQUIRE(h.d.history_size() <= at_start + 3);
  // The job still ends by its rules.
  REQUIRE(of(h.exit("w1", 0), Kind::Finish).empty());
  const ElasticAction f = finish_of(h.exit(victim, 0));
  REQUIRE(f.code == 0);
}

TEST_CASE("elastic driver: every host that holds the trained state dropped at once: one worker keeps it for the newcomers") {
  Harness h(base_policy());  // drain_timeout 60 s
  form(h, {{"a", 2}});
  h.formed(1);
  // Discovery swaps the hosts (a node pool replaced): nobody that stays has
  // trained, so w1 (rank 0) stays a member while w2 drains.
  auto a = h.discover({{"b", 2}});
  REQUIRE(has_message(a, Kind::Log, "w1 on a slot 0 keeps training although host a no longer listed by discovery: "
                                    "no worker staying holds the job's trained state"));
  REQUIRE(ids(a, Kind::Spawn) == Strings{"w3", "w4"});
  REQUIRE(of(a, Kind::Stop).empty());
  World w = published(a);
  REQUIRE(members(w) == Strings{"w1"});
  REQUIRE(w.draining == Strings{"w2"});
  REQUIRE(has_message(h.exit("w2", 0), Kind::Log, "w2 on a slot 1 left the job (drained)"));
  REQUIRE(h.d.next_deadline().has_value());
  REQUIRE(*h.d.next_deadline() <= h.now + 60s);

  SECTION("the newcomers join it, and once that world formed it drains") {
    w = published(h.ready_all());
    REQUIRE(members(w) == Strings{"w1", "w3", "w4"});  // rank 0 holds the state
    REQUIRE(w.members[0].rank == 0);
    a = h.formed(w.version);
    REQUIRE(has_message(a, Kind::Log, "w1 on a slot 0 handed the job's state over to the workers that stay; it leaves"));
    w = published(a);
    REQUIRE(members(w) == Strings{"w3", "w4"});
    REQUIRE(w.draining == Strings{"w1"});
    REQUIRE(of(a, Kind::Stop).empty());
    a = h.exit("w1", 0);
    REQUIRE(has_message(a, Kind::Log, "w1 on a slot 0 left the job (drained)"));
    REQUIRE(of(a, Kind::Spawn).empty());
    REQUIRE(of(h.exit("w3", 0), Kind::Finish).empty());
    REQUIRE(finish_of(h.exit("w4", 0)).code == 0);
  }
  SECTION("a world with it that never forms does not release it") {
    w = published(h.ready_all());
    REQUIRE(members(w) == Strings{"w1", "w3", "w4"});
    a = h.advance(10s);
    REQUIRE(of(a, Kind::Publish).empty());
    REQUIRE(h.d.current_world().find("w1") != nullptr);
  }
  SECTION("no newcomer takes it over within the drain timeout: it drains, one warning") {
    a = h.advance(60s);
    REQUIRE(has_message(a, Kind::Warn, "w1 on a slot 0 kept the job's trained state for --elastic-drain-timeout 60 s "
                                       "after its host's removal and no newcomer took it over"));
    // It is now an ordinary draining worker (the world holds until the
    // newcomers are ready), and is not chosen again.
    REQUIRE(h.d.current_world().find("w1") == nullptr);
    REQUIRE_FALSE(has_message(h.advance(1s), Kind::Log, "keeps training"));
  }
  SECTION("its host is listed again: an ordinary member") {
    a = h.discover({{"a", 2}, {"b", 2}});
    REQUIRE(has_message(a, Kind::Log, "w1 on a slot 0: its host is listed again; it stays"));
    REQUIRE(ids(a, Kind::Spawn) == Strings{"w5"});  // a slot 1, freed by w2
    w = published(h.ready_all());
    REQUIRE(members(w) == Strings{"w1", "w3", "w4", "w5"});
    a = h.formed(w.version);
    REQUIRE(of(a, Kind::Publish).empty());  // nothing to hand over
  }
}

TEST_CASE("elastic driver: no keeper when someone staying holds the state, or without draining") {
  SECTION("a trained worker stays on another host") {
    Harness h(base_policy());
    form(h, {{"a", 1}, {"b", 1}});
    h.formed(1);
    auto a = h.discover({{"b", 1}, {"c", 1}});
    REQUIRE_FALSE(has_message(a, Kind::Log, "keeps training"));
    REQUIRE(published(a).draining == Strings{"w1"});
  }
  SECTION("--elastic-drain-timeout 0: stopped at once, as before") {
    auto p = base_policy();
    p.drain_timeout = 0ms;
    Harness h(p);
    form(h, {{"a", 1}});
    h.formed(1);
    auto a = h.discover({{"b", 1}});
    REQUIRE(ids(a, Kind::Stop) == Strings{"w1"});
    REQUIRE_FALSE(has_message(a, Kind::Log, "keeps training"));
  }
  SECTION("nobody has trained yet (world 1 never formed): stopped") {
    Harness h(base_policy());
    form(h, {{"a", 2}});
    auto a = h.discover({{"b", 2}});
    REQUIRE(ids(a, Kind::Stop) == Strings{"w1", "w2"});
  }
}

TEST_CASE("elastic driver: with --max-np 1 a keeper lets its one successor start") {
  auto p = base_policy();
  p.max_np = 1;
  Harness h(p);
  form(h, {{"a", 1}});
  h.formed(1);
  auto a = h.discover({{"b", 1}});
  REQUIRE(ids(a, Kind::Spawn) == Strings{"w2"});
  World w = published(h.ready_all());
  REQUIRE(members(w) == Strings{"w1", "w2"});  // max-np + 1, for one commit interval
  w = published(h.formed(w.version));
  REQUIRE(members(w) == Strings{"w2"});
  REQUIRE(w.draining == Strings{"w1"});
}

TEST_CASE("elastic driver: the last trained worker that stayed fails while others drain: one drainer is called back") {
  Harness h(base_policy());  // drain_timeout 60 s
  form(h, {{"a", 1}, {"b", 2}});
  h.formed(1);
  // b is dropped, c listed: w2 and w3 drain while w1 (the one holder that
  // stays) trains on; the newcomer w4 is not in a formed world yet.
  auto a = h.discover({{"a", 1}, {"c", 1}});
  REQUIRE(ids(a, Kind::Spawn) == Strings{"w4"});
  World w = published(a);
  REQUIRE(members(w) == Strings{"w1"});
  REQUIRE(w.draining == Strings{"w2", "w3"});

  SECTION("w1 crashes before the commit: w2 becomes a member again, keeps the state until a newcomer has it") {
    a = h.exit("w1", 1);
    REQUIRE(has_message(a, Kind::Log, "w2 on b slot 0 is called back from draining: no other worker holds the job's "
                                      "trained state any more; it stays until a newcomer has it (at most "
                                      "--elastic-drain-timeout 60 s)"));
    REQUIRE(ids(a, Kind::Spawn) == Strings{"w5"});  // w1's slot restarts
    REQUIRE(of(a, Kind::Stop).empty());
    w = published(a);
    REQUIRE(members(w) == Strings{"w2"});
    REQUIRE(w.draining == Strings{"w3"});  // the other drainer still leaves
    REQUIRE(has_message(h.exit("w3", 0), Kind::Log, "w3 on b slot 1 left the job (drained)"));
    w = published(h.ready_all());
    REQUIRE(members(w) == Strings{"w2", "w4", "w5"});
    a = h.formed(w.version);
    REQUIRE(has_message(a, Kind::Log, "w2 on b slot 0 handed the job's state over to the workers that stay; it leaves"));
    w = published(a);
    REQUIRE(members(w) == Strings{"w4", "w5"});
    REQUIRE(w.draining == Strings{"w2"});
    REQUIRE(has_message(h.exit("w2", 0), Kind::Log, "w2 on b slot 0 left the job (drained)"));
    REQUIRE(of(h.exit("w4", 0), Kind::Finish).empty());
    REQUIRE(finish_of(h.exit("w5", 0)).code == 0);
  }
  SECTION("it handed over, then every newcomer dies before it left: called back again") {
    h.exit("w1", 1);
    h.exit("w3", 0);
    w = published(h.ready_all());
    REQUIRE(members(w) == Strings{"w2", "w4", "w5"});
    w = published(h.formed(w.version));
    REQUIRE(w.draining == Strings{"w2"});
    h.exit("w4", 1);
    a = h.exit("w5", 1);
    REQUIRE(has_message(a, Kind::Log, "w2 on b slot 0 is called back from draining"));
    REQUIRE(h.d.current_world().find("w2") != nullptr);
  }
  SECTION("the called-back worker had already left: a departure, not the job's end") {
    h.exit("w1", 1);
    REQUIRE(members(h.d.current_world()) == Strings{"w2"});
    h.d.on_worker_left("w2", h.now);
    a = h.exit("w2", 0);
    REQUIRE(has_message(a, Kind::Log, "w2 on b slot 0 had left the job before it was called back (exited successfully)"));
    REQUIRE(of(a, Kind::Finish).empty());
    // w3 is called back in its place.
    REQUIRE(has_message(a, Kind::Log, "w3 on b slot 1 is called back from draining"));
    REQUIRE(members(published(a)) == Strings{"w3"});
  }
  SECTION("no newcomer takes it over within the drain timeout: it drains, one warning") {
    h.exit("w1", 1);
    a = h.advance(60s);
    REQUIRE(has_message(a, Kind::Warn, "w2 on b slot 0 kept the job's trained state for --elastic-drain-timeout 60 s"));
    REQUIRE(h.d.current_world().find("w2") == nullptr);
    // Called back once: not again.
    REQUIRE_FALSE(has_message(h.advance(1s), Kind::Log, "called back"));
  }
  SECTION("a newcomer already holds the state: nobody is called back") {
    w = published(h.ready_all());
    REQUIRE(members(w) == Strings{"w1", "w4"});
    h.formed(w.version);
    a = h.exit("w1", 1);
    REQUIRE_FALSE(has_message(a, Kind::Log, "called back"));
    REQUIRE(members(published(a)) == Strings{"w4"});
  }
  SECTION("without draining (--elastic-drain-timeout 0) nothing drains, so nothing is called back") {
    auto p = base_policy();
    p.drain_timeout = 0ms;
    Harness h0(p);
    form(h0, {{"a", 1}, {"b", 1}});
    h0.formed(1);
    REQUIRE(ids(h0.discover({{"a", 1}}), Kind::Stop) == Strings{"w2"});
    REQUIRE_FALSE(has_message(h0.exit("w1", 1), Kind::Log, "called back"));
  }
}

TEST_CASE("elastic driver: a trained worker that stays on another host keeps the drainers leaving") {
  Harness h(base_policy());
  form(h, {{"a", 2}, {"b", 1}});
  h.formed(1);
  REQUIRE(published(h.discover({{"a", 2}})).draining == Strings{"w3"});
  auto a = h.exit("w1", 1);  // w2 still holds the state
  REQUIRE_FALSE(has_message(a, Kind::Log, "called back"));
  World w = published(a);
  REQUIRE(members(w) == Strings{"w2"});
  REQUIRE(w.draining == Strings{"w3"});
}

TEST_CASE("elastic driver: a newcomer whose world formed but whose sync never finished holds nothing") {
  // The chaos test's lost run: a newcomer's world formed (its arrival
  // barrier completed), then failed during State::sync; when the trained
  // workers' host is dropped, the newcomer must not count as the holder.
  Harness h(base_policy());  // drain_timeout 60 s
  form(h, {{"a", 2}});
  h.formed(1);
  REQUIRE(ids(h.discover({{"a", 2}, {"b", 1}}), Kind::Spawn) == Strings{"w3"});
  World w = published(h.ready_all());
  REQUIRE(members(w) == Strings{"w1", "w2", "w3"});
  REQUIRE(w.holders == Strings{"w1", "w2"});
  REQUIRE(h.formed_unsynced(w.version).empty());
  REQUIRE(h.d.workers_not_holding() == Strings{"w3"});
  auto a = h.discover({{"b", 1}});
  REQUIRE(has_message(a, Kind::Log, "w1 on a slot 0 keeps training although host a no longer listed by discovery"));
  w = published(a);
  REQUIRE(members(w) == Strings{"w1", "w3"});
  REQUIRE(w.draining == Strings{"w2"});
  REQUIRE(w.holders == Strings{"w1"});

  SECTION("w3's sync of world 2 did finish: w1 hands over") {
    a = h.synced("w3", 2);
    REQUIRE(has_message(a, Kind::Log, "w1 on a slot 0 handed the job's state over to the workers that stay"));
    w = published(a);
    REQUIRE(members(w) == Strings{"w3"});
    REQUIRE(w.draining == Strings{"w1", "w2"});
    REQUIRE(w.holders == Strings{"w3"});
  }
  SECTION("w2 dies, failing world 2 before w3 synced: w1 stays until w3 synced in the world with it") {
    a = h.exit("w2", 137);
    REQUIRE(ids(a, Kind::DrainFailed) == Strings{"w2"});
    REQUIRE_FALSE(has_message(a, Kind::Log, "handed"));
    REQUIRE(h.d.current_world().find("w1") != nullptr);
    a = h.formed_unsynced(w.version);
    REQUIRE(of(a, Kind::Publish).empty());
    a = h.synced("w3", w.version);
    REQUIRE(has_message(a, Kind::Log, "w1 on a slot 0 handed the job's state over to the workers that stay"));
    REQUIRE(members(published(a)) == Strings{"w3"});
  }
}

TEST_CASE("elastic driver: a sync in a world that lists no holder while one runs gives nothing") {
  // w2 drains from the dropped host b and has already left (left_key) when
  // w1, the holder that stayed, dies: w2 cannot be called back. The
  // restarted slot's world lists no holder while w2 still runs, so syncing
  // there gives w3 only its own initial state -- until w2 exits: then no
  // holder runs, and what w3 trained since is all the job has.
  Harness h(base_policy());  // drain_timeout 60 s
  form(h, {{"a", 1}, {"b", 1}});
  h.formed(1);
  REQUIRE(h.d.workers_not_holding().empty());
  REQUIRE(published(h.discover({{"a", 1}})).draining == Strings{"w2"});
  h.d.on_worker_left("w2", h.now);
  auto a = h.exit("w1", 137);
  REQUIRE_FALSE(has_message(a, Kind::Log, "called back"));
  REQUIRE(ids(a, Kind::Spawn) == Strings{"w3"});
  World w = published(h.ready_all());
  REQUIRE(members(w) == Strings{"w3"});
  REQUIRE(w.draining == Strings{"w2"});
  REQUIRE(w.holders.empty());
  h.formed(w.version);  // w3 synced, with itself
  REQUIRE(h.d.workers_not_holding() == Strings{"w3"});
  REQUIRE(has_message(h.exit("w2", 0), Kind::Log, "w2 on b slot 0 left the job (drained)"));
  // w2 was the last holder: the job's state is now what w3 trained since.
  REQUIRE(h.d.workers_not_holding().empty());
  SECTION("the next world lists it as the holder, and the newcomer's sync gives the state") {
    REQUIRE(ids(h.discover({{"a", 2}}), Kind::Spawn) == Strings{"w4"});
    w = published(h.ready_all());
    REQUIRE(members(w) == Strings{"w3", "w4"});
    REQUIRE(w.holders == Strings{"w3"});
    h.formed(w.version);
    REQUIRE(h.d.workers_not_holding().empty());
  }
  SECTION("its host dropped, it is kept for the newcomers") {
    auto a2 = h.discover({{"c", 1}});
    REQUIRE(has_message(a2, Kind::Log, "w3 on a slot 0 keeps training although host a no longer listed"));
  }
}

TEST_CASE("elastic driver: a keeper's time runs out: the newcomers' own sync makes them the holders") {
  // Every trained host is dropped at once: w1 keeps the state, w2 drains.
  // The newcomers' world forms but never syncs; after
  // --elastic-drain-timeout the job lets the state go, and the newcomers'
  // own sync starts the state anew.
  Harness h(base_policy());  // drain_timeout 60 s
  form(h, {{"a", 2}});
  h.formed(1);
  auto a = h.discover({{"b", 2}});
  REQUIRE(has_message(a, Kind::Log, "w1 on a slot 0 keeps training although"));
  REQUIRE(published(a).draining == Strings{"w2"});
  World w = published(h.ready_all());
  REQUIRE(members(w) == Strings{"w1", "w3", "w4"});
  h.formed_unsynced(w.version);
  h.advance(59s);
  h.exit("w2", 0);  // drained
  a = h.advance(1s);
  REQUIRE(has_message(a, Kind::Warn, "w1 on a slot 0 kept the job's trained state"));
  w = published(a);
  REQUIRE(members(w) == Strings{"w3", "w4"});
  REQUIRE(w.holders.empty());
  h.formed(w.version);
  // The newcomers hold the (new) state at once, not only once w1 has left.
  REQUIRE(h.d.workers_not_holding() == Strings{"w1"});
}

TEST_CASE("elastic driver: a keeper's time and a drainer's run out together: nobody is called back") {
  // (A drainer dropped with the keeper reaches its drain timeout with it;
  // a later one cannot hold the state while a keeper is needed.)
  auto p = base_policy();
  p.drain_timeout = 60s;
  Harness h(p);
  form(h, {{"a", 2}});
  h.formed(1);
  auto a = h.discover({{"b", 2}});
  REQUIRE(published(a).draining == Strings{"w2"});
  World w = published(h.ready_all());
  h.formed_unsynced(w.version);
  a = h.advance(60s);  // w1's time and w2's drain run out together
  REQUIRE(has_message(a, Kind::Warn, "w1 on a slot 0 kept the job's trained state"));
  REQUIRE(ids(a, Kind::Stop) == Strings{"w2"});
  REQUIRE_FALSE(has_message(a, Kind::Log, "called back"));
  w = published(a);
  REQUIRE(members(w) == Strings{"w3", "w4"});
  REQUIRE(w.holders.empty());
  h.formed(w.version);
  // The newcomers hold the state now; a drainer still running is no keeper.
  auto ids_left = h.d.workers_not_holding();
  REQUIRE(std::find(ids_left.begin(), ids_left.end(), "w3") == ids_left.end());
  REQUIRE(std::find(ids_left.begin(), ids_left.end(), "w4") == ids_left.end());
  REQUIRE_FALSE(has_message(h.advance(1s), Kind::Log, "called back"));
}

TEST_CASE("elastic driver: a worker that never synced is not made a holder when the last one exits") {
  Harness h(base_policy());
  form(h, {{"a", 1}});
  h.formed(1);
  REQUIRE(ids(h.discover({{"a", 1}, {"b", 1}}), Kind::Spawn) == Strings{"w2"});
  World w = published(h.ready_all());
  h.formed_unsynced(w.version);
  h.exit("w1", 137);  // the one holder dies before w2 synced: the state is gone
  REQUIRE(h.d.workers_not_holding() == Strings{"w2", "w3"});  // w3: w1's slot restarted
}

TEST_CASE("elastic driver: synced reports for unknown workers, old or unpublished worlds are ignored") {
  Harness h(base_policy());
  form(h, {{"a", 2}});
  REQUIRE(h.synced("w9", 1).empty());
  REQUIRE(h.synced("w1", 7).empty());  // never published
  REQUIRE(h.d.workers_not_holding() == Strings{"w1", "w2"});
  h.synced("w1", 1);
  REQUIRE(h.d.workers_not_holding() == Strings{"w2"});
}

TEST_CASE("elastic driver: what is kept of hosts discovery no longer lists stays bounded") {
  auto p = base_policy();
  p.blacklist_failures = 2;
  Harness h(p);
  // Pods under fresh names (a Deployment): each one's worker crashes once,
  // then the pod is replaced by another.
  auto pods = [](const std::string& pod) {
    return std::vector<std::tuple<std::string, int, std::string>>{{"a", 1, "uid-a"}, {pod, 1, "uid-" + pod}};
  };
  auto on = [&](const std::string& host) {
    Strings out;
    for (const auto& [slot, id] : h.occupied) {
      if (slot.first == host) out.push_back(id);
    }
    return out;
  };
  h.discover_pods(pods("p0"));
  h.ready_all();
  h.formed(h.d.current_world().version);
  const std::size_t at_start = h.d.host_records();  // a's and p0's incarnations
  REQUIRE(at_start == 2);
  for (int i = 0; i < 200; ++i) {
    const std::string pod = "p" + std::to_string(i);
    REQUIRE(on(pod).size() == 1);
    REQUIRE(ids(h.exit(on(pod)[0], 1), Kind::Spawn).size() == 1);  // restarted there
    h.discover_pods(pods("p" + std::to_string(i + 1)));
    for (const auto& id : on(pod)) h.exit(id, 143);  // stopped with its pod
    h.ready_all();
    h.advance(50ms);
    h.formed(h.d.current_world().version);
    REQUIRE(h.d.current_world().size() == 2);
    h.advance(61s);  // the failure leaves the window
  }
  // a and p200, and p199 (its health, incarnation and since when it is
  // unlisted: it left at the last look).
  REQUIRE(h.d.host_records() <= at_start + 3);

  SECTION("a host that leaves within the failure window keeps its failures") {
    REQUIRE(on("p200").size() == 1);
    h.exit(on("p200")[0], 1);  // one failure of two
    h.discover_pods({{"a", 1, "uid-a"}});
    for (const auto& id : on("p200")) h.exit(id, 143);
    h.discover_pods({{"a", 1, "uid-a"}});  // gone, and no worker there
    h.advance(10s);
    auto a = h.discover_pods(pods("p200"));  // the same pod is listed again
    REQUIRE(ids(a, Kind::Spawn).size() == 1);
    h.ready_all();
    a = h.exit(on("p200")[0], 1);
    REQUIRE(has_message(a, Kind::Warn, "host p200 blacklisted until the end of the job after 2 failures"));
    // A blacklisted host is remembered after it leaves, and stays out.
    h.discover_pods({{"a", 1, "uid-a"}});
    h.advance(61s);
    h.discover_pods({{"a", 1, "uid-a"}});
    REQUIRE(h.d.is_blacklisted("p200", h.now));
    REQUIRE(of(h.discover_pods(pods("p200")), Kind::Spawn).empty());
  }
  SECTION("a host whose failures left the window is forgotten once gone, and comes back fresh") {
    h.exit(on("p200")[0], 1);
    h.discover_pods({{"a", 1, "uid-a"}});
    for (const auto& id : on("p200")) h.exit(id, 143);
    h.advance(61s);
    h.discover_pods({{"a", 1, "uid-a"}});
    REQUIRE(h.d.host_records() == 1);  // a's incarnation only
    h.discover_pods(pods("p200"));
    h.ready_all();
    auto a = h.exit(on("p200")[0], 1);  // one failure of two again
    REQUIRE_FALSE(has_message(a, Kind::Warn, "blacklisted"));
    REQUIRE_FALSE(h.d.is_blacklisted("p200", h.now));
  }
  SECTION("a lost host that never comes back is forgotten once its back-off is over") {
    auto a = h.exit(on("p200")[0], 255, "connection to p200 closed by remote host");
    REQUIRE(has_message(a, Kind::Warn, "restarting the slot in"));
    h.discover_pods({{"a", 1, "uid-a"}});
    REQUIRE(h.d.host_records() >= 3);  // p200 is remembered a while: a return is reported
    h.advance(59s);
    REQUIRE(has_message(h.discover_pods(pods("p200")), Kind::Log, "host p200 is back"));
    h.ready_all();
    REQUIRE(on("p200").size() == 1);
    h.exit(on("p200")[0], 255, "connection to p200 closed by remote host");
    h.discover_pods({{"a", 1, "uid-a"}});
    h.advance(61s);
    h.discover_pods({{"a", 1, "uid-a"}});
    REQUIRE(h.d.host_records() == 1);
  }
}

TEST_CASE("elastic driver: a drain below --min-np publishes a world that holds, then the next full one") {
  auto p = base_policy();
  p.min_np = 2;
  p.start_np = 2;
  p.elastic_timeout = 30s;
  Harness h(p);
  form(h, {{"a", 1}, {"b", 1}});
  h.formed(1);
  auto a = h.discover({{"a", 1}});
  REQUIRE(of(a, Kind::Stop).empty());
  World w = published(a);
  REQUIRE(w.hold);
  REQUIRE(members(w) == Strings{"w1"});
  REQUIRE(w.draining == Strings{"w2"});
  REQUIRE(has_message(a, Kind::Log, "world 2 holds: size 2 -> 1, below --min-np 2; left: w2 (b slot 0) (draining)"));
  REQUIRE(h.d.resets() == 0);  // nobody re-forms in it
  REQUIRE(h.d.unformed_worlds().empty());
  // w2 leaves at the commit; the survivor waits for a world of 2.
  h.d.on_worker_left("w2", h.now);
  a = h.exit("w2", 1);
  REQUIRE(has_message(a, Kind::Log, "left the job (drained"));
  REQUIRE(of(a, Kind::Publish).empty());
  SECTION("a host comes back within --elastic-timeout: the next world is a full one") {
    REQUIRE(ids(h.discover({{"a", 1}, {"c", 1}}), Kind::Spawn) == Strings{"w3"});
    w = published(h.ready_all());
    REQUIRE_FALSE(w.hold);
    REQUIRE(w.version == 3);
    REQUIRE(members(w) == Strings{"w1", "w3"});
    REQUIRE(h.d.resets() == 1);
  }
  SECTION("none does: the elastic timeout ends the job") {
    const ElasticAction f = finish_of(h.advance(30s));
    REQUIRE(f.code == exit_code::kElastic);
  }
}

TEST_CASE("elastic driver: a dropped host's workers stop at once when they never trained, when draining is off, "
          "or when they are not yet admitted") {
  SECTION("never in a formed world") {
    Harness h(base_policy());
    form(h, {{"a", 1}, {"b", 1}});  // world 1 published, not formed
    auto a = h.discover({{"a", 1}});
    REQUIRE(ids(a, Kind::Stop) == Strings{"w2"});
    REQUIRE(published(a).draining.empty());
    REQUIRE(of(a, Kind::DrainFailed).empty());
  }
  SECTION("--elastic-drain-timeout 0") {
    auto p = base_policy();
    p.drain_timeout = 0ms;
    Harness h(p);
    form(h, {{"a", 1}, {"b", 1}});
    h.formed(1);
    auto a = h.discover({{"a", 1}});
    REQUIRE(ids(a, Kind::Stop) == Strings{"w2"});
    REQUIRE(published(a).draining.empty());
  }

  SECTION("a newcomer not yet admitted") {
    Harness h(base_policy());
    form(h, {{"a", 1}});
    h.discover({{"a", 1}, {"b", 1}});
    h.ready_all();
    h.formed(2);
    auto a = h.discover({{"a", 1}, {"b", 1}, {"c", 1}});
    REQUIRE(ids(a, Kind::Spawn) == Strings{"w3"});
    a = h.discover({{"a", 1}, {"b", 1}});
    REQUIRE(ids(a, Kind::Stop) == Strings{"w3"});
    REQUIRE(of(a, Kind::Publish).empty());
  }
}

TEST_CASE("elastic driver: a failed worker leaves the world at once and its slot restarts with a new id") {
  Harness h(base_policy());
  form(h, {{"a", 2}});
  auto a = h.exit("w2", 137);
  REQUIRE(has_message(a, Kind::Warn, "w2 on a slot 1 failed (killed by SIGKILL"));
  REQUIRE(has_message(a, Kind::Warn, "restarting the slot"));
  World w = published(a);
  REQUIRE(members(w) == Strings{"w1"});
  REQUIRE(w.reason.find("w2 on a slot 1 failed") != std::string::npos);
  auto spawns = of(a, Kind::Spawn);
  REQUIRE(spawns.size() == 1);
  REQUIRE((spawns[0]->worker_id == "w3" && spawns[0]->host == "a" && spawns[0]->slot == 1));
  REQUIRE(of(a, Kind::Stop).empty());
  w = published(h.ready_all());
  REQUIRE(members(w) == Strings{"w1", "w3"});
  REQUIRE(w.version == 3);

  // A lost worker (its SSH connection dropped) is a failure too.
  a = h.exit("w3", 255, "connection to a lost");
  REQUIRE(has_message(a, Kind::Warn, "lost: connection to a lost"));
  REQUIRE(members(published(a)) == Strings{"w1"});
}

TEST_CASE("elastic driver: repeated failures blacklist a host, one crash leaves its healthy workers alone") {
  auto p = base_policy();
  p.blacklist_failures = 2;
  p.failure_window = 30s;
  p.cooldown_min = 10s;
  p.cooldown_max = 10s;
  Harness h(p);
  form(h, {{"a", 1}, {"b", 2}});  // w1 a0, w2 b0, w3 b1

  auto a = h.exit("w2", 1);
  REQUIRE(of(a, Kind::Stop).empty());  // w3 on the same host keeps running
  REQUIRE(ids(a, Kind::Spawn) == Strings{"w4"});
  REQUIRE_FALSE(h.d.is_blacklisted("b", h.now));
  h.ready_all();

  // Failures outside the window do not add up.
  h.advance(31s);
  a = h.exit("w4", 1);
  REQUIRE_FALSE(h.d.is_blacklisted("b", h.now));
  REQUIRE(ids(a, Kind::Spawn) == Strings{"w5"});
  h.ready_all();

  h.advance(5s);
  a = h.exit("w5", 1);
  REQUIRE(h.d.is_blacklisted("b", h.now));
  REQUIRE(has_message(a, Kind::Warn, "host b blacklisted for 10 s after 2 failures within 30 s"));
  REQUIRE(has_message(a, Kind::Warn, "not restarting it (host blacklisted)"));
  REQUIRE(ids(a, Kind::Stop) == Strings{"w3"});
  REQUIRE(of(a, Kind::Spawn).empty());
  World w = published(a);
  REQUIRE(members(w) == Strings{"w1"});
  REQUIRE(w.reason.find("host b blacklisted") != std::string::npos);
  REQUIRE(h.exit("w3", 143).empty());
  // Discovery still lists b: it is ignored during the cooldown.
  REQUIRE(h.discover({{"a", 1}, {"b", 2}}).empty());
  REQUIRE(h.d.next_deadline() == h.now + 10s);
  REQUIRE(h.advance(9s).empty());

  a = h.advance(1s);
  REQUIRE_FALSE(h.d.is_blacklisted("b", h.now));
  REQUIRE(has_message(a, Kind::Log, "host b is usable again"));
  REQUIRE(ids(a, Kind::Spawn) == Strings{"w6", "w7"});
  h.ready_all();
  REQUIRE(members(h.d.current_world()) == Strings{"w1", "w6", "w7"});

  // Blacklisted a second time: the cooldown doubles.
  h.exit("w6", 1);
  h.ready_all();
  a = h.exit("w7", 1);
  REQUIRE(has_message(a, Kind::Warn, "host b blacklisted for 20 s"));
  REQUIRE(h.d.is_blacklisted("b", h.now + 19s));
  REQUIRE_FALSE(h.d.is_blacklisted("b", h.now + 20s));
}

TEST_CASE("elastic driver: cooldowns are drawn from the range and doubled up to 64 times") {
  auto p = base_policy();
  p.blacklist_failures = 1;
  p.cooldown_min = 1s;
  p.cooldown_max = 2s;
  p.ready_timeout = 10000s;
  p.failure_window = 1000s;
  for (uint64_t seed : {1, 2, 3}) {
    Harness h(p, seed);
    form(h, {{"a", 1}, {"b", 1}});
    for (int round = 0; round < 8; ++round) {
      std::string victim = h.occupied.at({"b", 0});
      h.exit(victim, 1);
      REQUIRE(h.d.is_blacklisted("b", h.now));
      const int factor = 1 << std::min(round, 6);
      // Blacklisted for at least min * factor, at most max * factor.
      REQUIRE(h.d.is_blacklisted("b", h.now + factor * 1s - 1ms));
      REQUIRE_FALSE(h.d.is_blacklisted("b", h.now + factor * 2s));
      auto next = h.d.next_deadline();
      REQUIRE(next);
      h.advance(std::chrono::duration_cast<std::chrono::milliseconds>(*next - h.now));
      REQUIRE_FALSE(h.d.is_blacklisted("b", h.now));
      REQUIRE(h.occupied.count({"b", 0}) == 1);
      h.ready_all();
    }
  }
}

TEST_CASE("elastic driver: with no cooldown range a blacklisted host stays out until the end") {
  auto p = base_policy();
  p.blacklist_failures = 1;
  Harness h(p);
  form(h, {{"a", 1}, {"b", 1}});
  auto a = h.exit("w2", 1);
  REQUIRE(has_message(a, Kind::Warn, "host b blacklisted until the end of the job"));
  REQUIRE_FALSE(h.d.next_deadline());
  h.advance(std::chrono::hours(10));
  REQUIRE(h.d.is_blacklisted("b", h.now));
  REQUIRE(of(h.discover({{"b", 1}, {"a", 1}}), Kind::Spawn).empty());
}

TEST_CASE("elastic driver: more re-formations than --reset-limit end the job with kElastic") {
  auto p = base_policy();
  p.reset_limit = 1;
  Harness h(p);
  form(h, {{"a", 2}});
  auto a = h.exit("w2", 1);
  REQUIRE(members(published(a)) == Strings{"w1"});  // reset 1: allowed
  REQUIRE(h.d.resets() == 1);
  a = h.ready_all();  // w3 would make reset 2
  REQUIRE(of(a, Kind::Publish).empty());
  const ElasticAction f = finish_of(a);
  REQUIRE(f.code == exit_code::kElastic);
  REQUIRE(f.message.find("--reset-limit 1") != std::string::npos);
  REQUIRE(ids(a, Kind::Stop) == Strings{"w1", "w3"});
  REQUIRE_FALSE(h.d.done());
  h.exit("w1", 143);
  h.exit("w3", 143);
  REQUIRE(h.d.done());
}

TEST_CASE("elastic driver: below --min-np longer than --elastic-timeout ends the job, no small world") {
  auto p = base_policy();
  p.min_np = 2;
  p.start_np = 2;
  p.elastic_timeout = 5s;
  Harness h(p);
  form(h, {{"a", 1}, {"b", 1}});
  auto a = h.discover({{"a", 1}});
  REQUIRE(ids(a, Kind::Stop) == Strings{"w2"});
  REQUIRE(of(a, Kind::Publish).empty());  // a world of 1 < min-np is never published
  h.exit("w2", 143);

  SECTION("the host comes back in time: the job goes on") {
    h.advance(4s);
    REQUIRE(ids(h.discover({{"a", 1}, {"b", 1}}), Kind::Spawn) == Strings{"w3"});
    World w = published(h.ready_all());
    REQUIRE(members(w) == Strings{"w1", "w3"});
    REQUIRE(w.reason.find("host b no longer listed") != std::string::npos);
    REQUIRE(of(h.advance(10s), Kind::Finish).empty());
  }
  SECTION("it does not: kElastic after the timeout") {
    REQUIRE(of(h.advance(4900ms), Kind::Finish).empty());
    a = h.advance(100ms);
    const ElasticAction f = finish_of(a);
    REQUIRE(f.code == exit_code::kElastic);
    REQUIRE(f.message.find("fewer than --min-np 2") != std::string::npos);
    REQUIRE(ids(a, Kind::Stop) == Strings{"w1"});
    h.exit("w1", 143);
    REQUIRE(h.d.done());
  }
}

TEST_CASE("elastic driver: too few slots for -np within --elastic-timeout ends the job") {
  auto p = base_policy();
  p.start_np = 3;
  p.elastic_timeout = 5s;
  Harness h(p);
  h.discover({{"a", 2}});
  REQUIRE(h.d.next_deadline() == h.now + 5s);
  auto a = h.advance(5s);
  const ElasticAction f = finish_of(a);
  REQUIRE(f.code == exit_code::kElastic);
  REQUIRE(f.message.find("only 2 usable slots") != std::string::npos);
  REQUIRE(h.d.done());
}

TEST_CASE("elastic driver: survivors keep their order and the old rank 0 stays rank 0") {
  Harness h(base_policy());
  form(h, {{"a", 2}, {"b", 2}});  // w1 a0, w2 a1, w3 b0, w4 b1
  World w = published(h.exit("w2", 1));
  REQUIRE(members(w) == Strings{"w1", "w3", "w4"});
  REQUIRE(w.members[0].rank == 0);
  w = published(h.ready_all());  // w5 restarts a1 and joins last
  REQUIRE(members(w) == Strings{"w1", "w3", "w4", "w5"});
  REQUIRE(w.members[3].host == "a");
  REQUIRE(w.members[3].local_rank == 1);
  REQUIRE(w.members[1].local_rank == 0);
  // Hosts interleave (a b b a); ranks stay positions and cross ranks follow
  // rank order at each local rank: b before a at local rank 1.
  for (const auto& m : w.members) {
    CHECK(m.local_size == 2);
    CHECK(m.cross_size == 2);
  }
  CHECK((w.members[0].cross_rank == 0 && w.members[1].cross_rank == 1));
  CHECK((w.members[2].local_rank == 1 && w.members[2].cross_rank == 0 && w.members[3].cross_rank == 1));
  // Rank 0 dies: the lowest surviving rank becomes rank 0.
  w = published(h.exit("w1", 1));
  REQUIRE(members(w) == Strings{"w3", "w4", "w5"});
  REQUIRE(w.members[0].host == "b");
}

TEST_CASE("elastic driver: the job succeeds when every member exits 0") {
  Harness h(base_policy());
  form(h, {{"a", 2}});
  h.discover({{"a", 2}, {"b", 1}});  // w3 starts but is not admitted yet
  auto a = h.exit("w1", 0);
  REQUIRE(has_message(a, Kind::Log, "w1 (a slot 0) exited 0: the job is finishing"));
  REQUIRE(ids(a, Kind::Stop) == Strings{"w3"});  // not a member: stopped
  REQUIRE(of(a, Kind::Finish).empty());
  // Finishing: nothing spawned, nothing published.
  REQUIRE(h.discover({{"a", 2}, {"b", 1}, {"c", 4}}).empty());
  REQUIRE(h.exit("w3", 143).empty());
  a = h.exit("w2", 0);
  const ElasticAction f = finish_of(a);
  REQUIRE(f.code == 0);
  REQUIRE(f.message.empty());
  REQUIRE(h.d.done());
}

TEST_CASE("elastic driver: one member exits 0, another 1: the job fails naming it") {
  Harness h(base_policy());
  form(h, {{"a", 3}});
  REQUIRE(of(h.exit("w1", 0), Kind::Finish).empty());
  REQUIRE(of(h.exit("w2", 1), Kind::Finish).empty());
  auto a = h.exit("w3", 0);
  const ElasticAction f = finish_of(a);
  REQUIRE(f.code == 1);
  REQUIRE(f.message.find("w2 (a slot 1) exited with code 1") != std::string::npos);
  REQUIRE(f.message.find("w3") == std::string::npos);
  REQUIRE(h.d.done());
}

TEST_CASE("elastic driver: a member lost while the job finishes fails it with the launch code") {
  Harness h(base_policy());
  form(h, {{"a", 2}});
  REQUIRE(of(h.exit("w1", 0), Kind::Finish).empty());
  auto a = h.exit("w2", 255, "connection to a dropped");
  const ElasticAction f = finish_of(a);
  REQUIRE(f.code == exit_code::kLaunch);
  REQUIRE(f.message.find("w2 (a slot 1) lost: connection to a dropped") != std::string::npos);
}

TEST_CASE("elastic driver: members that do not exit within the grace are stopped and named") {
  Harness h(base_policy());
  form(h, {{"a", 3}});
  h.exit("w2", 0);
  REQUIRE(h.d.next_deadline() == h.now + 5s);
  REQUIRE(h.advance(4s).empty());
  auto a = h.advance(1s);
  REQUIRE(ids(a, Kind::Stop) == Strings{"w1", "w3"});
  const ElasticAction f = finish_of(a);
  REQUIRE(f.code == exit_code::kElastic);
  REQUIRE(f.message.find("w1 (a slot 0), w3 (a slot 2) did not exit within 5 s after w2 (a slot 1) exited 0") !=
          std::string::npos);
  REQUIRE_FALSE(h.d.done());
  h.exit("w1", 143);
  h.exit("w3", 143);
  REQUIRE(h.d.done());
}

TEST_CASE("elastic driver: a signal stops every worker and ends with 128+signal once all exited") {
  Harness h(base_policy());
  form(h, {{"a", 2}});
  h.discover({{"a", 2}, {"b", 1}});
  auto a = h.signal(2);
  REQUIRE(ids(a, Kind::Stop) == Strings{"w1", "w2", "w3"});
  REQUIRE(of(a, Kind::Finish).empty());
  REQUIRE_FALSE(h.d.next_deadline());
  // Exits after a signal are not failures: no respawn, no world.
  REQUIRE(h.exit("w1", 130).empty());
  REQUIRE(h.discover({{"a", 2}, {"b", 1}, {"c", 1}}).empty());
  REQUIRE(h.exit("w2", 130).empty());
  a = h.exit("w3", 137);
  const ElasticAction f = finish_of(a);
  REQUIRE(f.code == 130);
  REQUIRE(f.message.find("SIG") == std::string::npos);  // strsignal's words, not a status
  REQUIRE(h.d.done());
}

TEST_CASE("elastic driver: a worker failing before it is ready during formation ends the job") {
  Harness h(base_policy());
  h.discover({{"a", 3}});
  h.ready("w1");
  auto a = h.exit("w2", 127);
  const ElasticAction f = finish_of(a);
  REQUIRE(f.code == 127);
  REQUIRE(f.message.find("w2 on a slot 1 failed before the job formed: command not found") != std::string::npos);
  REQUIRE(ids(a, Kind::Stop) == Strings{"w1", "w3"});
  REQUIRE(of(a, Kind::Spawn).empty());

  SECTION("a worker that could not be started at all (lost) is a launch failure") {
    Harness g(base_policy());
    g.discover({{"far", 1}});
    const ElasticAction lf = finish_of(g.exit("w1", 255, "ssh: connect to host far: Connection refused"));
    REQUIRE(lf.code == exit_code::kLaunch);
    REQUIRE(lf.message.find("Connection refused") != std::string::npos);
  }
  SECTION("also when the other hosts offer fewer than -np slots") {
    auto p = base_policy();
    p.start_np = 2;
    Harness g(p);
    g.discover({{"a", 1}, {"far", 1}});
    g.ready("w1");
    const ElasticAction lf = finish_of(g.exit("w2", 255, "ssh: connect to host far: Connection refused"));
    REQUIRE(lf.code == exit_code::kLaunch);
  }
}

TEST_CASE("elastic driver: a host lost during formation is retried when the others offer -np slots") {
  Harness h(base_policy());  // -np 1
  h.discover({{"a", 1}, {"far", 1}});
  REQUIRE(h.d.live_workers() == Strings{"w1", "w2"});
  auto a = h.exit("w2", 255, "ssh: connect to host far: Connection refused");
  REQUIRE(of(a, Kind::Finish).empty());
  REQUIRE(has_message(a, Kind::Warn,
                      "w2 on far slot 0 failed (lost: ssh: connect to host far: Connection refused); "
                      "host unreachable: restarting the slot in 1 s (at once if the host comes back)"));
  REQUIRE(of(a, Kind::Spawn).empty());  // after the back-off
  REQUIRE(ids(h.advance(1s), Kind::Spawn) == Strings{"w3"});
  // w3 (a retry on a failing host) does not hold back the first world
  a = h.ready("w1");
  REQUIRE(h.d.current_world().version == 1);
  REQUIRE(h.d.current_world().size() == 1);
  // more losses back off longer (2 s, 4 s) but never blacklist the host;
  // the job goes on without it meanwhile
  h.exit("w3", 255, "ssh: connect to host far: Connection refused");
  REQUIRE(h.advance(1900ms).empty());
  REQUIRE(ids(h.advance(100ms), Kind::Spawn) == Strings{"w4"});
  a = h.exit("w4", 255, "ssh: connect to host far: Connection refused");
  REQUIRE(has_message(a, Kind::Warn, "restarting the slot in 4 s"));
  REQUIRE_FALSE(h.d.is_blacklisted("far", h.now));
  REQUIRE(of(a, Kind::Spawn).empty());
  REQUIRE(of(a, Kind::Finish).empty());
  REQUIRE(h.d.current_world().size() == 1);
  REQUIRE(h.d.next_deadline() == h.now + 4s);
  // a retry that does get ready joins as a scale-up
  SECTION("a retry that succeeds joins the running job") {
    Harness g(base_policy());
    g.discover({{"a", 1}, {"far", 1}});
    g.exit("w2", 255, "connection reset");
    g.ready("w1");
    REQUIRE(g.d.current_world().version == 1);
    g.advance(1s);
    g.ready("w3");
    g.advance(50ms);
    REQUIRE(g.d.current_world().version == 2);
    REQUIRE(g.d.current_world().size() == 2);
  }
}

TEST_CASE("elastic driver: a worker container restarted in place recovers a job at np = min-np = max-np") {
  // The chart's elastic job: np = min-np = max-np = 2, horovodrun's default
  // blacklist (3 failures in 60 s, until the end of the job). Kubernetes
  // restarts the crashed container under the same name and IP: SSH drops,
  // then is refused while sshd starts again.
  auto p = base_policy();
  p.start_np = 2;
  p.min_np = 2;
  p.max_np = 2;
  p.elastic_timeout = 600s;
  Harness h(p);
  form(h, {{"w-0", 1}, {"w-1", 1}});  // w1, w2
  REQUIRE(h.d.current_world().version == 1);
  auto a = h.exit("w2", 255, "connection to w-1 closed by remote host");
  REQUIRE(of(a, Kind::Publish).empty());  // 1 < min-np: the survivor waits in reset()
  for (int i = 0; i < 6; ++i) {  // refused again and again while sshd restarts
    auto next = h.d.next_deadline();
    REQUIRE(next);
    a = h.advance(std::chrono::duration_cast<std::chrono::milliseconds>(*next - h.now));
    auto spawns = of(a, Kind::Spawn);
    if (spawns.empty()) continue;  // the elastic-timeout deadline is further
    REQUIRE(spawns.size() == 1);
    REQUIRE(spawns[0]->host == "w-1");
    a = h.exit(spawns[0]->worker_id, 255, "ssh: connect to host w-1 port 22: Connection refused");
    REQUIRE(of(a, Kind::Finish).empty());
    REQUIRE_FALSE(h.d.is_blacklisted("w-1", h.now));
  }
  // sshd answers: the next retry gets ready and the job re-forms at size 2.
  auto next = h.d.next_deadline();
  REQUIRE(next);
  REQUIRE(*next - h.now <= 30s);  // the back-off is capped
  a = h.advance(std::chrono::duration_cast<std::chrono::milliseconds>(*next - h.now));
  REQUIRE(ids(a, Kind::Spawn).size() == 1);
  const std::string back = ids(a, Kind::Spawn)[0];
  a = h.ready(back);
  REQUIRE(has_message(a, Kind::Log, "host w-1 is back (a worker there got ready after a loss): a fresh host"));
  h.advance(50ms);
  REQUIRE(members(h.d.current_world()) == Strings{"w1", back});
  REQUIRE(h.finishes == 0);
  // Fresh: the next loss backs off 1 s again.
  a = h.exit(back, 255, "connection reset");
  REQUIRE(has_message(a, Kind::Warn, "restarting the slot in 1 s"));
}

TEST_CASE("elastic driver: a host that comes back with a new incarnation is a fresh host") {
  auto p = base_policy();
  p.blacklist_failures = 2;  // no cooldown range: blacklisted until the end of the job
  Harness h(p);
  h.discover_pods({{"a", 1, "uid-a/198.18.0.2/0"}, {"b", 1, "uid-b/198.18.0.3/0"}});
  h.ready_all();  // w1 a, w2 b
  REQUIRE(h.d.current_world().size() == 2);

  SECTION("a container restart in place (same pod, restart count + 1) lifts a blacklisting") {
    h.exit("w2", 1);  // the training crashed twice: blacklisted
    h.ready_all();
    auto a = h.exit("w3", 1);
    REQUIRE(has_message(a, Kind::Warn, "host b blacklisted until the end of the job"));
    REQUIRE(of(h.discover_pods({{"a", 1, "uid-a/198.18.0.2/0"}, {"b", 1, "uid-b/198.18.0.3/0"}}), Kind::Spawn)
                .empty());  // the same incarnation: still out
    a = h.discover_pods({{"a", 1, "uid-a/198.18.0.2/0"}, {"b", 1, "uid-b/198.18.0.3/1"}});
    REQUIRE(has_message(a, Kind::Log, "host b is back (a new pod or container): a fresh host (no longer blacklisted)"));
    REQUIRE_FALSE(h.d.is_blacklisted("b", h.now));
    REQUIRE(ids(a, Kind::Spawn) == Strings{"w4"});
    // Fresh: one more crash does not blacklist it (the count starts again).
    h.ready_all();
    h.exit("w4", 1);
    REQUIRE_FALSE(h.d.is_blacklisted("b", h.now));
  }
  SECTION("a pod recreated under the same name (a StatefulSet) before its workers were seen lost") {
    // The API's events arrive before hvdrun notices the SSH connection is
    // gone (a deleted pod's address may never answer again).
    auto a = h.discover_pods({{"a", 1, "uid-a/198.18.0.2/0"}, {"b", 1, "uid-b2/198.18.0.3/0"}});
    REQUIRE(ids(a, Kind::Stop) == Strings{"w2"});  // it ran in the old pod
    REQUIRE(has_message(a, Kind::Log, "host b was replaced or restarted (a new pod or container): stopping its 1 worker"));
    REQUIRE(members(published(a)) == Strings{"w1"});
    REQUIRE(published(a).reason.find("host b was replaced or restarted") != std::string::npos);
    a = h.exit("w2", 143);  // asked for: not a failure
    REQUIRE(ids(a, Kind::Spawn) == Strings{"w3"});
    h.ready_all();
    h.advance(50ms);
    REQUIRE(members(h.d.current_world()) == Strings{"w1", "w3"});
  }
  SECTION("hosts without an incarnation (a discovery script) keep theirs") {
    h.discover({{"a", 1}, {"b", 1}});
    auto a = h.discover_pods({{"a", 1, "uid-a/198.18.0.2/0"}, {"b", 1, "uid-b/198.18.0.3/0"}});
    REQUIRE(of(a, Kind::Stop).empty());
  }
}

TEST_CASE("elastic driver: after a loss, a host dropped by discovery and listed again is retried at once") {
  // The discovery script's view of a pod deleted and recreated under the
  // same name (or a restarted container): not Ready, so not listed; Ready
  // again, listed again. No incarnations.
  auto p = base_policy();
  p.unreachable_backoff = 5s;
  Harness h(p);
  form(h, {{"a", 1}, {"b", 1}});
  auto a = h.exit("w2", 255, "connection to b closed by remote host");
  REQUIRE(has_message(a, Kind::Warn, "restarting the slot in 5 s"));
  REQUIRE(of(a, Kind::Spawn).empty());
  REQUIRE(of(h.discover({{"a", 1}}), Kind::Spawn).empty());
  a = h.discover({{"a", 1}, {"b", 1}});
  REQUIRE(has_message(a, Kind::Log, "host b is back (listed by discovery again): a fresh host"));
  REQUIRE(ids(a, Kind::Spawn) == Strings{"w3"});
  // Several slots of one host lost at once are one loss episode.
  h.discover({{"a", 1}, {"b", 1}, {"c", 3}});
  h.ready_all();
  h.advance(50ms);
  REQUIRE(h.d.current_world().size() == 5);
  std::vector<std::string> on_c;
  for (const auto& [slot, id] : h.occupied) {
    if (slot.first == "c") on_c.push_back(id);
  }
  REQUIRE(on_c.size() == 3);
  for (const auto& id : on_c) {
    a = h.exit(id, 255, "connection to c closed by remote host");
    REQUIRE(has_message(a, Kind::Warn, "restarting the slot in 5 s"));
  }
  a = h.advance(5s);
  REQUIRE(of(a, Kind::Spawn).size() == 3);
}

TEST_CASE("elastic driver: workers not ready within ready_timeout") {
  auto p = base_policy();
  p.ready_timeout = 3s;
  Harness h(p);
  SECTION("during formation: the job ends with kLaunch") {
    h.discover({{"a", 2}});
    h.ready("w1");
    REQUIRE(h.d.next_deadline() == h.now + 3s);
    auto a = h.advance(3s);
    const ElasticAction f = finish_of(a);
    REQUIRE(f.code == exit_code::kLaunch);
    REQUIRE(f.message.find("w2 on a slot 1 did not become ready within 3 s") != std::string::npos);
  }
  SECTION("during formation, on a host whose loss leaves -np slots elsewhere: stopped and retried") {
    h.discover({{"a", 1}, {"slow", 1}});
    h.ready("w1");
    REQUIRE(h.d.current_world().version == 0);
    auto a = h.advance(3s);
    REQUIRE(of(a, Kind::Finish).empty());
    REQUIRE(ids(a, Kind::Stop) == Strings{"w2"});
    REQUIRE(h.d.current_world().version == 1);  // w1 alone, not held back by w2
    a = h.exit("w2", 143);
    REQUIRE(ids(a, Kind::Spawn) == Strings{"w3"});  // the retry
    REQUIRE(h.d.current_world().size() == 1);
  }
  SECTION("later: the worker is stopped, counted as a failure and its slot restarted") {
    form(h, {{"a", 1}});
    h.discover({{"a", 1}, {"b", 1}});  // w2, never ready
    auto a = h.advance(3s);
    REQUIRE(ids(a, Kind::Stop) == Strings{"w2"});
    REQUIRE(has_message(a, Kind::Warn, "w2 on b slot 0 did not become ready within 3 s"));
    REQUIRE(of(a, Kind::Finish).empty());
    REQUIRE(of(a, Kind::Spawn).empty());  // its slot is busy until it exits
    a = h.exit("w2", 143);
    REQUIRE(ids(a, Kind::Spawn) == Strings{"w3"});
    REQUIRE(members(h.d.current_world()) == Strings{"w1"});
  }
}

TEST_CASE("elastic driver: max-np holds when hosts grow") {
  auto p = base_policy();
  p.max_np = 3;
  Harness h(p);
  form(h, {{"a", 2}});
  auto a = h.discover({{"a", 2}, {"b", 4}});
  REQUIRE(ids(a, Kind::Spawn) == Strings{"w3"});
  h.ready_all();
  REQUIRE(h.d.current_world().size() == 3);
  REQUIRE(of(h.discover({{"a", 2}, {"b", 4}, {"c", 8}}), Kind::Spawn).empty());
  // A failure frees a place; the restart goes to the first free slot.
  a = h.exit("w1", 1);
  auto spawns = of(a, Kind::Spawn);
  REQUIRE(spawns.size() == 1);
  REQUIRE((spawns[0]->host == "a" && spawns[0]->slot == 0));
}

TEST_CASE("elastic driver: a host offering fewer slots has its excess workers stopped") {
  Harness h(base_policy());
  form(h, {{"a", 3}, {"b", 1}});  // w1..w3 on a, w4 on b
  auto a = h.discover({{"a", 1}, {"b", 1}});
  REQUIRE(ids(a, Kind::Stop) == Strings{"w2", "w3"});
  World w = published(a);
  REQUIRE(members(w) == Strings{"w1", "w4"});
  REQUIRE(w.reason.find("host a now offers 1 slot") != std::string::npos);
  h.exit("w2", 143);
  REQUIRE(h.exit("w3", 143).empty());
}

TEST_CASE("elastic driver: workers that never get ready count towards the host's blacklist") {
  auto p = base_policy();
  p.ready_timeout = 2s;
  p.blacklist_failures = 2;
  Harness h(p);
  form(h, {{"a", 1}});
  h.discover({{"a", 1}, {"b", 1}});  // w2 hangs at start
  h.advance(2s);
  REQUIRE(ids(h.exit("w2", 143), Kind::Spawn) == Strings{"w3"});  // one failure: restarted
  auto a = h.advance(2s);  // w3 hangs too
  REQUIRE(has_message(a, Kind::Warn, "host b blacklisted"));
  REQUIRE(h.d.is_blacklisted("b", h.now));
  REQUIRE(of(h.exit("w3", 143), Kind::Spawn).empty());
  REQUIRE(members(h.d.current_world()) == Strings{"w1"});
}

// The end-of-job race: a newcomer is admitted in a world published just
// after the members' last commit. The members never arrive at its barrier;
// they exit 0. Waiting for the newcomer would end a finished training with
// a grace timeout (kElastic).
TEST_CASE("elastic driver: a newcomer in a world that never formed is stopped when the job ends, not waited for") {
  Harness h(base_policy());
  form(h, {{"a", 2}});
  REQUIRE(h.d.unformed_worlds() == std::vector<uint64_t>{1});
  REQUIRE(h.formed(1).empty());
  REQUIRE(h.d.unformed_worlds().empty());
  h.discover({{"a", 2}, {"b", 1}});
  World w = published(h.ready("w3"));
  REQUIRE(members(w) == Strings{"w1", "w2", "w3"});
  REQUIRE(h.d.unformed_worlds() == std::vector<uint64_t>{2});
  auto a = h.exit("w1", 0);
  REQUIRE(has_message(a, Kind::Log,
                      "w1 (a slot 0) exited 0: the job is finishing; waiting up to 5 s for 1 other member; "
                      "stopping w3 (b slot 0): admitted to world 2, which never formed"));
  REQUIRE(ids(a, Kind::Stop) == Strings{"w3"});
  REQUIRE(of(a, Kind::Finish).empty());
  a = h.exit("w2", 0);
  const ElasticAction f = finish_of(a);
  REQUIRE(f.code == 0);
  REQUIRE(f.message.empty());
  REQUIRE_FALSE(h.d.done());  // w3 is still being stopped
  REQUIRE(h.exit("w3", 143).empty());  // its signal status does not count
  REQUIRE(h.d.done());
}

TEST_CASE("elastic driver: scale-up 1 -> 2 right after the last commit still ends with success") {
  // World 1 has one member: it needs no barrier and counts as formed.
  Harness h(base_policy());
  form(h, {{"a", 1}});
  REQUIRE(h.d.unformed_worlds().empty());
  h.discover({{"a", 2}});
  REQUIRE(members(published(h.ready("w2"))) == Strings{"w1", "w2"});
  auto a = h.exit("w1", 0);
  REQUIRE(ids(a, Kind::Stop) == Strings{"w2"});
  REQUIRE(finish_of(a).code == 0);
  h.exit("w2", 143);
  REQUIRE(h.d.done());
}

TEST_CASE("elastic driver: a newcomer whose world formed is a member the ending waits for") {
  Harness h(base_policy());
  form(h, {{"a", 2}});
  h.formed(1);
  h.discover({{"a", 2}, {"b", 1}});
  published(h.ready("w3"));
  h.discover({{"a", 2}, {"b", 2}});
  published(h.ready("w4"));  // world 3 supersedes world 2
  REQUIRE(h.d.unformed_worlds() == std::vector<uint64_t>{2, 3});
  h.formed(3);
  REQUIRE(h.d.unformed_worlds().empty());  // world 2 cannot matter any more
  REQUIRE(h.formed(2).empty());  // late or unknown reports are ignored
  auto a = h.exit("w1", 0);
  REQUIRE(ids(a, Kind::Stop).empty());
  REQUIRE(has_message(a, Kind::Log, "waiting up to 5 s for 3 other members"));
  h.exit("w2", 0);
  h.exit("w4", 0);
  a = h.advance(5s);
  const ElasticAction f = finish_of(a);
  REQUIRE(f.code == exit_code::kElastic);
  REQUIRE(f.message.find("w3 (b slot 0) did not exit within 5 s") != std::string::npos);
  h.exit("w3", 143);
  REQUIRE(h.d.done());
}

TEST_CASE("elastic driver: a newcomer exiting 0 before it joined is a failure, not the end") {
  Harness h(base_policy());
  form(h, {{"a", 1}});
  h.discover({{"a", 1}, {"b", 1}});
  auto a = h.exit("w2", 0);
  REQUIRE(has_message(a, Kind::Warn, "w2 on b slot 0 failed (exited 0 before it joined the job)"));
  REQUIRE(ids(a, Kind::Spawn) == Strings{"w3"});
  REQUIRE(of(a, Kind::Finish).empty());
  REQUIRE(of(a, Kind::Publish).empty());  // it was never a member
}

TEST_CASE("elastic driver: a command that is not elastic-aware still ends by the ending rules") {
  // `hvdrun --host-discovery-script d.sh echo hi`: nobody ever reports ready.
  Harness h(base_policy());
  h.discover({{"a", 2}});
  REQUIRE(of(h.exit("w1", 0), Kind::Finish).empty());
  const ElasticAction f = finish_of(h.exit("w2", 0));
  REQUIRE(f.code == 0);
  REQUIRE(h.d.done());
}

TEST_CASE("elastic driver: a signal before any worker started ends the job at once") {
  auto p = base_policy();
  p.start_np = 4;
  Harness h(p);
  h.discover({{"a", 1}});
  auto a = h.signal(15);
  REQUIRE(finish_of(a).code == 143);
  REQUIRE(h.d.done());
}

TEST_CASE("elastic driver: 64 workers on one host re-form after one is killed") {
  auto p = base_policy();
  Harness h(p);
  form(h, {{"big", 64}});
  REQUIRE(h.d.current_world().size() == 64);
  auto a = h.exit("w17", 137);
  World w = published(a);
  REQUIRE(w.size() == 63);
  REQUIRE(w.members[16].worker_id == "w18");  // everyone after the dead rank moves up by one
  REQUIRE(w.members[63 - 1].local_rank == 62);
  REQUIRE(ids(a, Kind::Spawn) == Strings{"w65"});
  w = published(h.ready_all());
  REQUIRE(w.size() == 64);
  REQUIRE(w.members[63].worker_id == "w65");
  REQUIRE(w.members[0].worker_id == "w1");
}

TEST_CASE("elastic driver: random event storms keep the invariants and never spin") {
  // Every take() checks ids, slots, versions and world sizes; advance()
  // checks that a due deadline was handled.
  for (uint64_t seed = 1; seed <= 30; ++seed) {
    auto p = base_policy();
    p.min_np = 2;
    p.max_np = 6;
    p.blacklist_failures = 2;
    p.cooldown_min = 1s;
    p.cooldown_max = 3s;
    p.reset_limit = 40;
    p.ready_timeout = 2s;
    Harness h(p, seed);
    std::mt19937 rng(static_cast<unsigned>(seed));
    const std::vector<std::string> names{"a", "b", "c", "d"};
    auto random_hosts = [&] {
      std::vector<HostSpec> hosts;
      for (const auto& n : names) {
        if (rng() % 3) hosts.push_back({n, 1 + static_cast<int>(rng() % 3)});
      }
      return hosts;
    };
    INFO("seed " << seed);
    h.discover(random_hosts());
    uint64_t oldest_in_use = 0;
    for (int step = 0; step < 300 && !h.d.done(); ++step) {
      std::vector<std::string> live(h.live.begin(), h.live.end());
      switch (rng() % 8) {
        case 0: h.discover(random_hosts()); break;
        case 1: h.discover_fail(rng() % 2 ? "timed out" : "exited with code 1"); break;
        case 2:
        case 3:
          if (!live.empty()) {
            auto id = live[rng() % live.size()];
            if (h.readied.insert(id).second) h.ready(id);
          }
          break;
        case 4:
          if (!live.empty()) h.exit(live[rng() % live.size()], rng() % 4 ? 1 : 0);
          break;
        case 5: h.advance(std::chrono::milliseconds(rng() % 3000)); break;
        case 6:
          if (!h.d.unformed_worlds().empty()) {
            auto versions = h.d.unformed_worlds();
            h.formed(versions[rng() % versions.size()]);
            break;
          }
          [[fallthrough]];
        default: {
          auto next = h.d.next_deadline();
          if (next) {
            auto dt = std::chrono::duration_cast<std::chrono::milliseconds>(*next - h.now);
            h.advance(std::max(dt, std::chrono::milliseconds(0)));
          }
          break;
        }
      }
      // Never more live members than max_np.
      REQUIRE(h.d.current_world().size() <= p.max_np);
      // The runner erases every world below it once: it never goes back.
      REQUIRE(h.d.oldest_world_in_use() >= oldest_in_use);
      REQUIRE(h.d.oldest_world_in_use() <= h.d.current_world().version);
      oldest_in_use = h.d.oldest_world_in_use();
    }
    // Whatever state it is in, a signal ends it once everyone has exited.
    h.signal(15);
    for (const auto& id : std::vector<std::string>(h.live.begin(), h.live.end())) h.exit(id, 143);
    REQUIRE(h.d.done());
    REQUIRE(h.finishes == 1);
  }
}

TEST_CASE("elastic driver: a world that fails with every member alive is re-formed with the same members") {
  Harness h(base_policy());
  form(h, {{"a", 1}, {"b", 2}});
  REQUIRE(members(h.d.current_world()) == Strings{"w1", "w2", "w3"});
  // Two of three asked: the third may still be training (or about to die).
  REQUIRE(h.reform(1, "w2", "rank 1: could not connect to rank 0 (No route to host)").empty());
  REQUIRE(h.reform(1, "w1").empty());
  REQUIRE(h.reform(1, "w1").empty());  // a repeat counts once
  REQUIRE_FALSE(h.d.next_deadline().has_value());
  auto a = h.reform(1, "w3");
  World w = published(a);
  REQUIRE(w.version == 2);
  REQUIRE(members(w) == Strings{"w1", "w2", "w3"});
  REQUIRE(w.reason.find("world 1 failed: rank 1: could not connect to rank 0 (No route to host)") == 0);
  REQUIRE(has_message(a, Kind::Warn, "world 1 failed with every member alive (rank 1: could not connect"));
  REQUIRE(has_message(a, Kind::Warn, "re-forming the same 3 members now"));
  REQUIRE(of(a, Kind::Spawn).empty());
  REQUIRE(of(a, Kind::Stop).empty());
  REQUIRE(h.d.resets() == 1);
  // Requests for a world that is no longer the newest change nothing.
  REQUIRE(h.reform(1, "w1").empty());
  REQUIRE(h.reform(1, "w2").empty());
  REQUIRE(h.reform(1, "w3").empty());
  // Unknown workers and future versions neither.
  REQUIRE(h.reform(2, "w9").empty());
  REQUIRE(h.reform(3, "w1").empty());
}

TEST_CASE("elastic driver: a member that dies while the others ask to re-form is removed, not waited for") {
  Harness h(base_policy());
  form(h, {{"a", 1}, {"b", 1}, {"c", 1}});
  REQUIRE(h.reform(1, "w1").empty());
  REQUIRE(h.reform(1, "w2").empty());
  World w = published(h.exit("w3", 1));
  REQUIRE(w.version == 2);
  REQUIRE(members(w) == Strings{"w1", "w2"});
  REQUIRE(w.reason.find("failed") != std::string::npos);
  // The asks were for world 1: world 2 needs its own.
  REQUIRE(h.reform(2, "w1").empty());
}

TEST_CASE("elastic driver: worlds that keep failing quickly back off, doubling up to the maximum") {
  auto p = base_policy();
  p.failed_world_backoff = 1s;
  p.failed_world_backoff_max = 4s;
  p.failed_world_stable = 30s;
  Harness h(p);
  form(h, {{"a", 1}, {"b", 1}});
  auto fail_all = [&](uint64_t v) {
    REQUIRE(h.reform(v, "w1").empty());
    return h.reform(v, "w2");
  };
  // The first failure re-forms at once.
  REQUIRE(published(fail_all(1)).version == 2);
  // World 2 fails 1 s after it was published: 1 s back-off.
  h.advance(1s);
  auto a = fail_all(2);
  REQUIRE(of(a, Kind::Publish).empty());
  REQUIRE(has_message(a, Kind::Warn, "in 1 s (2 quick failures in a row)"));
  REQUIRE(h.d.next_deadline() == h.now + 1s);
  REQUIRE(of(h.advance(999ms), Kind::Publish).empty());
  REQUIRE(published(h.advance(1ms)).version == 3);
  // Then 2 s, then 4 s, and 4 s again (the maximum).
  for (auto [v, wait] : {std::pair{uint64_t{3}, 2s}, std::pair{uint64_t{4}, 4s}, std::pair{uint64_t{5}, 4s}}) {
    REQUIRE(of(fail_all(v), Kind::Publish).empty());
    REQUIRE(h.d.next_deadline() == h.now + wait);
    REQUIRE(published(h.advance(wait)).version == v + 1);
  }
  // A world that lived past failed_world_stable is re-formed at once again.
  h.advance(31s);
  REQUIRE(published(fail_all(6)).version == 7);
  REQUIRE(h.d.resets() == 6);
}

TEST_CASE("elastic driver: re-forming a failed world counts against --reset-limit") {
  auto p = base_policy();
  p.reset_limit = 1;
  Harness h(p);
  form(h, {{"a", 1}, {"b", 1}});
  h.reform(1, "w1");
  REQUIRE(published(h.reform(1, "w2")).version == 2);
  h.reform(2, "w1");
  h.reform(2, "w2");
  auto f = finish_of(h.advance(1s));  // after the quick-failure back-off
  REQUIRE(f.code == exit_code::kElastic);
  REQUIRE(f.message.find("more than --reset-limit 1") != std::string::npos);
  REQUIRE(f.message.find("world 2 failed") != std::string::npos);
}

TEST_CASE("elastic driver: re-form requests during the ending or after a signal change nothing") {
  Harness h(base_policy());
  form(h, {{"a", 1}, {"b", 1}});
  h.signal(15);
  REQUIRE(h.reform(1, "w1").empty());
  REQUIRE(h.reform(1, "w2").empty());
}

TEST_CASE("elastic driver: a started worker's planned ranks are its place after the current world's members") {
  auto p = base_policy();
  Harness h(p);
  auto a = h.discover({{"a", 2}, {"b", 1}});
  auto spawns = of(a, Kind::Spawn);
  REQUIRE(spawns.size() == 3);
  // World 1 will be w1, w2 (a), w3 (b): ranks 0..2 of 3, local and cross
  // ranks by the launcher's placement rule.
  for (int i = 0; i < 3; ++i) {
    CHECK(spawns[i]->planned.rank == i);
    CHECK(spawns[i]->planned_size == 3);
  }
  CHECK(spawns[1]->planned.local_rank == 1);
  CHECK(spawns[1]->planned.local_size == 2);
  CHECK(spawns[2]->planned.local_rank == 0);
  CHECK(spawns[2]->planned.cross_rank == 1);
  CHECK(spawns[2]->planned.cross_size == 2);
  h.ready_all();
  REQUIRE(h.d.current_world().version == 1);
  // A new host: its workers come after the 3 members, as horovodrun gives
  // a scale-up's workers the ranks after the existing ones.
  a = h.discover({{"a", 2}, {"b", 1}, {"c", 2}});
  spawns = of(a, Kind::Spawn);
  REQUIRE(spawns.size() == 2);
  CHECK(spawns[0]->planned.rank == 3);
  CHECK(spawns[1]->planned.rank == 4);
  CHECK(spawns[0]->planned_size == 5);
  CHECK(spawns[1]->planned.local_rank == 1);
  // A member fails: its replacement is planned after the survivors.
  h.ready_all();
  REQUIRE(h.d.current_world().size() == 5);
  a = h.exit("w1", 1);
  spawns = of(a, Kind::Spawn);
  REQUIRE(spawns.size() == 1);
  CHECK(spawns[0]->host == "a");
  CHECK(spawns[0]->planned.rank == 4);
  CHECK(spawns[0]->planned_size == 5);
}

TEST_CASE("elastic driver: every listed host blacklisted for good and no worker left ends the job at once") {
  auto p = base_policy();
  p.blacklist_failures = 1;
  Harness h(p);
  form(h, {{"a", 1}, {"b", 1}});
  auto a = h.exit("w1", 3);
  REQUIRE(has_message(a, Kind::Warn, "host a blacklisted until the end of the job"));
  REQUIRE(of(a, Kind::Finish).empty());  // b still runs w2
  a = h.exit("w2", 7);
  const ElasticAction f = finish_of(a);
  CHECK(f.code == 3);  // the first failure's status
  CHECK(f.message.find("every host discovery lists is blacklisted until the end of the job (a, b)") !=
        std::string::npos);
  CHECK(f.message.find("first failure: w1 (a slot 0) exited with code 3") != std::string::npos);
  CHECK(h.d.done());
}

TEST_CASE("elastic driver: hosts blacklisted with a cooldown, or a host still offered, keep the job waiting") {
  SECTION("cooldown: the hosts come back") {
    auto p = base_policy();
    p.blacklist_failures = 1;
    p.cooldown_min = 2s;
    p.cooldown_max = 2s;
    Harness h(p);
    form(h, {{"a", 1}});
    auto a = h.exit("w1", 1);
    REQUIRE(of(a, Kind::Finish).empty());
    a = h.advance(3s);  // the cooldown is over: the slot is started again
    REQUIRE(of(a, Kind::Finish).empty());
    CHECK(of(a, Kind::Spawn).size() == 1);
  }
  SECTION("a host that is not blacklisted: its slot is restarted") {
    auto p = base_policy();
    Harness h(p);  // 3 failures blacklist
    form(h, {{"a", 1}});
    auto a = h.exit("w1", 1);
    CHECK(of(a, Kind::Finish).empty());
    CHECK(of(a, Kind::Spawn).size() == 1);
  }
  SECTION("discovery lists a new host after the others were blacklisted: the job goes on there") {
    auto p = base_policy();
    p.blacklist_failures = 1;
    Harness h(p);
    form(h, {{"a", 1}, {"b", 1}});
    h.exit("w1", 1);
    auto a = h.discover({{"a", 1}, {"b", 1}, {"c", 1}});
    REQUIRE(of(a, Kind::Spawn).size() == 1);
    a = h.exit("w2", 1);
    CHECK(of(a, Kind::Finish).empty());  // c's worker is starting
  }
}
