#pragma once
/// What every kind of job (static, elastic, mpirun) needs around its
/// workers, in one place: logging at the --verbose level, signal handling
/// (the SignalGuard), the output router, the --events-file record, the
/// address workers reach hvdrun on, the job secret, the rendezvous store
/// (including its move to a late-chosen address in an elastic job) and the
/// rendezvous variables workers get. The three modes (job/static_job.cpp,
/// job/elastic_job.cpp, job/mpi_job.cpp) are thin layers over it.
///
/// Errors: a set-up step that fails throws JobError (process/report.h)
/// with its exit code; run() reports it once, as one "hvdrun: error: ..."
/// line on stderr, and ends the job with that code. The modes never print
/// set-up errors themselves.
#include "hvd/launcher/hosts/hosts.h"
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/plan/worker_env.h"
#include "hvd/launcher/process/signal_guard.h"
#include "hvd/launcher/supervise/event_log.h"
#include "hvd/launcher/supervise/output.h"
#include "hvd/launcher/supervise/supervisor.h"
#include "hvd/store/http_store.h"

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

/// What JobServices reads of hvdrun's options, and nothing more.
struct JobServicesOptions {
  /// Sets hvdrun's logging up as the options ask (init_launcher_logging);
  /// unset: debug with `verbose`, else info.
  std::function<void()> start_logging;
  bool verbose = false;  ///< --verbose: debug logging
  std::optional<std::string> output_filename;  ///< --output-filename DIR
  bool prefix_output_with_timestamp = false;  ///< --prefix-output-with-timestamp
  std::optional<std::string> events_file;  ///< --events-file
  std::vector<std::string> network_interfaces;  ///< --network-interface: the address workers reach
  bool insecure_store = false;  ///< --insecure-store
  std::chrono::milliseconds start_timeout{30000};  ///< --start-timeout (the Supervisor's)
  std::chrono::milliseconds kill_grace{3000};  ///< --kill-grace-ms
};

/// JobServices' options from hvdrun's (`options` outlives the JobServices:
/// start_logging reads it).
JobServicesOptions job_services_options(const Options& options);

class JobServices {
 public:
  /// Sets up logging and the signal guard. Construct it first thing in a
  /// mode's run function, on the main thread, before any other thread
  /// exists (threads inherit the blocked signal mask).
  explicit JobServices(JobServicesOptions options);
  /// Stops the store (if still running) and the signal watcher.
  ~JobServices();
  JobServices(const JobServices&) = delete;
  JobServices& operator=(const JobServices&) = delete;

  /// Runs a mode's body to its exit code, then finish(). A JobError the
  /// body throws is reported here (report_error, once) and its code is the
  /// exit code; any other exception goes on to hvdrun_main (exit_code_for).
  int run(const std::function<int()>& body);

  /// Opens the output router (--output-filename, --prefix-output-with-
  /// timestamp; `num_workers` sizes the rank prefixes, `lazy_worker_dirs`
  /// creates each worker's directory on its first write) and the events
  /// file. Throws JobError(exit_code::kUsage).
  void open_output(int num_workers, bool lazy_worker_dirs);
  /// Only the events file (--events-file), for modes whose output does not
  /// pass through hvdrun. Throws JobError(exit_code::kUsage).
  void open_events();

  /// The address workers reach hvdrun on, from --network-interface and the
  /// hosts (choose_driver_address). Throws JobError: exit_code::kUsage (no
  /// usable --network-interface) or exit_code::kLaunch (a host that does
  /// not resolve or has no route: as unreachable as a failed SSH
  /// connection).
  std::string choose_address(const std::vector<HostSpec>& hosts);
  /// choose_driver_address itself, for a choice made later (an elastic
  /// job's first hosts): throws its own exceptions with the reason.
  std::string choose_address_now(const std::vector<HostSpec>& hosts) const;

  /// A new job secret and the rendezvous store listening on `bind_address`
  /// (port chosen by the kernel). Throws JobError(exit_code::kLaunch).
  void start_store(const std::string& bind_address);

  /// The store as workers are given it after rebind_store().
  struct ServedStore {
    store::InMemoryStore* store = nullptr;
    uint16_t port = 0;
  };
  /// Serves the store on `address` instead of 127.0.0.1, for an elastic job
  /// whose address is chosen when its first hosts appear: same secret, the
  /// same port when it is free there. The store it replaces is stopped
  /// (nothing reached it: no worker had started) and kept until the end.
  /// Returns what workers use from now on. Nothing changes when `address`
  /// is 127.0.0.1. Throws with the reason when the store cannot listen.
  ServedStore rebind_store(const std::string& address);

  /// The rendezvous variables workers need: the store's address (as workers
  /// reach it), port and the job secret.
  EnvMap rendezvous_env(const std::string& driver_address) const;
  /// rendezvous_env() added to every worker of `plan` (a static job).
  void add_rendezvous_env(JobPlan& plan, const std::string& driver_address) const;

  /// Runs the Supervisor over `hosts` with hvdrun's signals forwarded to it
  /// and returns its exit code. `kill_grace` overrides --kill-grace-ms (the
  /// mpirun mode gives mpirun more time to tear down its ranks).
  int supervise(std::vector<HostLaunch> hosts, std::optional<std::chrono::milliseconds> kill_grace = std::nullopt);

  /// Emits job_end and stops the store; returns `code`.
  int finish(int code);

  /// Emits an event when --events-file is given.
  void emit(const std::string& event, std::initializer_list<std::pair<const char*, EventValue>> fields);

  const JobServicesOptions& options() const { return options_; }
  SignalGuard& signals() { return signals_; }
  /// Null before open_output().
  OutputRouter* output() { return output_.get(); }
  /// Null unless --events-file was given.
  EventLog* events() { return events_.get(); }
  /// Valid after start_store(); the one rebind_store() started, after it.
  store::HttpStoreServer& store() { return *store_; }
  uint16_t store_port() const;
  const std::string& secret() const { return secret_; }

 private:
  const JobServicesOptions options_;
  SignalGuard signals_;
  std::unique_ptr<OutputRouter> output_;
  std::unique_ptr<EventLog> events_;
  std::string secret_;
  std::unique_ptr<store::HttpStoreServer> store_;
  /// The store rebind_store() moved away from: stopped, kept while the
  /// runner may still hold references to it.
  std::unique_ptr<store::HttpStoreServer> retired_store_;
  bool finished_ = false;
};

}  // namespace hvd::launcher
