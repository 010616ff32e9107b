#pragma once
/// A HostSource (discovery/host_source.h) whose hosts the test sets, and
/// changes while a job runs; a look fails while an error is set. Counts its
/// looks. Shared by the launcher's unit tests (the ElasticRunner, the job
/// modes).
#include "hvd/launcher/discovery/host_source.h"

#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher::fakes {

class ScriptedHostSource final : public HostSource {
 public:
  explicit ScriptedHostSource(std::vector<HostSpec> hosts, std::string description = "scripted hosts")
      : hosts_(std::move(hosts)), description_(std::move(description)) {}
  DiscoveryResult discover() override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++looks_;
    DiscoveryResult r;
    if (error_) {
      r.error = *error_;
    } else {
      r.hosts = hosts_;
    }
    return r;
  }
  std::string describe() const override { return description_; }
  void set_hosts(std::vector<HostSpec> hosts) {
    std::lock_guard<std::mutex> lock(mutex_);
    hosts_ = std::move(hosts);
  }
  void set_error(std::optional<std::string> error) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::move(error);
  }
  int looks() {
    std::lock_guard<std::mutex> lock(mutex_);
    return looks_;
  }

 private:
  std::mutex mutex_;
  std::vector<HostSpec> hosts_;
  std::string description_;
  std::optional<std::string> error_;
  int looks_ = 0;
};

}  // namespace hvd::launcher::fakes
