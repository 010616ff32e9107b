#pragma once
/// Where a job learns its hosts (PRRTE's ras): one interface that a fixed
/// list (-H, --hostfile, localhost:np, a platform's hosts), the discovery
/// script, the Kubernetes pods (discovery/kubernetes/) and the OCI shared
/// directory (discovery/shared_dir/) implement; choose_host_source
/// (discovery/choose.h) picks one. A static job takes its source's first
/// look; the elastic runner asks it every --discovery-interval, and sooner
/// when a source that watches its hosts says they changed; neither knows
/// which kind it has.
#include "hvd/common/io.h"
#include "hvd/launcher/discovery/discovery.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace hvd::launcher {

class HostSource {
 public:
  virtual ~HostSource() = default;
  /// One look at the hosts: a list, or a one-line reason. Failures are
  /// values: after the first look a failing source only keeps the previous
  /// host set, it never tears a running job down. May block (bounded by the
  /// source's own timeout); called from one thread at a time.
  virtual DiscoveryResult discover() = 0;
  /// How messages name the source ("host discovery script './discover.sh'").
  virtual std::string describe() const = 0;
  /// hvdrun is stopping (a signal): a discover() in progress, and every later
  /// one, returns at once (with an error). Thread-safe; sources that never
  /// block long need not override it.
  virtual void cancel() {}
  /// A source that learns of changes by itself (a Kubernetes watch) calls
  /// `listener` when its hosts may have changed, from any thread, so the
  /// runner asks at once instead of one --discovery-interval later. The
  /// listener must not call back into the source. After
  /// set_change_listener(nullptr) returns, the old listener is not running
  /// and is never called again. Polled sources ignore it.
  virtual void set_change_listener(std::function<void()> listener) { (void)listener; }
};

/// --host-discovery-script: run_discovery_script once per look.
class ScriptHostSource final : public HostSource {
 public:
  /// Throws IoError when its cancel descriptor cannot be made.
  explicit ScriptHostSource(DiscoveryScriptOptions options);
  DiscoveryResult discover() override { return run_discovery_script(options_); }
  std::string describe() const override { return "host discovery script '" + options_.script + "'"; }
  /// Kills the run in progress at once (options.cancel_fd).
  void cancel() override;

 private:
  DiscoveryScriptOptions options_;
  UniqueFd cancel_;  ///< an eventfd, options_.cancel_fd
};

/// A fixed host list that every look returns unchanged: -H, --hostfile,
/// horovodrun's default localhost:np, or a platform's hosts.
class StaticHostSource final : public HostSource {
 public:
  explicit StaticHostSource(std::vector<HostSpec> hosts) : hosts_(std::move(hosts)) {}
  DiscoveryResult discover() override {
    DiscoveryResult r;
    r.hosts = hosts_;
    return r;
  }
  std::string describe() const override { return "fixed host list"; }

 private:
  std::vector<HostSpec> hosts_;
};

}  // namespace hvd::launcher
