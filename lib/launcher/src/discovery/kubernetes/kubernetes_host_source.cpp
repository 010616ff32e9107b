// Kubernetes pods as an elastic job's hosts: list, then watch
// (kubernetes_host_source.h).
#include "hvd/launcher/discovery/kubernetes/kubernetes_host_source.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "hvd/common/text.h"

namespace hvd::launcher::kube {

KubernetesSourceOptions source_options(const Options& options, const KubeConfig& config) {
  const KubernetesOptions& k = options.elastic.kubernetes;
  KubernetesSourceOptions out;
  out.selector = k.selector.value_or("");
  out.namespace_name = k.namespace_name                 ? *k.namespace_name
                       : !config.namespace_name.empty() ? config.namespace_name
                                                        : std::string("default");
  out.rules.slots = k.slots;
  out.rules.host_names = k.host_names;
  out.rules.default_slots = options.elastic.slots_per_host.value_or(1);
  out.request_timeout = options.elastic.discovery_timeout;
  return out;
}

KubernetesHostSource::KubernetesHostSource(KubeConfig config, KubernetesSourceOptions options)
    : config_(std::move(config)), options_(std::move(options)), client_(config_) {
  if (config_.insecure_skip_tls_verify) {
    spdlog::warn("{}: insecure-skip-tls-verify is set: the API server's certificate is not verified", config_.origin);
  }
}

KubernetesHostSource::~KubernetesHostSource() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  client_.stop();
  if (thread_.joinable()) thread_.join();
}

std::string KubernetesHostSource::describe() const {
  return fmt::format("Kubernetes pods '{}' in namespace '{}' ({})", options_.selector, options_.namespace_name,
                     config_.origin);
}

void KubernetesHostSource::set_change_listener(std::function<void()> listener) {
  std::lock_guard<std::mutex> lock(mu_);
  listener_ = std::move(listener);
}

std::map<std::string, PodHost> KubernetesHostSource::pods() const {
  std::lock_guard<std::mutex> lock(mu_);
  return pods_;
}

DiscoveryResult KubernetesHostSource::discover() {
  DiscoveryResult r;
  confirm_if_watch_healthy();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (first_done_) {
      if (failure_) {
        r.error = *failure_;
      } else {
        r.hosts = hosts_of(pods_);
        r.incarnations = incarnations_of(pods_);
      }
      return r;
    }
  }
  // The first look: a list, answered directly; the watch starts from it.
  if (auto failure = list_pods()) {
    r.error = *failure;
    return r;
  }
  std::lock_guard<std::mutex> lock(mu_);
  r.hosts = hosts_of(pods_);
  r.incarnations = incarnations_of(pods_);
  if (options_.watch) {
    first_done_ = true;
    thread_ = std::thread([this] { watch_loop(); });
  }
  return r;
}

std::string KubernetesHostSource::http_failure(int status, const std::string& body, const std::string& verb) const {
  return describe_http_failure(status, body, verb, options_.namespace_name, config_.server.text());
}

std::optional<std::string> KubernetesHostSource::list_pods() {
  const std::string target = pods_target(config_.server.base_path, options_.namespace_name, options_.selector);
  KubeClient::Response response;
  for (int attempt = 0;; ++attempt) {
    try {
      if (attempt > 0) client_.token(/*force=*/true);  // a rotated token: re-read once on 401
      response = client_.get(target, options_.request_timeout, options_.max_list_bytes);
    } catch (const KubeError& e) {
      if (e.failure.too_large && e.failure.status == 200) {
        return fmt::format(
            "the pod list from the Kubernetes API server at {} is larger than {} MiB (hvdrun's limit): narrow "
            "--kubernetes-selector or --kubernetes-namespace to the job's pods",
            config_.server.text(), options_.max_list_bytes >> 20);
      }
      return std::string(e.what());
    }
    if (response.status != 401 || attempt > 0 || (config_.token_file.empty() && !config_.exec)) break;
  }
  if (response.status != 200) return http_failure(response.status, response.body, "list");
  const auto list = nlohmann::json::parse(response.body, nullptr, false);
  if (!list.is_object() || !list.contains("items") || !list["items"].is_array()) {
    return fmt::format("the Kubernetes API server at {} answered the pod list with something that is not a PodList",
                       config_.server.text());
  }
  std::string rv;
  const nlohmann::json::json_pointer rv_at("/metadata/resourceVersion");
  if (list.contains(rv_at) && list.at(rv_at).is_string()) rv = list.at(rv_at).get<std::string>();
  std::unique_lock<std::mutex> lock(mu_);
  pods_.clear();
  for (const auto& item : list["items"]) {
    PodHost p = pod_host(item, options_.rules);
    if (!p.pod.empty()) pods_[p.pod] = std::move(p);
  }
  resource_version_ = rv;
  ++lists_;
  publish_locked(lock);
  return std::nullopt;
}

void KubernetesHostSource::publish_locked(std::unique_lock<std::mutex>& lock) {
  (void)lock;
  std::vector<HostSpec> hosts = hosts_of(pods_);
  std::map<std::string, std::string> incarnations = incarnations_of(pods_);
  if (published_ && *published_ == hosts && published_incarnations_ == incarnations) return;
  published_incarnations_ = std::move(incarnations);
  const std::string unused = describe_unusable(pods_);
  // Pod names and addresses come from the API server: one line, escaped.
  spdlog::info("kubernetes: pods '{}' in namespace '{}': {}{}", options_.selector, options_.namespace_name,
               one_line(describe_usable(pods_)), unused.empty() ? "" : "; not used: " + one_line(unused));
  published_ = std::move(hosts);
  if (listener_) listener_();
}

void KubernetesHostSource::set_failure(const std::string& failure) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = std::chrono::steady_clock::now();
  if (!episode_) {
    episode_ = Episode{failure, now, 0, 0, now};
  }
  ++episode_->attempts;
  ++episode_->attempts_since_log;
  if (now - episode_->logged >= options_.failing_log_period) {
    spdlog::warn("kubernetes: pod discovery still failing: {} attempt(s) in the last {} s; latest: {}",
                 episode_->attempts_since_log,
                 std::chrono::duration_cast<std::chrono::seconds>(now - episode_->logged).count(), failure);
    episode_->attempts_since_log = 0;
    episode_->logged = now;
  }
  if (failure_ == failure) return;
  failure_ = failure;
  if (listener_) listener_();  // the runner logs the failure (once per reason) and keeps the last good hosts
}

void KubernetesHostSource::clear_failure() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failure_) return;
  failure_.reset();
  if (listener_) listener_();
}

void KubernetesHostSource::confirm_recovery() {
  std::lock_guard<std::mutex> lock(mu_);
  if (episode_) {
    const auto since = std::chrono::steady_clock::now() - episode_->since;
    spdlog::info("kubernetes: pod discovery works again ({} failed attempt(s) in {} s; first: {})", episode_->attempts,
                 std::chrono::duration_cast<std::chrono::seconds>(since).count(), episode_->first);
    episode_.reset();
  }
  if (!failure_) return;
  failure_.reset();
  if (listener_) listener_();
}

void KubernetesHostSource::confirm_if_watch_healthy() {
  bool healthy = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    healthy =
        episode_ && watch_ok_since_ && std::chrono::steady_clock::now() - *watch_ok_since_ >= options_.healthy_after;
  }
  if (healthy) confirm_recovery();
}

bool KubernetesHostSource::sleep_for(std::chrono::milliseconds d) {
  std::unique_lock<std::mutex> lock(mu_);
  return !cv_.wait_for(lock, d, [this] { return stopping_; });
}

void KubernetesHostSource::apply(const WatchEvent& event) {
  const nlohmann::json::json_pointer rv_at("/metadata/resourceVersion");
  std::unique_lock<std::mutex> lock(mu_);
  if (event.object.contains(rv_at) && event.object.at(rv_at).is_string()) {
    resource_version_ = event.object.at(rv_at).get<std::string>();
  }
  if (event.type == "BOOKMARK") return;
  PodHost p = pod_host(event.object, options_.rules);
  if (p.pod.empty()) return;
  if (event.type == "DELETED") {
    pods_.erase(p.pod);
  } else {
    pods_[p.pod] = std::move(p);
  }
  publish_locked(lock);
}

KubernetesHostSource::WatchEnd KubernetesHostSource::watch_once(
    std::string& failure, std::optional<std::chrono::steady_clock::time_point>& answered) {
  std::string from;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return WatchEnd::Stopped;
    from = resource_version_;
  }
  const std::string target = pods_target(config_.server.base_path, options_.namespace_name, options_.selector, from,
                                         options_.watch_timeout_seconds);
  // One total deadline: the server's own timeout plus a margin, however
  // the events trickle in.
  const auto total = std::chrono::milliseconds(std::chrono::seconds(options_.watch_timeout_seconds + 30));
  struct WatchOk {  // watch_ok_since_ only while this watch is answered and error-free
    KubernetesHostSource& source;
    ~WatchOk() {
      std::lock_guard<std::mutex> lock(source.mu_);
      source.watch_ok_since_.reset();
    }
  } watch_ok{*this};
  for (int attempt = 0;; ++attempt) {
    WatchStreamParser parser;
    int status = 0;
    bool gone = false;
    bool cleared = false;
    std::string error_event;
    KubeClient::Response response;
    try {
      if (attempt > 0) client_.token(/*force=*/true);
      response = client_.stream(
          target, options_.request_timeout, total,
          [&](int s) {
            status = s;
            if (s == 200) {
              answered = std::chrono::steady_clock::now();
              std::lock_guard<std::mutex> lock(mu_);
              watch_ok_since_ = answered;
            }
            return s == 200;
          },
          [&](const char* data, size_t size) {
            const bool ok = parser.feed(data, size, [&](WatchEvent e) {
              if (e.type == "ERROR") {
                const int code = e.object.value("code", 0);
                if (code == 410) {
                  gone = true;
                } else if (error_event.empty()) {
                  error_event = describe_http_failure(code, e.object.dump(), "watch", options_.namespace_name,
                                                      config_.server.text());
                }
                return;
              }
              if (gone || !error_event.empty()) return;
              if (!cleared) {  // data flows: the pods are current again (the episode stays open)
                cleared = true;
                clear_failure();
              }
              apply(e);
            });
            if (!ok || gone || !error_event.empty()) {
              std::lock_guard<std::mutex> lock(mu_);
              watch_ok_since_.reset();
            }
            return ok && !gone && error_event.empty();
          });
    } catch (const KubeError& e) {
      if (client_.stopped()) return WatchEnd::Stopped;
      // A watch that was answered and then broke (or reached its total
      // deadline) is a dropped watch, not a failure state: reconnect from
      // the last resourceVersion.
      failure = status == 200 ? "" : e.what();
      return WatchEnd::Failed;
    }
    if (response.status == 401 && attempt == 0 && (!config_.token_file.empty() || config_.exec)) continue;
    if (response.status == 410 || gone) return WatchEnd::Gone;
    if (response.status != 200) {
      failure = http_failure(response.status, response.body, "watch");
      return WatchEnd::Failed;
    }
    if (!parser.error().empty()) {
      failure = "the pod watch of the Kubernetes API server at " + config_.server.text() + " sent " + parser.error();
      return WatchEnd::Failed;
    }
    if (!error_event.empty()) {
      failure = error_event;
      return WatchEnd::Failed;
    }
    return WatchEnd::Clean;
  }
}

void KubernetesHostSource::watch_loop() {
  // Exponential backoff between attempts. Only a healthy watch (answered,
  // error-free and open for healthy_after) resets it: a server that answers
  // 200 and then sends garbage, or ends each watch at once, is asked at most
  // every backoff_max, never in a tight loop.
  Backoff backoff(options_.backoff_initial, options_.backoff_max);
  for (;;) {
    std::string failure;
    std::optional<std::chrono::steady_clock::time_point> answered;
    const WatchEnd end = watch_once(failure, answered);
    if (end == WatchEnd::Stopped) return;
    const bool healthy = (end == WatchEnd::Clean || (end == WatchEnd::Failed && failure.empty())) && answered &&
                         std::chrono::steady_clock::now() - *answered >= options_.healthy_after;
    if (healthy) {
      confirm_recovery();
      backoff.reset();
      if (end == WatchEnd::Clean) continue;  // the server's timeout: renew at once
    }
    if (end == WatchEnd::Gone) {  // 410: our resourceVersion is too old; list again
      for (;;) {
        const auto listed = list_pods();
        if (!listed) {
          confirm_recovery();
          backoff.reset();
          break;
        }
        if (client_.stopped()) return;
        set_failure(*listed);
        if (!sleep_for(backoff.next())) return;
      }
      continue;
    }
    if (!failure.empty()) set_failure(failure);
    if (!sleep_for(backoff.next())) return;
  }
}

}  // namespace hvd::launcher::kube
