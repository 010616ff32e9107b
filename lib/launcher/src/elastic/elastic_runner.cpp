// ElasticRunner: carries out ElasticDriver's decisions with threads, the
// job's HostSource, spawners from a SpawnerFactory and the rendezvous store.
//
// One event loop (the calling thread) owns the driver. Everything else posts
// events to it: the discovery thread (script results), spawner reader
// threads (worker exits), store watchers (a worker's ready key appeared),
// the signal watcher, and SSH launch threads (a host could not be reached).
// Local workers are launched on the loop thread itself: the local spawner
// ties its agents' lifetime to the launching thread (PDEATHSIG).
#include "hvd/launcher/elastic/elastic_runner.h"
#include "hvd/launcher/process/report.h"

#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/job_env.h"
#include "hvd/launcher/plan/worker_env.h"
#include "hvd/launcher/process/status.h"
#include "hvd/store/elastic_world.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

namespace hvd::launcher {

namespace selastic = store::elastic;

ElasticPolicy elastic_policy(const Options& options) {
  const ElasticOptions& e = options.elastic;
  ElasticPolicy p;
  p.min_np = e.min_np.value_or(options.num_proc.value_or(1));
  p.start_np = options.num_proc.value_or(p.min_np);
  if (e.max_np) p.max_np = *e.max_np;
  p.elastic_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(e.elastic_timeout);
  p.reset_limit = e.reset_limit;
  if (e.blacklist_cooldown_range) {
    p.cooldown_min = std::chrono::seconds(e.blacklist_cooldown_range->first);
    p.cooldown_max = std::chrono::seconds(e.blacklist_cooldown_range->second);
  }
  p.blacklist_failures = e.blacklist_failures;
  p.failure_window = e.blacklist_window;
  p.ready_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options.start_timeout);
  p.drain_timeout = e.drain_timeout;
  return p;
}

ElasticRunnerOptions elastic_runner_options(const Options& options) {
  ElasticRunnerOptions out;
  out.policy = elastic_policy(options);
  out.command = options.command;
  out.discovery_interval = options.elastic.discovery_interval;
  out.start_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(options.start_timeout);
  out.kill_grace = options.kill_grace;
  return out;
}

namespace {

/// Everything that can wake the event loop.
struct ElasticEvent {
  enum class Kind { Discovery, Ready, Exit, Signal, Reform } kind;
  DiscoveryResult discovery;
  std::string worker_id;
  uint64_t version = 0;  ///< Reform: the world the worker asks to re-form
  int status = 0;
  std::string lost_reason;
  int sig = 0;
  /// When it was posted (EventQueue::post): timers that fell due before it
  /// are handled before it (ElasticRunner's loop).
  ElasticTime at{};
};

class EventQueue {
 public:
  void post(ElasticEvent e) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      e.at = ElasticClock::now();
      events_.push_back(std::move(e));
    }
    cv_.notify_one();
  }
  /// Waits until an event arrives or `until`; returns what is queued.
  std::deque<ElasticEvent> wait(std::optional<ElasticTime> until) {
    std::unique_lock<std::mutex> lock(mu_);
    auto ready = [&] { return !events_.empty(); };
    if (until) {
      cv_.wait_until(lock, *until, ready);
    } else {
      cv_.wait(lock, ready);
    }
    std::deque<ElasticEvent> out;
    out.swap(events_);
    return out;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<ElasticEvent> events_;
};

/// Runs the discovery script every interval on its own thread until
/// stopped; results go to the queue. A source that watches its hosts
/// (Kubernetes) wakes the loop early through its change listener. Stopping
/// cancels the run in progress (HostSource::cancel), so a hung script never
/// delays the end.
class DiscoveryLoop {
 public:
  DiscoveryLoop(HostSource& source, std::chrono::milliseconds interval, EventQueue& queue)
      : source_(source), interval_(interval), queue_(queue) {}
  ~DiscoveryLoop() {
    stop();
    source_.set_change_listener(nullptr);
  }

  void start() {
    source_.set_change_listener([this] {
      std::lock_guard<std::mutex> lock(mu_);
      changed_ = true;
      cv_.notify_all();
    });
    thread_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        if (cv_.wait_for(lock, interval_, [&] { return stop_ || changed_; }) && stop_) return;
        changed_ = false;
        lock.unlock();
        ElasticEvent e;
        e.kind = ElasticEvent::Kind::Discovery;
        e.discovery = source_.discover();
        lock.lock();
        if (stop_) return;
        queue_.post(std::move(e));
      }
    });
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    source_.cancel();  // a hung run ends now, not at its timeout
    if (thread_.joinable()) thread_.join();
  }

 private:
  HostSource& source_;
  std::chrono::milliseconds interval_;
  EventQueue& queue_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  bool changed_ = false;  // the source's change listener fired
  std::thread thread_;
};

/// Worker output and exits, from spawner threads. Spawners key workers by
/// an int; in elastic mode that is the worker's serial ("w7" -> 7). Lines
/// are prefixed with the worker's rank in the current world, set at each
/// publish (set_label), and with "w7" before it has one (docs/elastic.md).
class ElasticSink final : public EventSink {
 public:
  ElasticSink(OutputRouter& output, EventQueue& queue) : output_(output), queue_(queue) {}
  void on_output(int serial, Stream stream, const char* data, std::size_t len) override {
    output_.write(serial, stream, data, len);
  }
  void on_exit(const WorkerExit& exit) override {
    output_.finish(exit.rank);
    ElasticEvent e;
    e.kind = ElasticEvent::Kind::Exit;
    e.worker_id = fmt::format("w{}", exit.rank);
    e.status = exit.status;
    e.lost_reason = exit.lost_reason;
    queue_.post(std::move(e));
  }

 private:
  OutputRouter& output_;
  EventQueue& queue_;
};

int serial_of(const std::string& worker_id) {
  if (worker_id.size() < 2 || worker_id[0] != 'w') throw InvalidArgument("bad worker id " + worker_id);
  return std::stoi(worker_id.substr(1));
}

/// A launched batch: the spawner and, for SSH hosts, the thread that ran
/// its (blocking) launch.
struct Batch {
  std::unique_ptr<Spawner> spawner;
  std::vector<std::string> worker_ids;
  std::thread launcher;
};

}  // namespace

class ElasticRunner::Impl {
 public:
  Impl(ElasticRunnerOptions options, ElasticRunnerDeps deps)
      : options_(std::move(options)),
        deps_(std::move(deps)),
        output_(deps_.output),
        events_(deps_.events),
        store_(&deps_.store),
        sink_(deps_.output, queue_) {}
  ~Impl() { stop_reaper(); }

  void interrupt(int sig) {
    ElasticEvent e;
    e.kind = ElasticEvent::Kind::Signal;
    e.sig = sig;
    queue_.post(std::move(e));
  }

  int run(DiscoveryResult first) {
    common_env_ = deps_.worker_env;
    if (deps_.driver_address) set_driver_address(*deps_.driver_address);
    cwd_ = current_directory();

    const ElasticPolicy& policy = options_.policy;
    driver_ = std::make_unique<ElasticDriver>(policy, deps_.seed);
    spdlog::info("elastic job: min-np {}, start with {}, max-np {}; {} every {} ms; store {}", policy.min_np,
                 policy.start_np, policy.max_np >= (1 << 20) ? std::string("unlimited") : std::to_string(policy.max_np),
                 deps_.hosts.describe(), options_.discovery_interval.count(), deps_.store_address);

    if (events_) {
      events_->emit("job_start",
                    {{"mode", "elastic"},
                     {"np", policy.start_np},
                     {"min_np", policy.min_np},
                     {"max_np", policy.max_np >= (1 << 20) ? EventValue::null() : EventValue(policy.max_np)},
                     {"discovery", deps_.hosts.describe()},
                     {"store", deps_.store_address}});
    }

    DiscoveryLoop discovery(deps_.hosts, options_.discovery_interval, queue_);
    driver_->on_discovery(usable(std::move(first)), ElasticClock::now());
    discovery.start();

    int code = loop();

    discovery.stop();
    teardown();
    return code;
  }

 private:
  static std::string current_directory() {
    char buf[4096];
    return ::getcwd(buf, sizeof buf) ? std::string(buf) : std::string(".");
  }

  int loop() {
    for (;;) {
      carry_out(driver_->take_actions());
      prune_store();
      if (driver_->done()) break;
      auto now = ElasticClock::now();
      std::optional<ElasticTime> until = driver_->next_deadline();
      if (!kill_at_.empty()) {
        auto first_kill = kill_at_.begin()->first;
        if (!until || first_kill < *until) until = first_kill;
      }
      if (finished_ && (!until || *until > now + kFinishPoll)) until = now + kFinishPoll;
      for (auto& e : queue_.wait(until)) {
        // In the order things happened: a deadline that fell due before
        // this event was posted is handled first, however late the loop
        // woke (a worker's ready timeout before the lost launch its
        // connection timeout reports a moment later).
        if (e.at > last_tick_) tick(e.at);
        dispatch(e);
      }
      now = ElasticClock::now();
      escalate_kills(now);
      tick(now);
      if (finished_ && now > finish_deadline_) {
        spdlog::warn("workers did not exit within {} ms of the end; giving up on them",
                     std::chrono::duration_cast<std::chrono::milliseconds>(kFinishWait).count());
        break;
      }
    }
    carry_out(driver_->take_actions());
    return finish_code_;
  }

  void dispatch(const ElasticEvent& e) {
    auto now = ElasticClock::now();
    // Who holds the trained state decides keepers, call-backs and what each
    // world lists (a few lookups in the in-process store).
    report_synced_workers(now);
    switch (e.kind) {
      case ElasticEvent::Kind::Discovery:
        // Which workers trained decides whether a dropped host's workers drain.
        report_formed_worlds(now);
        driver_->on_discovery(usable(std::move(e.discovery)), now);
        break;
      case ElasticEvent::Kind::Ready:
        if (live_.count(e.worker_id)) {
          if (events_) events_->emit("worker_ready", {{"worker", e.worker_id}});
          driver_->on_worker_ready(e.worker_id, now);
        }
        break;
      case ElasticEvent::Kind::Exit: {
        auto it = live_.find(e.worker_id);
        if (it == live_.end()) break;  // a duplicate report (launch failure raced an exit)
        store_->unwatch(it->second.ready_watch);
        Batch* batch = it->second.batch;
        if (it->second.stopping) {
          spdlog::debug("{} stopped ({})", e.worker_id,
                        e.lost_reason.empty() ? describe_status(e.status, 0) : "lost: " + e.lost_reason);
        }
        live_.erase(it);
        departed_.insert(e.worker_id);
        output_.forget(serial_of(e.worker_id));
        retire_if_done(batch);
        for (auto k = kill_at_.begin(); k != kill_at_.end();) {
          k = k->second == e.worker_id ? kill_at_.erase(k) : std::next(k);
        }
        if (events_) {
          events_->emit("worker_exit", {{"worker", e.worker_id},
                                        {"status", e.lost_reason.empty() ? e.status : -1},
                                        {"description", e.lost_reason.empty() ? describe_status(e.status, 0)
                                                                              : "lost: " + e.lost_reason},
                                        {"lost", !e.lost_reason.empty()}});
        }
        report_formed_worlds(now);
        if (store_->try_get(selastic::left_key(e.worker_id))) driver_->on_worker_left(e.worker_id, now);
        driver_->on_worker_exit(e.worker_id, e.status, e.lost_reason, now);
        break;
      }
      case ElasticEvent::Kind::Reform: {
        // The world's first failure, as its ranks agreed on it, names the
        // cause best; else what the member wrote.
        std::string why;
        if (auto first = store_->try_get(selastic::failure_key(e.version))) {
          why.assign(first->begin(), first->end());
        } else if (auto mine = store_->try_get(selastic::reset_key(e.version, e.worker_id))) {
          why.assign(mine->begin(), mine->end());
        }
        if (events_) events_->emit("reform_request", {{"worker", e.worker_id}, {"world", e.version}, {"why", why}});
        driver_->on_reform_request(e.version, e.worker_id, why, now);
        break;
      }
      case ElasticEvent::Kind::Signal:
        if (signalled_) {
          // A second signal: no more grace.
          for (auto& [id, w] : live_) signal_worker(id, SIGKILL);
        }
        signalled_ = true;
        for (auto& b : batches_) b->spawner->cancel_launch();  // hosts still connecting give up now
        if (events_) events_->emit("signal", {{"signal", e.sig}});
        spdlog::warn("received {}; stopping every worker", strsignal(e.sig));
        driver_->on_signal(e.sig, now);
        break;
    }
  }

  void carry_out(std::vector<ElasticAction> actions) {
    std::map<std::string, std::vector<const ElasticAction*>> spawns;  // by host, in order
    std::vector<std::string> host_order;
    for (const auto& a : actions) {
      switch (a.kind) {
        case ElasticAction::Kind::Spawn:
          if (events_) events_->emit("worker_start", {{"worker", a.worker_id}, {"host", a.host}, {"slot", a.slot}});
          if (!spawns.count(a.host)) host_order.push_back(a.host);
          spawns[a.host].push_back(&a);
          break;
        case ElasticAction::Kind::Stop:
          if (events_) events_->emit("worker_stop", {{"worker", a.worker_id}, {"host", a.host}, {"slot", a.slot}});
          stop_worker(a.worker_id);
          break;
        case ElasticAction::Kind::Publish:
          if (events_) events_->emit("world", {{"world", EventValue::raw(selastic::encode_world(a.world))}});
          publish(a.world);
          break;
        case ElasticAction::Kind::DrainFailed:
          if (events_) {
            events_->emit("drain_failed",
                          {{"worker", a.worker_id}, {"host", a.host}, {"slot", a.slot}, {"message", a.message}});
          }
          store_->set_string(selastic::drain_failed_key(a.worker_id), a.message);
          store_->add(selastic::kDrainFailuresKey, 1);
          break;
        case ElasticAction::Kind::Log:
          if (events_) events_->emit("log", {{"level", "info"}, {"message", a.message}});
          spdlog::info("{}", a.message);
          break;
        case ElasticAction::Kind::Warn:
          if (events_) events_->emit("log", {{"level", "warning"}, {"message", a.message}});
          spdlog::warn("{}", a.message);
          break;
        case ElasticAction::Kind::Finish:
          if (!finished_) {
            finished_ = true;
            finish_code_ = a.code;
            if (events_) events_->emit("finish", {{"code", a.code}, {"message", a.message}});
            finish_deadline_ = ElasticClock::now() + kFinishWait;
            if (!a.message.empty()) report_error(a.message);
            // Whatever the driver did not stop (it stops everything it
            // knows of) is stopped here too: nothing outlives the job.
            for (auto& [id, w] : live_) {
              if (!w.stopping) stop_worker(id);
            }
          }
          break;
      }
    }
    for (const auto& host : host_order) spawn_batch(host, spawns[host]);
  }

  /// Tells the driver which published worlds formed. A world's arrival
  /// barrier ends with its last member writing formed_key(v)
  /// (ElasticMember::Impl::rendezvous) before any member can use the world,
  /// so whoever exits after training in it is reported after its formation.
  void report_formed_worlds(ElasticTime now) {
    for (uint64_t version : driver_->unformed_worlds()) {
      if (store_->try_get(selastic::formed_key(version))) {
        driver_->on_world_formed(version, now);
      }
    }
  }

  /// Tells the driver which workers completed a State::sync, and in which
  /// world (synced_key): who holds the job's trained state. Before every
  /// event and timer, so a worker's report is never older than the
  /// decision it bears on.
  void report_synced_workers(ElasticTime now) {
    for (const std::string& id : driver_->workers_not_holding()) {
      auto text = store_->try_get(selastic::synced_key(id));
      if (!text) continue;
      auto version = env::parse_int(std::string(text->begin(), text->end()));
      if (!version || *version <= 0) {
        spdlog::debug("{} wrote '{}' as the world it synced in; ignored",
                      id, std::string(text->begin(), text->end()));
        continue;
      }
      driver_->on_worker_synced(id, static_cast<uint64_t>(*version), now);
    }
  }

  void publish(const selastic::World& world) {
    // From now on the members' lines carry their rank in this world (a world
    // that holds is never formed: its ranks are nobody's).
    if (!world.hold) {
      for (const auto& m : world.members) output_.set_label(serial_of(m.worker_id), std::to_string(m.rank));
    }
    auto& store = *store_;
    // Members of the new world may ask to re-form it (reset_key); those of
    // older worlds no longer matter.
    for (auto id : reform_watches_) store.unwatch(id);
    reform_watches_.clear();
    if (!world.final && !world.hold && world.size() > 1) {
      for (const auto& m : world.members) {
        EventQueue* queue = &queue_;
        auto post = [queue, id = m.worker_id, v = world.version] {
          ElasticEvent e;
          e.kind = ElasticEvent::Kind::Reform;
          e.worker_id = id;
          e.version = v;
          queue->post(std::move(e));
        };
        store::InMemoryStore::WatchId watch = 0;
        if (store.try_get_or_watch(selastic::reset_key(world.version, m.worker_id), post, watch)) {
          post();
        } else {
          reform_watches_.push_back(watch);
        }
      }
    }
    store.set_string(selastic::world_key(world.version), selastic::encode_world(world));
    store.set_string(selastic::kVersionKey, std::to_string(world.version));
    std::vector<std::string>& ids = mentioned_[world.version];
    for (const auto& m : world.members) ids.push_back(m.worker_id);
    ids.insert(ids.end(), world.draining.begin(), world.draining.end());
    spdlog::debug("published world {} ({} members)", world.version, world.members.size());
  }

  /// Erases what no live worker can read any more, so that a job that
  /// re-forms for a week keeps a store of constant size: the keys of every
  /// world older than the oldest one a live worker may still use (its
  /// world_key and everything under its comm_prefix: addresses, barriers,
  /// failures, process sets), and the per-worker keys (ready, left,
  /// drain-failed, synced) of departed workers that no remaining world names.
  /// Runs on the event loop after the driver's actions were carried out,
  /// so every exit it counts was handled (left_key read) before.
  void prune_store() {
    const uint64_t oldest = driver_->oldest_world_in_use();
    std::size_t erased = 0;
    uint64_t worlds = 0;
    for (; pruned_below_ < oldest; ++pruned_below_, ++worlds) {
      erased += store_->erase(selastic::world_key(pruned_below_)) ? 1 : 0;
      erased += store_->erase_prefix(selastic::comm_prefix(pruned_below_));
      mentioned_.erase(pruned_below_);
    }
    std::size_t workers = 0;
    for (auto it = departed_.begin(); it != departed_.end();) {
      bool named = false;
      for (const auto& [version, ids] : mentioned_) {
        named = named || std::find(ids.begin(), ids.end(), *it) != ids.end();
      }
      if (named) {
        ++it;
        continue;
      }
      for (const auto& key : {selastic::ready_key(*it), selastic::left_key(*it), selastic::drain_failed_key(*it),
                              selastic::synced_key(*it)}) {
        erased += store_->erase(key) ? 1 : 0;
      }
      ++workers;
      it = departed_.erase(it);
    }
    if (worlds == 0 && workers == 0) return;
    const std::size_t left = store_->size();
    spdlog::debug("store: erased {} keys of {} and {}; {} keys remain", erased,
                  worlds == 0 ? std::string("no world")
                              : fmt::format("worlds {}-{}", pruned_below_ - worlds, pruned_below_ - 1),
                  workers == 1 ? std::string("1 departed worker") : fmt::format("{} departed workers", workers), left);
    if (events_) {
      events_->emit("store_pruned",
                    {{"worlds_below", pruned_below_}, {"workers", workers}, {"erased", erased}, {"keys", left}});
    }
  }

  /// Drops remote hosts when the store only listens on loopback (every host
  /// was local when the job started and no --network-interface was given):
  /// their workers could never reach it. Warns once per host.
  DiscoveryResult usable(DiscoveryResult result) {
    record_discovery(result);
    if (!result.ok()) return result;
    if (!driver_addr_ && !result.hosts.empty()) {
      try {
        const std::string addr = deps_.choose_address(result.hosts);
        if (deps_.rebind_store) {
          ElasticRunnerDeps::ReboundStore rebound = deps_.rebind_store(addr);
          store_ = rebound.store;
          common_env_[job_env::kRendezvousPort] = std::to_string(rebound.port);
        }
        set_driver_address(addr);
        spdlog::info("workers reach the store on {}:{}", *driver_addr_, common_env_[job_env::kRendezvousPort]);
      } catch (const std::exception& e) {
        spdlog::warn("cannot choose the address workers reach hvdrun on ({}); ignoring this discovery run", e.what());
        result.hosts.clear();
        return result;
      }
    }
    if (!loopback_only_) return result;
    std::vector<HostSpec> kept;
    for (auto& h : result.hosts) {
      if (is_local(h.name)) {
        kept.push_back(std::move(h));
      } else if (unreachable_warned_.insert(h.name).second) {
        spdlog::warn(
            "ignoring discovered host {}: the store listens on 127.0.0.1 because every host was local "
            "when the job started; restart with --network-interface to let jobs grow onto other machines",
            h.name);
      }
    }
    result.hosts = std::move(kept);
    return result;
  }

  /// --events-file: a "discovery" event when the host list changes, a
  /// "discovery_failed" one when a run fails (each distinct reason once in a row).
  void record_discovery(const DiscoveryResult& result) {
    if (!events_) return;
    if (!result.ok()) {
      if (*result.error != last_discovery_error_) {
        last_discovery_error_ = *result.error;
        events_->emit("discovery_failed", {{"reason", *result.error}});
      }
      return;
    }
    last_discovery_error_.clear();
    std::vector<std::string> hosts;
    for (const auto& h : result.hosts) hosts.push_back(format_host(h));
    if (last_discovery_ && *last_discovery_ == hosts) return;
    last_discovery_ = hosts;
    events_->emit("discovery", {{"hosts", hosts}});
  }

  void set_driver_address(const std::string& addr) {
    driver_addr_ = addr;
    loopback_only_ = addr == "127.0.0.1";
    common_env_[job_env::kRendezvousAddr] = addr;
    if (loopback_only_) {
      spdlog::debug(
          "every discovered host is local: workers reach the store on 127.0.0.1 (use "
          "--network-interface for jobs that will grow onto other machines)");
    }
  }

  bool is_local(const std::string& host) { return deps_.spawners.is_local(host); }

  void spawn_batch(const std::string& host, const std::vector<const ElasticAction*>& actions) {
    auto batch = std::make_unique<Batch>();
    std::vector<WorkerSpec> specs;
    for (const ElasticAction* a : actions) {
      WorkerSpec spec;
      spec.slot.hostname = host;
      spec.slot.rank = serial_of(a->worker_id);
      spec.slot.local_rank = a->slot;
      spec.argv = options_.command;
      spec.env = common_env_;
      if (a->planned_size > 0) spec.env = add_slot_env(std::move(spec.env), a->planned, a->planned_size);
      spec.env[job_env::kWorkerId] = a->worker_id;
      spec.env[job_env::kHostname] = host;
      spec.cwd = cwd_;
      specs.push_back(std::move(spec));
      batch->worker_ids.push_back(a->worker_id);

      LiveWorker w;
      w.batch = batch.get();
      w.serial = serial_of(a->worker_id);
      output_.set_label(w.serial, a->worker_id);  // no rank before its first world
      // The worker's ready key may appear at any time from now on.
      EventQueue* queue = &queue_;
      std::string id = a->worker_id;
      auto value = store_->try_get_or_watch(
          selastic::ready_key(id),
          [queue, id] {
            ElasticEvent e;
            e.kind = ElasticEvent::Kind::Ready;
            e.worker_id = id;
            queue->post(std::move(e));
          },
          w.ready_watch);
      if (value) {
        ElasticEvent e;
        e.kind = ElasticEvent::Kind::Ready;
        e.worker_id = id;
        queue_.post(std::move(e));
      }
      live_.emplace(a->worker_id, w);
    }
    const bool local = is_local(host);
    batch->spawner = deps_.spawners.make(host);
    Deadline deadline = Deadline::after(options_.start_timeout);
    Batch* raw = batch.get();
    batches_.push_back(std::move(batch));
    auto fail_all = [this, raw, host](const std::string& why) {
      // Workers the spawner did start report their own exits; the ones it
      // could not are reported lost here (the loop ignores duplicates).
      for (const auto& id : raw->worker_ids) {
        ElasticEvent e;
        e.kind = ElasticEvent::Kind::Exit;
        e.worker_id = id;
        e.status = 255;
        e.lost_reason = why;
        queue_.post(std::move(e));
      }
    };
    if (local) {
      try {
        raw->spawner->launch(specs, sink_, deadline);
      } catch (const std::exception& e) {
        spdlog::warn("{}: cannot start workers: {}", host, e.what());
        fail_all(e.what());
      }
    } else {
      raw->launcher = std::thread([raw, specs = std::move(specs), deadline, host, fail_all, this] {
        try {
          raw->spawner->launch(specs, sink_, deadline);
        } catch (const std::exception& e) {
          spdlog::warn("{}: cannot start workers: {}", host, e.what());
          fail_all(e.what());
        }
      });
    }
  }

  void signal_worker(const std::string& id, int sig) {
    auto it = live_.find(id);
    if (it == live_.end()) return;
    it->second.batch->spawner->signal(it->second.serial, sig);
  }

  void stop_worker(const std::string& id) {
    auto it = live_.find(id);
    if (it == live_.end()) return;
    if (it->second.stopping) return;
    it->second.stopping = true;
    spdlog::debug("stopping {} (SIGTERM, then SIGKILL after {} ms)", id, options_.kill_grace.count());
    signal_worker(id, SIGTERM);
    kill_at_.emplace(ElasticClock::now() + options_.kill_grace, id);
  }

  /// The driver's timers up to `now` (never back in time).
  void tick(ElasticTime now) {
    if (now < last_tick_) return;
    last_tick_ = now;
    report_synced_workers(now);
    driver_->tick(now);
  }

  void escalate_kills(ElasticTime now) {
    while (!kill_at_.empty() && kill_at_.begin()->first <= now) {
      std::string id = kill_at_.begin()->second;
      kill_at_.erase(kill_at_.begin());
      spdlog::debug("{} did not stop within the grace period; sending SIGKILL", id);
      signal_worker(id, SIGKILL);
    }
  }

  /// A batch whose workers have all exited is handed to the reaper thread,
  /// which joins its launch thread and shuts its spawner down (bounded, but
  /// up to seconds for an SSH host that went away: never on this loop), so
  /// a job that restarts workers for a week does not keep one spawner,
  /// finished reader thread and stack per batch.
  void retire_if_done(Batch* batch) {
    for (const auto& [id, w] : live_) {
      if (w.batch == batch) return;
    }
    auto it = std::find_if(batches_.begin(), batches_.end(), [&](const auto& b) { return b.get() == batch; });
    if (it == batches_.end()) return;
    std::unique_ptr<Batch> done = std::move(*it);
    batches_.erase(it);
    std::lock_guard<std::mutex> lock(reaper_mu_);
    retired_.push_back(std::move(done));
    if (!reaper_.joinable()) {
      reaper_ = std::thread([this] { reap(); });
    }
    reaper_cv_.notify_one();
  }

  void reap() {
    std::unique_lock<std::mutex> lock(reaper_mu_);
    for (;;) {
      reaper_cv_.wait(lock, [&] { return reaper_stop_ || !retired_.empty(); });
      if (retired_.empty()) return;  // stopping, nothing left
      std::unique_ptr<Batch> b = std::move(retired_.front());
      retired_.pop_front();
      lock.unlock();
      if (b->launcher.joinable()) b->launcher.join();
      if (b->spawner) b->spawner->shutdown();
      b.reset();
      lock.lock();
    }
  }

  /// Lets the reaper finish what it was given, then joins it. Idempotent.
  void stop_reaper() {
    {
      std::lock_guard<std::mutex> lock(reaper_mu_);
      reaper_stop_ = true;
      reaper_cv_.notify_one();
    }
    if (reaper_.joinable()) reaper_.join();
  }

  void teardown() {
    stop_reaper();
    for (auto& [id, w] : live_) store_->unwatch(w.ready_watch);
    for (auto id : reform_watches_) store_->unwatch(id);
    reform_watches_.clear();
    for (auto& b : batches_) {
      if (b->launcher.joinable()) b->launcher.join();
    }
    for (auto& b : batches_) b->spawner->shutdown();
  }

  struct LiveWorker {
    Batch* batch = nullptr;
    int serial = 0;
    store::InMemoryStore::WatchId ready_watch = 0;
    bool stopping = false;
  };

  static constexpr std::chrono::milliseconds kFinishPoll{100};
  static constexpr std::chrono::milliseconds kFinishWait{15000};

  const ElasticRunnerOptions options_;
  ElasticRunnerDeps deps_;
  OutputRouter& output_;
  EventLog* events_ = nullptr;  ///< --events-file, may be null
  store::InMemoryStore* store_;  ///< deps_.store, or the one rebind_store returned
  EventQueue queue_;
  ElasticSink sink_;
  std::unique_ptr<ElasticDriver> driver_;
  EnvMap common_env_;
  std::string cwd_;
  std::optional<std::vector<std::string>> last_discovery_;
  std::string last_discovery_error_;
  std::optional<std::string> driver_addr_;  ///< what workers reach the store on; unset until hosts appear
  bool loopback_only_ = false;  ///< driver_addr_ is 127.0.0.1
  std::set<std::string> unreachable_warned_;  ///< remote hosts ignored because of that
  std::vector<std::unique_ptr<Batch>> batches_;  ///< with a live worker (or still launching)
  /// retire_if_done: batches whose workers all exited, for the reaper thread.
  std::mutex reaper_mu_;
  std::condition_variable reaper_cv_;
  std::deque<std::unique_ptr<Batch>> retired_;
  bool reaper_stop_ = false;
  std::thread reaper_;
  std::map<std::string, LiveWorker> live_;
  std::vector<store::InMemoryStore::WatchId> reform_watches_;  ///< reset_key of the newest world's members
  /// prune_store: worlds below this have had their keys erased.
  uint64_t pruned_below_ = 1;
  /// Published worlds not yet pruned -> the workers they name (members and
  /// draining), and workers that exited whose own keys are not yet erased.
  std::map<uint64_t, std::vector<std::string>> mentioned_;
  std::set<std::string> departed_;
  std::multimap<ElasticTime, std::string> kill_at_;
  bool signalled_ = false;
  bool finished_ = false;
  int finish_code_ = exit_code::kInternal;
  ElasticTime finish_deadline_{};
  /// The time of the driver's last tick (tick()).
  ElasticTime last_tick_{};
};

ElasticRunner::ElasticRunner(ElasticRunnerOptions options, ElasticRunnerDeps deps)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(deps))) {}
ElasticRunner::~ElasticRunner() = default;
int ElasticRunner::run(DiscoveryResult first) { return impl_->run(std::move(first)); }
void ElasticRunner::interrupt(int sig) { impl_->interrupt(sig); }

}  // namespace hvd::launcher
