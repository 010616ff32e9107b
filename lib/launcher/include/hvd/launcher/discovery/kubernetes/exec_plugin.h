#pragma once
/// kubeconfig `exec` credential plugins (client.authentication.k8s.io v1
/// and v1beta1: `aws eks get-token`, `gke-gcloud-auth-plugin`, `kubelogin`,
/// ...): the plugin runs with KUBERNETES_EXEC_INFO in its environment and
/// prints an ExecCredential whose status.token hvdrun sends as the bearer
/// token, until its expirationTimestamp (or a 401) makes hvdrun run it
/// again. Plugins that return client certificates instead are refused with
/// one line. The run is bounded (its whole process group is killed after
/// the timeout) and never reads a terminal.
#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hvd::launcher::kube {

struct ExecPlugin {
  /// The command: a name searched in PATH, or a path (a relative path with
  /// '/' is relative to the kubeconfig that names it, as kubectl does).
  std::string command;
  std::vector<std::string> args;
  std::vector<std::pair<std::string, std::string>> env;  ///< added to hvdrun's environment
  std::string api_version;  ///< client.authentication.k8s.io/v1 or /v1beta1
  std::string user;  ///< the kubeconfig user, for messages
};

struct ExecCredential {
  std::string token;
  std::optional<std::chrono::system_clock::time_point> expires;
};

/// An RFC 3339 time ("2026-11-25T18:00:00Z", fractions and offsets
/// allowed); nullopt when malformed.
std::optional<std::chrono::system_clock::time_point> parse_rfc3339(const std::string& text);

/// Reads the plugin's stdout. Throws std::runtime_error with one line when
/// it is not an ExecCredential with a token.
ExecCredential parse_exec_credential(const std::string& output, const ExecPlugin& plugin);

/// Runs the plugin once (stdin /dev/null, its own process group, killed
/// with its children after `timeout`). Throws std::runtime_error with one
/// line: not found, non-zero exit (with its last stderr line), timeout,
/// bad output.
ExecCredential run_exec_plugin(const ExecPlugin& plugin, std::chrono::milliseconds timeout);

}  // namespace hvd::launcher::kube
