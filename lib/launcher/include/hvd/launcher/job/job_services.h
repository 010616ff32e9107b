#pragma once
/// What every kind of job (static, elastic, mpirun) needs around its
/// workers, in one place: logging at the --verbose level, signal handling,
/// the output router, the --events-file record, the address workers reach
/// hvdrun on, the job secret and the rendezvous store. The three modes
/// (job/static_job.cpp, job/elastic_job.cpp, job/mpi_job.cpp) are thin
/// layers over it.
///
/// Errors are reported here, as one "hvdrun: error: ..." line on stderr, and
/// come back as hvdrun's exit code (0 means go on): the modes never print
/// set-up errors themselves.
#include "hvd/launcher/hosts/hosts.h"
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/plan/worker_env.h"
#include "hvd/launcher/process/signal_guard.h"
#include "hvd/launcher/supervise/event_log.h"
#include "hvd/launcher/supervise/output.h"
#include "hvd/launcher/supervise/supervisor.h"
#include "hvd/store/http_store.h"

#include <memory>
#include <string>
#include <vector>

namespace hvd::launcher {

class JobServices {
 public:
  /// Sets up logging and the signal guard. Construct it first thing in a
  /// mode's run function, on the main thread, before any other thread
  /// exists (threads inherit the blocked signal mask).
  explicit JobServices(const Options& options);
  /// Stops the store (if still running) and the signal watcher.
  ~JobServices();
  JobServices(const JobServices&) = delete;
  JobServices& operator=(const JobServices&) = delete;

  /// Opens the output router (--output-filename, --prefix-output-with-
  /// timestamp; `num_workers` sizes the rank prefixes, `lazy_worker_dirs`
  /// creates each worker's directory on its first write) and the events
  /// file. 0, or exit_code::kUsage.
  int open_output(int num_workers, bool lazy_worker_dirs);
  /// Only the events file (--events-file), for modes whose output does not
  /// pass through hvdrun. 0, or exit_code::kUsage.
  int open_events();

  /// The address workers reach hvdrun on, from --network-interface and the
  /// hosts (choose_driver_address). 0, or exit_code::kUsage (no usable
  /// --network-interface) or exit_code::kLaunch (a host that does not
  /// resolve or has no route: as unreachable as a failed SSH connection).
  int choose_address(const std::vector<HostSpec>& hosts, std::string& address);

  /// A new job secret and the rendezvous store listening on `bind_address`
  /// (port chosen by the kernel). 0, or exit_code::kLaunch.
  int start_store(const std::string& bind_address);

  /// The rendezvous variables workers need: the store's address (as workers
  /// reach it), port and the job secret.
  EnvMap rendezvous_env(const std::string& driver_address) const;

  /// Runs the Supervisor over `hosts` with hvdrun's signals forwarded to it
  /// and returns its exit code. `kill_grace` overrides --kill-grace-ms (the
  /// mpirun mode gives mpirun more time to tear down its ranks).
  int supervise(std::vector<HostLaunch> hosts, std::optional<std::chrono::milliseconds> kill_grace = std::nullopt);

  /// Emits job_end and stops the store; returns `code`.
  int finish(int code);

  /// Emits an event when --events-file is given.
  void emit(const std::string& event, std::initializer_list<std::pair<const char*, EventValue>> fields);

  const Options& options() const { return options_; }
  SignalGuard& signals() { return signals_; }
  /// Null before open_output().
  OutputRouter* output() { return output_.get(); }
  /// Null unless --events-file was given.
  EventLog* events() { return events_.get(); }
  /// Valid after start_store().
  store::HttpStoreServer& store() { return *store_; }
  uint16_t store_port() const;
  const std::string& secret() const { return secret_; }

 private:
  const Options& options_;
  SignalGuard signals_;
  std::unique_ptr<OutputRouter> output_;
  std::unique_ptr<EventLog> events_;
  std::string secret_;
  std::unique_ptr<store::HttpStoreServer> store_;
  bool finished_ = false;
};

}  // namespace hvd::launcher
