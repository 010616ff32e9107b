#pragma once
/// The one seam through which the launcher reads the machine it runs on:
/// the environment variables, the file-system root and the host name. Host
/// sources (the platform detectors, the Kubernetes configuration) read only
/// an Environment, so unit tests pass a map and a fixture directory instead
/// of needing a real platform; hvdrun passes Environment::current().
#include <map>
#include <optional>
#include <string>
#include <utility>

namespace hvd::launcher {

using EnvMap = std::map<std::string, std::string>;

/// The calling process's environment (`environ`) as a map.
EnvMap current_environment();

struct Environment {
  Environment() = default;
  Environment(std::string root_dir, EnvMap variables, std::optional<std::string> host = std::nullopt)
      : root(std::move(root_dir)), env(std::move(variables)), hostname(std::move(host)) {}

  /// Prepended to every absolute path a reader opens through path() (""
  /// on a real machine; a test's fixture directory in tests).
  std::string root;
  /// The environment variables.
  EnvMap env;
  /// This machine's host name for platforms that name hosts but not this
  /// one (LSF); nullopt: host_name() decides (unit tests set it).
  std::optional<std::string> hostname;

  /// The real machine: root "" and the process environment.
  static Environment current();
  /// `hostname`, else HVDRUN_HOSTNAME in `env`, else gethostname().
  std::string host_name() const;
  /// The variable's value, nullopt when unset.
  std::optional<std::string> get(const std::string& name) const;
  /// root + path.
  std::string path(const std::string& absolute) const;
};

}  // namespace hvd::launcher
