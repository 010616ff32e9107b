#pragma once
/// Which spawner serves a host: local agents for this machine, SSH for the
/// rest. The static and elastic modes ask a SpawnerFactory, never a spawner
/// class, so the elastic runner's unit tests hand it fakes.
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/spawn/spawner.h"
#include "hvd/launcher/spawn/host_reach.h"
#include "hvd/launcher/spawn/ssh/ssh_spawner.h"

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

class SpawnerFactory {
 public:
  virtual ~SpawnerFactory() = default;
  /// Whether `host` is this machine (may resolve the name, bounded in time).
  virtual bool is_local(const std::string& host) = 0;
  /// A new spawner for the workers of `host`. Local spawners tie their
  /// agents' lifetime to the thread that calls launch() (PR_SET_PDEATHSIG),
  /// so callers launch them from a thread that outlives the workers.
  virtual std::unique_ptr<Spawner> make(const std::string& host) = 0;
};

/// What the real factory reads of hvdrun's options, and nothing more (as
/// SupervisorOptions is for the Supervisor).
struct SpawnerOptions {
  std::chrono::milliseconds kill_grace{3000};  ///< --kill-grace-ms (local agents)
  std::optional<int> ssh_port;  ///< -p
  std::optional<std::string> ssh_identity_file;  ///< -i
  bool ssh_strict_host_key_checking = false;  ///< --ssh-strict-host-key-checking
  std::chrono::seconds ssh_keepalive{5};  ///< --ssh-keepalive
  bool verbose = false;  ///< --verbose: ssh -v
  /// --launcher as resolved (discovery/choose.h): "srun" starts the agents
  /// of other hosts through srun (spawn/srun/srun_launch.h), else SSH.
  std::string launcher = "ssh";
  /// Hosts started through srun under --launcher ssh resolved from auto
  /// inside an allocation: the allocation's nodes.
  std::vector<std::string> srun_nodes;
};

/// The spawner options from hvdrun's.
SpawnerOptions spawner_options(const Options& options);

/// The real factory: local agents (`hvdrun --agent`) or SSH, as `options`
/// say. Answers of is_local are cached per host name.
class DefaultSpawnerFactory final : public SpawnerFactory {
 public:
  explicit DefaultSpawnerFactory(SpawnerOptions options);
  bool is_local(const std::string& host) override;
  std::unique_ptr<Spawner> make(const std::string& host) override;
  /// What make(host) would use, and for SSH the settings it would connect
  /// with (describe_ssh_route).
  HostReach reach(const std::string& host);

 private:
  HostReach::Kind kind(const std::string& host);
  SshSpawnerOptions ssh_options() const;

  const SpawnerOptions options_;
  std::mutex mutex_;
  std::map<std::string, bool> local_;
};

}  // namespace hvd::launcher
