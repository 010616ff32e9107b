#pragma once
/// A fake of the Spawner seam (spawn/spawner.h), shared by the launcher's
/// unit tests (the Supervisor, the ElasticRunner, a platform leader, the job
/// modes): no process starts.
///
/// A FakeHost is what a test sees of one host: what its spawners were asked
/// (launches, signals, shutdowns) and which workers are alive. Its hooks say
/// what the host does: `before_launch` may refuse a launch (throw
/// LaunchError: nothing starts), `launch_error` makes a partial launch (the
/// first worker counts as started, then LaunchError), `on_launch` runs after
/// the workers are alive (report output and exits, set store keys). A
/// stopping signal ends a worker (`dies_on`); shutdown() ends the workers a
/// spawner launched that are still alive, with `shutdown_exit`.
#include "hvd/common/io.h"
#include "hvd/launcher/spawn/spawner.h"
#include "hvd/launcher/spawn/spawner_factory.h"

#include <atomic>
#include <csignal>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace hvd::launcher::fakes {

struct FakeHost {
  std::string name;
  std::mutex mutex;

  // ---- what the host does (set by the test before the launch)
  /// Before anything starts; may throw LaunchError (a refused connection).
  std::function<void(FakeHost&, const std::vector<WorkerSpec>&)> before_launch;
  /// A partial launch: the first worker counts as started, then LaunchError.
  std::optional<std::string> launch_error;
  /// After the workers are alive (they are `launches.back()`).
  std::function<void(FakeHost&)> on_launch;
  /// Signals that end a worker, per rank; default_dies_on for the rest.
  std::map<int, std::set<int>> dies_on;
  std::set<int> default_dies_on{SIGINT, SIGTERM, SIGHUP, SIGKILL};
  /// How a worker still alive at shutdown() ends (rank is filled in).
  WorkerExit shutdown_exit{0, 128 + SIGKILL, SIGKILL, ""};

  // ---- what it was asked (recorded)
  int launch_attempts = 0;  ///< every launch(), refused or not
  std::vector<std::vector<WorkerSpec>> launches;  ///< launches that started workers
  std::vector<std::tuple<int, int, hvd::Clock::time_point>> signals;  ///< rank, sig, when
  int shutdowns = 0;
  bool shut_down = false;
  std::set<int> alive;  ///< ranks with a live worker
  std::vector<std::thread> timers;
  /// Per rank, the spawners whose worker of that rank is alive (a host may
  /// have several spawners with the same ranks: a platform leader's attach
  /// and status commands), the latest last, each with its sink.
  std::map<int, std::vector<std::pair<int, EventSink*>>> owners;

  ~FakeHost() {
    for (auto& t : timers) {
      if (t.joinable()) t.join();
    }
  }

  /// The first worker's argv of each launch that started.
  std::vector<std::vector<std::string>> argvs() {
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<std::vector<std::string>> out;
    for (const auto& l : launches) out.push_back(l.empty() ? std::vector<std::string>{} : l.front().argv);
    return out;
  }
  /// Reports the exit of the latest live worker of `rank`; false if none
  /// is alive.
  bool exit(int rank, int status, int sig = 0, const std::string& lost = "") {
    return exit_of(-1, rank, status, sig, lost);
  }
  /// The same for the worker of `rank` that spawner `spawner` launched (-1:
  /// the latest of any).
  bool exit_of(int spawner, int rank, int status, int sig = 0, const std::string& lost = "") {
    EventSink* sink = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex);
      auto it = owners.find(rank);
      if (it == owners.end()) return false;
      auto& list = it->second;
      for (auto o = list.rbegin(); o != list.rend(); ++o) {
        if (spawner == -1 || o->first == spawner) {
          sink = o->second;
          list.erase(std::next(o).base());
          break;
        }
      }
      if (!sink) return false;
      if (list.empty()) {
        owners.erase(it);
        alive.erase(rank);
      }
    }
    WorkerExit e;
    e.rank = rank;
    e.status = status;
    e.signal = sig;
    e.lost_reason = lost;
    sink->on_exit(e);
    return true;
  }
  void exit_after(std::chrono::milliseconds d, int rank, int status, int sig = 0, const std::string& lost = "") {
    timers.emplace_back([this, d, rank, status, sig, lost] {
      std::this_thread::sleep_for(d);
      exit(rank, status, sig, lost);
    });
  }
  void output(int rank, Stream s, const std::string& text) {
    EventSink* sink;
    {
      std::lock_guard<std::mutex> lock(mutex);
      sink = owners.at(rank).back().second;
    }
    sink->on_output(rank, s, text.data(), text.size());
  }
  std::vector<int> signals_to(int rank) {
    std::lock_guard<std::mutex> lock(mutex);
    std::vector<int> out;
    for (auto& [r, s, t] : signals)
      if (r == rank) out.push_back(s);
    return out;
  }
  std::optional<hvd::Clock::time_point> when(int rank, int sig) {
    std::lock_guard<std::mutex> lock(mutex);
    for (auto& [r, s, t] : signals)
      if (r == rank && s == sig) return t;
    return std::nullopt;
  }
  bool is_alive(int rank) {
    std::lock_guard<std::mutex> lock(mutex);
    return alive.count(rank) != 0;
  }
};

class FakeSpawner final : public Spawner {
 public:
  explicit FakeSpawner(std::shared_ptr<FakeHost> host) : host_(std::move(host)) {
    static std::atomic<int> next{0};
    id_ = next++;
  }
  void launch(const std::vector<WorkerSpec>& workers, EventSink& sink, hvd::Deadline) override {
    {
      std::lock_guard<std::mutex> lock(host_->mutex);
      ++host_->launch_attempts;
    }
    if (host_->before_launch) host_->before_launch(*host_, workers);
    {
      std::lock_guard<std::mutex> lock(host_->mutex);
      host_->launches.push_back(workers);
      for (const auto& w : workers) {
        host_->alive.insert(w.slot.rank);
        host_->owners[w.slot.rank].emplace_back(id_, &sink);
        mine_.push_back(w.slot.rank);
        if (host_->launch_error) break;  // a partial launch: the first worker counts as started
      }
    }
    if (host_->launch_error) throw LaunchError(host_->name, host_->name + ": " + *host_->launch_error);
    if (host_->on_launch) host_->on_launch(*host_);
  }
  void signal(int rank, int sig) override {
    bool dies;
    {
      std::lock_guard<std::mutex> lock(host_->mutex);
      host_->signals.emplace_back(rank, sig, hvd::Clock::now());
      auto it = host_->dies_on.find(rank);
      const std::set<int>& set = it == host_->dies_on.end() ? host_->default_dies_on : it->second;
      dies = set.count(sig) != 0;
    }
    if (dies) host_->exit_of(id_, rank, 128 + sig, sig);
  }
  void shutdown() override {
    for (auto& t : host_->timers) t.join();
    host_->timers.clear();
    WorkerExit how;
    {
      std::lock_guard<std::mutex> lock(host_->mutex);
      host_->shut_down = true;
      ++host_->shutdowns;
      how = host_->shutdown_exit;
    }
    for (int rank : mine_) host_->exit_of(id_, rank, how.status, how.signal, how.lost_reason);
  }

 private:
  std::shared_ptr<FakeHost> host_;
  int id_ = 0;
  std::vector<int> mine_;  ///< the ranks this spawner launched
};

/// One FakeHost per host name, made on first use; every spawner made for a
/// host shares its FakeHost.
class FakeSpawnerFactory final : public SpawnerFactory {
 public:
  /// What is_local answers.
  bool local = true;
  /// Called once per new FakeHost (before its first spawner exists).
  std::function<void(FakeHost&)> on_new_host;

  std::shared_ptr<FakeHost> host(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    return host_locked(name);
  }
  /// Host names in the order spawners were made for them.
  std::vector<std::string> made() {
    std::lock_guard<std::mutex> lock(mutex_);
    return made_;
  }
  /// Every host made so far, by name.
  std::map<std::string, std::shared_ptr<FakeHost>> hosts() {
    std::lock_guard<std::mutex> lock(mutex_);
    return hosts_;
  }

  bool is_local(const std::string&) override { return local; }
  std::unique_ptr<Spawner> make(const std::string& name) override {
    std::lock_guard<std::mutex> lock(mutex_);
    made_.push_back(name);
    return std::make_unique<FakeSpawner>(host_locked(name));
  }

 private:
  std::shared_ptr<FakeHost> host_locked(const std::string& name) {
    auto& h = hosts_[name];
    if (!h) {
      h = std::make_shared<FakeHost>();
      h->name = name;
      if (on_new_host) on_new_host(*h);
    }
    return h;
  }

  std::mutex mutex_;
  std::map<std::string, std::shared_ptr<FakeHost>> hosts_;
  std::vector<std::string> made_;
};

}  // namespace hvd::launcher::fakes
