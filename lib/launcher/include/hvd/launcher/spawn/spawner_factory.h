#pragma once
/// Which spawner serves a host: local agents for this machine, SSH for the
/// rest. The static and elastic modes ask a SpawnerFactory, never a spawner
/// class, so the elastic runner's unit tests hand it fakes.
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/spawn/spawner.h"

#include <map>
#include <memory>
#include <mutex>
#include <string>

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

/// The real factory: local agents (`hvdrun --agent`) or SSH from `options`
/// (-p, -i, --ssh-strict-host-key-checking, --ssh-keepalive, --verbose,
/// --kill-grace-ms). Answers of is_local are cached per host name.
class DefaultSpawnerFactory final : public SpawnerFactory {
 public:
  explicit DefaultSpawnerFactory(const Options& options);
  bool is_local(const std::string& host) override;
  std::unique_ptr<Spawner> make(const std::string& host) override;

 private:
  const Options& options_;
  std::mutex mutex_;
  std::map<std::string, bool> local_;
};

}  // namespace hvd::launcher
