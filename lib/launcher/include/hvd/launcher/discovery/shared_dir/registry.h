#pragma once
/// Hosts that meet in a shared directory (docs/platforms.md#oci-data-science):
/// each worker machine registers `address:slots` in a file of its own and
/// refreshes it (a heartbeat); the leader writes a marker with its own
/// heartbeat and, at the end, the job's status. Every file is written to a
/// temporary name and renamed into place, so a reader sees a whole file or
/// none.
///
/// Freshness is the wall-clock time written inside the file (not the
/// file's mtime, which NFS caches): an entry older than `stale_after` is
/// stale. The machines' clocks must agree within a few seconds (NTP).
///
/// Layout of the directory:
///   WORKER_<run>.json   {"address": "10.0.0.3", "slots": 1, "heartbeat": 1764100000.5}
///   MAIN.json           {"address": "10.0.0.2", "run": "<id>", "heartbeat": ...}; removed
///                       once the status is written, so that a worker of a later run of
///                       the job never follows a leader that has ended
///   MAIN_status.json    {"run": "<id>", "status": 0}
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hvd/launcher/discovery/host_source.h"
#include "hvd/launcher/hosts/hosts.h"

namespace hvd::launcher::shared_dir {

/// Seconds since the epoch (the heartbeat clock); tests pass their own.
using Clock = std::function<double()>;
double wall_clock();

/// One registered worker.
struct WorkerEntry {
  std::string file;  ///< the file's name in the directory
  HostSpec host;
  double heartbeat = 0;
};

/// What one look at the directory found.
struct WorkerListing {
  std::vector<WorkerEntry> workers;  ///< fresh, well-formed entries, by file name; one per address (the newest)
  /// Files ignored, one line each: "WORKER_x.json: stale (heartbeat 42 s old)",
  /// "WORKER_y.json: not JSON (...)".
  std::vector<std::string> ignored;
};

/// The leader's marker.
struct Leader {
  std::string address;
  std::string run;
  double heartbeat = 0;
};

class Registry {
 public:
  /// `dir` must exist (create_directories does it). Throws nothing.
  explicit Registry(std::string dir, std::chrono::milliseconds stale_after = std::chrono::seconds(15),
                    Clock clock = wall_clock);
  const std::string& dir() const { return dir_; }
  std::chrono::milliseconds stale_after() const { return stale_after_; }

  /// Creates the directory and its parents. Throws IoError naming it.
  void create_directories() const;

  /// Writes (or refreshes) WORKER_<name>.json. Throws IoError.
  void register_worker(const std::string& name, const HostSpec& host) const;
  /// Removes WORKER_<name>.json (gone already is fine).
  void unregister_worker(const std::string& name) const;
  /// The fresh, well-formed worker entries; the others in `ignored`.
  WorkerListing list_workers() const;

  /// Writes (or refreshes) MAIN.json. Throws IoError.
  void write_leader(const std::string& address, const std::string& run) const;
  /// MAIN.json, when present and well-formed (`problem` says why not, when given).
  std::optional<Leader> read_leader(std::string* problem = nullptr) const;
  /// Whether the leader's heartbeat is older than stale_after.
  bool stale(const Leader& leader) const;
  /// Seconds since the leader's heartbeat.
  double age(const Leader& leader) const;

  /// Removes MAIN.json (the leader's job ended; its status is written).
  void remove_leader() const;

  /// Writes MAIN_status.json for `run`. Throws IoError.
  void write_status(const std::string& run, int status) const;
  /// The status written for `run`; nullopt when none is (or one of another run).
  std::optional<int> read_status(const std::string& run) const;

 private:
  void write_atomically(const std::string& name, const std::string& text) const;
  std::string dir_;
  std::chrono::milliseconds stale_after_;
  Clock clock_;
};

/// An elastic job's HostSource over a Registry: this machine (`self`,
/// listed first, so rank 0 runs on the leader) and the fresh registered
/// workers, one look per discover(). Each ignored file is reported once
/// (a warning) until its reason changes.
class SharedDirHostSource final : public HostSource {
 public:
  SharedDirHostSource(const Registry& registry, HostSpec self);
  DiscoveryResult discover() override;
  std::string describe() const override;

 private:
  const Registry& registry_;
  HostSpec self_;
  std::mutex mutex_;
  std::map<std::string, std::string> reported_;  ///< file -> the reason last reported
};

}  // namespace hvd::launcher::shared_dir
