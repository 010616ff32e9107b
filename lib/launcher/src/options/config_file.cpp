#include "hvd/launcher/options/config_file.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "hvd/common/error.h"

namespace hvd::launcher {

namespace {

/// Reads one section of the file, remembering where each value came from.
class Section {
 public:
  Section(const YAML::Node& node, std::string name, std::string origin)
      : node_(node), name_(std::move(name)), origin_(std::move(origin)) {}

  /// Calls `handler(key, value)` for known keys; warns about the rest.
  void each(const std::map<std::string, std::function<void(const YAML::Node&)>>& handlers) const {
    for (auto it = node_.begin(); it != node_.end(); ++it) {
      std::string key = it->first.Scalar();
      auto h = handlers.find(key);
      if (h == handlers.end()) {
        spdlog::warn("{}:{}: unknown key '{}' in '{}' (ignored)", origin_, it->first.Mark().line + 1, key, name_);
        continue;
      }
      if (it->second.IsNull()) continue;
      current_key_ = key;
      h->second(it->second);
    }
  }

  [[noreturn]] void fail(const YAML::Node& value, const std::string& expected) const {
    std::string got =
        value.IsScalar() ? fmt::format("'{}'", value.Scalar()) : (value.IsSequence() ? "a list" : "a mapping");
    throw InvalidArgument(fmt::format("{}:{}: {}.{}: expected {}, got {}", origin_, value.Mark().line + 1, name_,
                                      current_key_, expected, got));
  }

  double as_double(const YAML::Node& v) const {
    if (!v.IsScalar()) fail(v, "a number");
    try {
      return v.as<double>();
    } catch (const YAML::Exception&) {
      fail(v, "a number");
    }
  }
  long as_long(const YAML::Node& v) const {
    if (!v.IsScalar()) fail(v, "an integer");
    try {
      return v.as<long>();
    } catch (const YAML::Exception&) {
      fail(v, "an integer");
    }
  }
  long as_nonnegative(const YAML::Node& v) const {
    long n = as_long(v);
    if (n < 0) fail(v, "an integer >= 0");
    return n;
  }
  bool as_bool(const YAML::Node& v) const {
    if (!v.IsScalar()) fail(v, "true or false");
    try {
      return v.as<bool>();
    } catch (const YAML::Exception&) {
      fail(v, "true or false");
    }
  }
  std::string as_string(const YAML::Node& v) const {
    if (!v.IsScalar()) fail(v, "a string");
    return v.Scalar();
  }

 private:
  YAML::Node node_;
  std::string name_;
  std::string origin_;
  mutable std::string current_key_;
};

}  // namespace

std::string normalize_log_level(const std::string& level) {
  std::string upper = level;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  for (const char* ok : {"TRACE", "DEBUG", "INFO", "WARNING", "ERROR", "FATAL"}) {
    if (upper == ok) return upper;
  }
  throw InvalidArgument(fmt::format("log level '{}' is not one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL", level));
}

ConfigFileValues parse_config_text(const std::string& text, const std::string& origin) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw InvalidArgument(fmt::format("{}:{}: YAML syntax error: {}", origin, e.mark.line + 1, e.msg));
  }
  ConfigFileValues out;
  if (root.IsNull()) return out;
  if (!root.IsMap()) {
    throw InvalidArgument(
        fmt::format("{}:{}: expected a mapping of sections (params:, autotune:, ...)", origin, root.Mark().line + 1));
  }
  TuningOptions& t = out.tuning;
  using Handlers = std::map<std::string, std::function<void(const YAML::Node&)>>;

  for (auto it = root.begin(); it != root.end(); ++it) {
    const std::string key = it->first.Scalar();
    const YAML::Node value = it->second;
    const int line = it->first.Mark().line + 1;
    if (value.IsNull()) continue;
    if (key == "controller") {
      if (!value.IsScalar()) {
        throw InvalidArgument(fmt::format("{}:{}: controller: expected gloo or mpi", origin, line));
      }
      std::string c = value.Scalar();
      std::transform(c.begin(), c.end(), c.begin(),
                     [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
      if (c == "gloo") {
        out.engine = Engine::Gloo;
      } else if (c == "mpi") {
        out.engine = Engine::Mpi;
      } else {
        throw InvalidArgument(fmt::format("{}:{}: controller: expected gloo or mpi, got '{}'", origin,
                                          value.Mark().line + 1, value.Scalar()));
      }
      continue;
    }
    if (!value.IsMap()) {
      static const char* known[] = {"params",          "autotune", "timeline", "stall_check",
                                    "library_options", "logging",  "elastic"};
      if (std::find(std::begin(known), std::end(known), key) != std::end(known)) {
        throw InvalidArgument(fmt::format("{}:{}: {}: expected a mapping of settings", origin, line, key));
      }
      spdlog::warn("{}:{}: unknown key '{}' (ignored)", origin, line, key);
      continue;
    }
    Section s(value, key, origin);
    if (key == "params") {
      s.each(Handlers{
          {"fusion_threshold_mb",
           [&](const YAML::Node& v) {
             double d = s.as_double(v);
             if (d < 0) s.fail(v, "a number >= 0");
             t.fusion_threshold_mb = d;
           }},
          {"cycle_time_ms",
           [&](const YAML::Node& v) {
             double d = s.as_double(v);
             if (d < 0) s.fail(v, "a number >= 0");
             t.cycle_time_ms = d;
           }},
          {"cache_capacity", [&](const YAML::Node& v) { t.cache_capacity = s.as_nonnegative(v); }},
          {"hierarchical_allreduce", [&](const YAML::Node& v) { t.hierarchical_allreduce = s.as_bool(v); }},
          {"hierarchical_allgather", [&](const YAML::Node& v) { t.hierarchical_allgather = s.as_bool(v); }},
      });
    } else if (key == "autotune") {
      s.each(Handlers{
          {"enabled", [&](const YAML::Node& v) { t.autotune = s.as_bool(v); }},
          {"log_file", [&](const YAML::Node& v) { t.autotune_log_file = s.as_string(v); }},
          {"warmup_samples", [&](const YAML::Node& v) { t.autotune_warmup_samples = s.as_nonnegative(v); }},
          {"steps_per_sample", [&](const YAML::Node& v) { t.autotune_steps_per_sample = s.as_nonnegative(v); }},
          {"bayes_opt_max_samples",
           [&](const YAML::Node& v) { t.autotune_bayes_opt_max_samples = s.as_nonnegative(v); }},
          {"gaussian_process_noise",
           [&](const YAML::Node& v) {
             double d = s.as_double(v);
             if (d < 0 || d > 1) s.fail(v, "a number in [0, 1]");
             t.autotune_gaussian_process_noise = d;
           }},
      });
      // horovodrun: an autotune section without `enabled` means disabled.
      if (!t.autotune) t.autotune = false;
    } else if (key == "timeline") {
      s.each(Handlers{
          {"filename", [&](const YAML::Node& v) { t.timeline_filename = s.as_string(v); }},
          {"mark_cycles", [&](const YAML::Node& v) { t.timeline_mark_cycles = s.as_bool(v); }},
      });
    } else if (key == "stall_check") {
      s.each(Handlers{
          {"enabled", [&](const YAML::Node& v) { t.no_stall_check = !s.as_bool(v); }},
          {"warning_time_seconds",
           [&](const YAML::Node& v) { t.stall_check_warning_time_seconds = s.as_nonnegative(v); }},
          {"shutdown_time_seconds",
           [&](const YAML::Node& v) { t.stall_check_shutdown_time_seconds = s.as_nonnegative(v); }},
      });
      if (!t.no_stall_check) t.no_stall_check = false;
    } else if (key == "library_options") {
      s.each(Handlers{
          {"mpi_threads_disable", [&](const YAML::Node& v) { t.mpi_threads_disable = s.as_bool(v); }},
          {"num_nccl_streams", [&](const YAML::Node& v) { t.num_nccl_streams = s.as_nonnegative(v); }},
          {"thread_affinity", [&](const YAML::Node& v) { t.thread_affinity = s.as_nonnegative(v); }},
          {"ccl_bgt_affinity", [&](const YAML::Node& v) { out.ccl_bgt_affinity = s.as_nonnegative(v); }},
          {"gloo_timeout_seconds", [&](const YAML::Node& v) { t.gloo_timeout_seconds = s.as_nonnegative(v); }},
      });
    } else if (key == "logging") {
      s.each(Handlers{
          {"level",
           [&](const YAML::Node& v) {
             try {
               t.log_level = normalize_log_level(s.as_string(v));
             } catch (const InvalidArgument&) {
               s.fail(v, "one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL");
             }
           }},
          {"with_timestamp", [&](const YAML::Node& v) { t.log_hide_timestamp = !s.as_bool(v); }},
      });
    } else if (key == "elastic") {
      ElasticSettings& e = out.elastic;
      auto at_least = [&](const YAML::Node& v, long min) {
        long n = s.as_long(v);
        if (n < min) s.fail(v, fmt::format("an integer >= {}", min));
        if (n > 1000000000L) s.fail(v, "a smaller integer");
        return static_cast<int>(n);
      };
      auto seconds = [&](const YAML::Node& v) {
        double d = s.as_double(v);
        if (!(d > 0) || d > 1e6) s.fail(v, "a number of seconds > 0");
        return std::chrono::milliseconds(std::max(1LL, std::llround(d * 1000)));
      };
      auto cooldown = [&](const YAML::Node& v) {
        if (!v.IsSequence() || v.size() != 2) s.fail(v, "a list [MIN, MAX] of seconds");
        int lo = at_least(v[0], 0), hi = at_least(v[1], 0);
        if (lo > hi) s.fail(v, "a list [MIN, MAX] with MIN <= MAX");
        e.blacklist_cooldown_range = std::make_pair(lo, hi);
      };
      auto script = [&](const YAML::Node& v) {
        std::string text = s.as_string(v);
        if (text.empty()) s.fail(v, "a script path or command");
        e.host_discovery_script = text;
      };
      Handlers handlers{
          {"min_np", [&](const YAML::Node& v) { e.min_np = at_least(v, 1); }},
          {"min_num_proc", [&](const YAML::Node& v) { e.min_np = at_least(v, 1); }},
          {"max_np", [&](const YAML::Node& v) { e.max_np = at_least(v, 1); }},
          {"max_num_proc", [&](const YAML::Node& v) { e.max_np = at_least(v, 1); }},
          {"slots_per_host", [&](const YAML::Node& v) { e.slots_per_host = at_least(v, 1); }},
          {"slots", [&](const YAML::Node& v) { e.slots_per_host = at_least(v, 1); }},
          {"host_discovery_script", script},
          {"elastic_timeout", [&](const YAML::Node& v) { e.elastic_timeout = std::chrono::seconds(at_least(v, 1)); }},
          {"reset_limit", [&](const YAML::Node& v) { e.reset_limit = at_least(v, 0); }},
          {"blacklist_cooldown_range", cooldown},
          {"cooldown_range", cooldown},
          {"discovery_interval", [&](const YAML::Node& v) { e.discovery_interval = seconds(v); }},
          {"discovery_timeout", [&](const YAML::Node& v) { e.discovery_timeout = seconds(v); }},
          {"blacklist_failures", [&](const YAML::Node& v) { e.blacklist_failures = at_least(v, 1); }},
          {"blacklist_window", [&](const YAML::Node& v) { e.blacklist_window = seconds(v); }},
      };
      // Any elastic key with a value marks the file as meant for elastic
      // mode (cli.cpp warns when no discovery script turns that mode on).
      for (auto& [name, handler] : handlers) {
        auto inner = std::move(handler);
        handler = [&out, inner](const YAML::Node& v) {
          out.elastic_given = true;
          inner(v);
        };
      }
      s.each(handlers);
    } else {
      spdlog::warn("{}:{}: unknown section '{}' (ignored)", origin, line, key);
    }
  }
  return out;
}

ConfigFileValues load_config_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InvalidArgument(fmt::format("cannot read config file '{}': {}", path, std::strerror(errno)));
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config_text(ss.str(), path);
}

ElasticSettings overlay(const ElasticSettings& preferred, const ElasticSettings& fallback) {
  ElasticSettings r = preferred;
  auto fill = [](auto& dst, const auto& src) {
    if (!dst && src) dst = src;
  };
  fill(r.min_np, fallback.min_np);
  fill(r.max_np, fallback.max_np);
  fill(r.slots_per_host, fallback.slots_per_host);
  fill(r.host_discovery_script, fallback.host_discovery_script);
  fill(r.elastic_timeout, fallback.elastic_timeout);
  fill(r.reset_limit, fallback.reset_limit);
  fill(r.blacklist_cooldown_range, fallback.blacklist_cooldown_range);
  fill(r.discovery_interval, fallback.discovery_interval);
  fill(r.discovery_timeout, fallback.discovery_timeout);
  fill(r.blacklist_failures, fallback.blacklist_failures);
  fill(r.blacklist_window, fallback.blacklist_window);
  return r;
}

void apply_elastic_settings(const ElasticSettings& s, ElasticOptions& e) {
  if (s.min_np) e.min_np = s.min_np;
  if (s.max_np) e.max_np = s.max_np;
  if (s.slots_per_host) e.slots_per_host = s.slots_per_host;
  if (s.host_discovery_script) e.host_discovery_script = s.host_discovery_script;
  if (s.elastic_timeout) e.elastic_timeout = *s.elastic_timeout;
  if (s.reset_limit) e.reset_limit = s.reset_limit;
  if (s.blacklist_cooldown_range) e.blacklist_cooldown_range = s.blacklist_cooldown_range;
  if (s.discovery_interval) e.discovery_interval = *s.discovery_interval;
  if (s.discovery_timeout) e.discovery_timeout = *s.discovery_timeout;
  if (s.blacklist_failures) e.blacklist_failures = *s.blacklist_failures;
  if (s.blacklist_window) e.blacklist_window = *s.blacklist_window;
}

void merge_config(Options& options, const ConfigFileValues& file) {
  TuningOptions& t = options.tuning;
  const TuningOptions& f = file.tuning;
  auto fill = [](auto& dst, const auto& src) {
    if (!dst && src) dst = src;
  };
  fill(t.fusion_threshold_mb, f.fusion_threshold_mb);
  fill(t.cycle_time_ms, f.cycle_time_ms);
  fill(t.cache_capacity, f.cache_capacity);
  fill(t.hierarchical_allreduce, f.hierarchical_allreduce);
  fill(t.hierarchical_allgather, f.hierarchical_allgather);
  fill(t.autotune, f.autotune);
  fill(t.autotune_log_file, f.autotune_log_file);
  fill(t.autotune_warmup_samples, f.autotune_warmup_samples);
  fill(t.autotune_steps_per_sample, f.autotune_steps_per_sample);
  fill(t.autotune_bayes_opt_max_samples, f.autotune_bayes_opt_max_samples);
  fill(t.autotune_gaussian_process_noise, f.autotune_gaussian_process_noise);
  fill(t.timeline_filename, f.timeline_filename);
  fill(t.timeline_mark_cycles, f.timeline_mark_cycles);
  fill(t.no_stall_check, f.no_stall_check);
  fill(t.stall_check_warning_time_seconds, f.stall_check_warning_time_seconds);
  fill(t.stall_check_shutdown_time_seconds, f.stall_check_shutdown_time_seconds);
  fill(t.log_level, f.log_level);
  fill(t.log_hide_timestamp, f.log_hide_timestamp);
  fill(t.num_nccl_streams, f.num_nccl_streams);
  fill(t.thread_affinity, f.thread_affinity);
  fill(t.gloo_timeout_seconds, f.gloo_timeout_seconds);
  fill(t.mpi_threads_disable, f.mpi_threads_disable);
}

}  // namespace hvd::launcher
