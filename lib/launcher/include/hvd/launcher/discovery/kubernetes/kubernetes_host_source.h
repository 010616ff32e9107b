#pragma once
/// --kubernetes-selector: the pods of a label selector as an elastic job's
/// hosts, straight from the API server (no kubectl). The first look lists
/// the pods; then a background thread watches them (resourceVersion,
/// bookmarks, a re-list on 410 Gone, reconnects with bounded exponential
/// backoff after a dropped or failed watch) and keeps the current set, so discover() answers at once
/// and a pod that leaves wakes the elastic loop through the change listener
/// instead of waiting one --discovery-interval. API failures are values: a
/// running job keeps the last good set (docs/kubernetes.md).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "hvd/launcher/discovery/host_source.h"
#include "hvd/launcher/discovery/kubernetes/kube_client.h"
#include "hvd/launcher/discovery/kubernetes/kube_config.h"
#include "hvd/launcher/discovery/kubernetes/pod_hosts.h"

namespace hvd::launcher::kube {

struct KubernetesSourceOptions {
  std::string selector;
  std::string namespace_name;  ///< resolved: flag, else the credentials', else "default"
  PodHostRules rules;
  /// One deadline for a whole pod list (connect, TLS, headers, body), and
  /// for a watch up to its headers (--discovery-timeout).
  std::chrono::milliseconds request_timeout{10000};
  /// A larger pod list is refused (one line) while it arrives.
  std::size_t max_list_bytes = std::size_t(32) << 20;
  /// Server-side watch timeout; the watch is then renewed from its
  /// resourceVersion. A watch still open this long plus 30 s is ended by
  /// hvdrun (one total deadline, however its events trickle in).
  int watch_timeout_seconds = 300;
  std::chrono::milliseconds backoff_initial{100};
  std::chrono::milliseconds backoff_max{5000};
  /// Only a watch answered and error-free for this long resets the backoff
  /// and confirms a recovery ("works again").
  std::chrono::milliseconds healthy_after{5000};
  /// While discovery keeps failing, how often the attempts are counted in
  /// the log ("still failing: N attempts in the last 5 min").
  std::chrono::milliseconds failing_log_period{std::chrono::minutes(5)};
  /// false: looks only list (--dry-run); no watch thread.
  bool watch = true;
};

/// The options from hvdrun's: namespace resolved (the flag, the service
/// account's or context's, "default").
KubernetesSourceOptions source_options(const Options& options, const KubeConfig& config);

class KubernetesHostSource final : public HostSource {
 public:
  KubernetesHostSource(KubeConfig config, KubernetesSourceOptions options);
  ~KubernetesHostSource() override;

  /// The first call lists the pods (bounded by request_timeout) and starts
  /// the watch; later calls answer from the watched set at once, or with
  /// the current failure (the runner then keeps the previous hosts).
  DiscoveryResult discover() override;
  std::string describe() const override;
  void set_change_listener(std::function<void()> listener) override;

  /// The pods of the last good look, for --dry-run and logs.
  std::map<std::string, PodHost> pods() const;
  /// The watch thread's state, for tests: how many lists and watches it made.
  int lists() const { return lists_; }

 private:
  void watch_loop();
  /// One list: replaces the pod set and resourceVersion; a failure message otherwise.
  std::optional<std::string> list_pods();
  /// One watch from resource_version_ until it ends; returns how it ended.
  enum class WatchEnd { Clean, Gone, Failed, Stopped };
  /// `answered`: when the server answered 200 (unset: it did not).
  WatchEnd watch_once(std::string& failure, std::optional<std::chrono::steady_clock::time_point>& answered);
  void apply(const WatchEvent& event);
  /// A failed attempt: discover() reports `failure` until a valid answer
  /// clears it. The first of an episode is what the runner logs (once per
  /// distinct reason); repeats are only counted here.
  void set_failure(const std::string& failure);
  /// Valid data arrived (a watch event): discover() answers with the pods
  /// again, but the episode stays open, so a server that answers and then
  /// fails again logs nothing new.
  void clear_failure();
  /// The API answered properly (a complete list, a watch healthy for
  /// healthy_after): the episode ends with one "works again" line.
  void confirm_recovery();
  /// discover(): a watch answered and error-free for healthy_after confirms
  /// a recovery without waiting for it to end.
  void confirm_if_watch_healthy();
  void publish_locked(std::unique_lock<std::mutex>& lock);  ///< logs a changed set, notifies
  bool sleep_for(std::chrono::milliseconds d);  ///< false when stopping
  /// The request answered with an HTTP error: one line (401 retried once with
  /// a re-read token by the caller).
  std::string http_failure(int status, const std::string& body, const std::string& verb) const;

  KubeConfig config_;
  KubernetesSourceOptions options_;
  KubeClient client_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, PodHost> pods_;
  std::string resource_version_;
  std::optional<std::string> failure_;
  /// The open failure episode: its first reason, when it began, the failed
  /// attempts in it and since the last count line.
  struct Episode {
    std::string first;
    std::chrono::steady_clock::time_point since;
    int attempts = 0;
    int attempts_since_log = 0;
    std::chrono::steady_clock::time_point logged;
  };
  std::optional<Episode> episode_;
  /// When the current watch answered 200 and has had no error since.
  std::optional<std::chrono::steady_clock::time_point> watch_ok_since_;
  std::optional<std::vector<HostSpec>> published_;
  std::map<std::string, std::string> published_incarnations_;
  std::function<void()> listener_;
  bool first_done_ = false;
  bool stopping_ = false;
  std::atomic<int> lists_{0};
  std::thread thread_;
};

}  // namespace hvd::launcher::kube
