#pragma once
/// Carries out ElasticDriver's decisions (elastic_driver.h) with real
/// threads: the job's HostSource asked every --discovery-interval on its own
/// thread, spawners from a SpawnerFactory, and the rendezvous store, where
/// worlds are published and workers' ready keys are watched.
///
/// One event loop (the thread that calls run()) owns the driver. Everything
/// else posts events to it: the discovery thread (host lists), spawner
/// threads (worker exits), store watchers (a worker's ready key appeared),
/// interrupt() (signals), SSH launch threads (a host could not be reached).
/// Local workers are launched on the loop thread itself: the local spawner
/// ties its agents' lifetime to the launching thread (PDEATHSIG).
///
/// Everything it touches comes in through ElasticRunnerDeps, so unit tests
/// drive it with a StaticHostSource or a scripted one, fake spawners and an
/// in-memory store, without a process (tests/unit/launcher/elastic).
#include "hvd/launcher/discovery/host_source.h"
#include "hvd/launcher/elastic/elastic_driver.h"
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/plan/worker_env.h"
#include "hvd/launcher/spawn/spawner_factory.h"
#include "hvd/launcher/supervise/event_log.h"
#include "hvd/launcher/supervise/output.h"
#include "hvd/store/memory_store.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

namespace hvd::launcher {

/// The driver's policy from the options (-np, --min-np, --max-np,
/// --elastic-timeout, --reset-limit, blacklist settings, --start-timeout).
ElasticPolicy elastic_policy(const Options& options);

/// What the runner reads of hvdrun's options, and nothing more (as
/// SupervisorOptions is for the Supervisor): made once by
/// elastic_runner_options().
struct ElasticRunnerOptions {
  ElasticPolicy policy;  ///< elastic_policy(options)
  std::vector<std::string> command;  ///< what every worker runs
  std::chrono::milliseconds discovery_interval{1000};  ///< --discovery-interval
  std::chrono::milliseconds start_timeout{30000};  ///< --start-timeout: a launch that takes longer failed
  std::chrono::milliseconds kill_grace{3000};  ///< --kill-grace-ms: SIGTERM to SIGKILL
};

/// The runner's options from hvdrun's.
ElasticRunnerOptions elastic_runner_options(const Options& options);

struct ElasticRunnerDeps {
  ElasticRunnerDeps(HostSource& hosts_, SpawnerFactory& spawners_, store::InMemoryStore& store_, OutputRouter& output_)
      : hosts(hosts_), spawners(spawners_), store(store_), output(output_) {}
  HostSource& hosts;
  SpawnerFactory& spawners;
  /// Where worlds are published and ready keys appear (the store server's).
  store::InMemoryStore& store;
  /// Worker output, keyed by worker serial ([N] prefixes).
  OutputRouter& output;
  /// --events-file; may be null.
  EventLog* events = nullptr;
  /// What every worker gets (build_common_env, the store's port and the
  /// job secret, HOROVOD_ELASTIC...); the store address is added by the
  /// runner (HOROVOD_GLOO_RENDEZVOUS_ADDR).
  EnvMap worker_env;
  /// The address workers reach the store on, when already known (the first
  /// look found hosts, or --network-interface was given).
  std::optional<std::string> driver_address;
  /// Chooses that address once the first hosts appear; throws with a reason.
  std::function<std::string(const std::vector<HostSpec>&)> choose_address;
  /// The store after a rebind_store: the one now served and its port.
  struct ReboundStore {
    store::InMemoryStore* store = nullptr;
    uint16_t port = 0;
  };
  /// Without driver_address the job's store listens on 127.0.0.1 only (no
  /// host needs more yet). Called once, right after choose_address, with
  /// the address chosen: serves the store there and returns the store to use
  /// from now on and its port (workers are given both; nothing was stored
  /// yet, no worker having started). Throws with a reason (the run is then
  /// ignored and the next one tries again). Null: the store stays as it is.
  std::function<ReboundStore(const std::string& address)> rebind_store;
  /// "ADDR:PORT" of the store, for the start-up line and the events file.
  std::string store_address;
  /// Seeds the driver's randomness (blacklist cooldowns).
  uint64_t seed = 0;
};

class ElasticRunner {
 public:
  ElasticRunner(ElasticRunnerOptions options, ElasticRunnerDeps deps);
  ~ElasticRunner();
  /// Runs the job to its end from the first look at the hosts (already
  /// taken by the caller, who decided the store's address from it) and
  /// returns hvdrun's exit code. Every worker is stopped before it returns.
  int run(DiscoveryResult first);
  /// A signal hvdrun received. Thread-safe; may be called at any time.
  void interrupt(int sig);

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hvd::launcher
