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
/// stale, and so is one more than `stale_after` in the future (the clocks
/// may differ by that much; a time far ahead must not keep an entry fresh
/// forever). The machines' clocks must agree within a few seconds (NTP).
///
/// The directory may be writable by other users (docs/design.md, "Security
/// rules", hvd/common/files.h): files are created O_EXCL|O_NOFOLLOW under
/// random temporary names; a file read must be a regular one of this user's
/// or root's, of at most 64 KiB (else it is ignored with its reason, never
/// followed, never waited on); the directory (or one above it) writable by
/// every user without the sticky bit is refused (InvalidArgument), with the
/// sticky bit warned about once.
///
/// Layout of the directory:
///   WORKER_<run>.json   {"address": "10.0.0.3", "slots": 1, "heartbeat": 1764100000.5,
///                        "token": "<random, one per worker run>"}
///   MAIN.json           {"address": "10.0.0.2", "run": "<id>", "heartbeat": ...}; removed
///                       once the status is written, so that a worker of a later run of
///                       the job never follows a leader that has ended
///   MAIN_status.json    {"run": "<id>", "status": 0, "workers": ["<token>", ...]}: the
///                       tokens of the workers the leader's job listed, so that a worker
///                       whose whole job ended between two of its looks (it never saw
///                       MAIN.json) still finds the job's status
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "hvd/common/files.h"
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
  std::string token;  ///< the worker run's token ("" when its file has none)
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

  /// Creates the directory and its parents, then check_directory(). Throws
  /// IoError naming it.
  void create_directories() const;
  /// Throws InvalidArgument (one line naming it) when the directory may not
  /// be shared (hvd::open_shared_directory); warns once when every user can
  /// write it (with the sticky bit). A missing directory is fine.
  void check_directory() const;

  /// Writes (or refreshes) WORKER_<name>.json; `token` (random, one per
  /// worker run) is what the leader's status names it by. Throws IoError.
  void register_worker(const std::string& name, const HostSpec& host, const std::string& token = "") const;
  /// Removes WORKER_<name>.json (gone already is fine).
  void unregister_worker(const std::string& name) const;
  /// The fresh, well-formed worker entries; the others in `ignored`. Throws
  /// InvalidArgument when the directory is refused, IoError when it cannot
  /// be listed.
  WorkerListing list_workers() const;

  /// Writes (or refreshes) MAIN.json. Throws IoError.
  void write_leader(const std::string& address, const std::string& run) const;
  /// MAIN.json, when present and well-formed (`problem` says why not, when given).
  std::optional<Leader> read_leader(std::string* problem = nullptr) const;
  /// Whether the leader's heartbeat is older than stale_after, or more than
  /// stale_after in the future.
  bool stale(const Leader& leader) const;
  /// Seconds since the leader's heartbeat (negative: in the future).
  double age(const Leader& leader) const;
  /// "12 s old", "1000000 s in the future".
  std::string describe_age(const Leader& leader) const;

  /// Removes MAIN.json (the leader's job ended; its status is written).
  void remove_leader() const;

  /// Writes MAIN_status.json for `run`, naming the tokens of the workers
  /// the job listed. Throws IoError.
  void write_status(const std::string& run, int status, const std::set<std::string>& workers = {}) const;
  /// The status written for `run`; nullopt when none is (or one of another
  /// run); `problem` says why a file there is not trusted, when given.
  std::optional<int> read_status(const std::string& run, std::string* problem = nullptr) const;
  /// The status written by any run whose job listed the worker `token`
  /// (with that run's id); nullopt when none names it. An empty token
  /// matches nothing.
  std::optional<std::pair<std::string, int>> read_status_naming(const std::string& token) const;

 private:
  SharedDirectory open_dir() const;
  OwnedFile read(const std::string& name) const;
  /// MAIN_status.json's text when it is there and trusted; `problem` says
  /// why a file there is not, when given.
  std::optional<std::string> status_text(std::string* problem) const;
  void write_atomically(const std::string& name, const std::string& text) const;
  /// Unlinks `name`; gone already is fine, a failure is one warning.
  void remove(const std::string& name) const;
  /// How far in the future a heartbeat may be (the clocks' disagreement).
  double skew_limit() const;
  std::string dir_;
  std::chrono::milliseconds stale_after_;
  Clock clock_;
  mutable std::atomic<bool> warned_world_writable_{false};
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
  /// The tokens of every worker a discover() listed so far.
  std::set<std::string> tokens_seen() const;

 private:
  const Registry& registry_;
  HostSpec self_;
  mutable std::mutex mutex_;
  std::set<std::string> tokens_;
  std::map<std::string, std::string> reported_;  ///< file -> the reason last reported
};

}  // namespace hvd::launcher::shared_dir
