#pragma once
/// Where the Kubernetes API server is and how to authenticate to it
/// (docs/kubernetes.md, "Built-in pod discovery"): the in-cluster service
/// account of a pod, or the current context of a kubeconfig, merged from
/// $KUBECONFIG's files as kubectl merges them. Pure apart from reading the
/// files it names; every problem is an hvd::InvalidArgument with one line.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hvd/launcher/discovery/kubernetes/exec_plugin.h"
#include "hvd/launcher/process/environment.h"

namespace hvd::launcher::kube {

/// The service-account mount of every pod; HVDRUN_KUBERNETES_SERVICEACCOUNT_DIR
/// overrides it (tests, unusual mounts).
inline constexpr const char* kServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount";
inline constexpr const char* kServiceAccountDirVariable = "HVDRUN_KUBERNETES_SERVICEACCOUNT_DIR";

/// The API server's address: https://HOST:PORT[/PATH].
struct ServerUrl {
  std::string host;  ///< a name or an IP address (IPv6 without brackets)
  std::string port = "443";
  std::string base_path;  ///< "" or "/prefix" (no trailing slash)
  /// "https://host:port/prefix", IPv6 in brackets.
  std::string text() const;
};

/// Parses `https://host[:port][/path]`. Throws InvalidArgument for another
/// scheme (http:// is refused: credentials would travel in clear) or a
/// malformed address; `origin` prefixes the message.
ServerUrl parse_server_url(const std::string& url, const std::string& origin);

/// Everything a client needs to talk to the API server.
struct KubeConfig {
  ServerUrl server;
  /// Trusted CA certificates (PEM); empty: the system's default CAs.
  std::string ca_pem;
  /// Where ca_pem came from, for certificate failures ("/path/ca.crt",
  /// "certificate-authority-data of cluster 'c' in /home/u/.kube/config",
  /// "the system's default CAs").
  std::string ca_origin;
  /// insecure-skip-tls-verify: no verification at all (hvdrun warns).
  bool insecure_skip_tls_verify = false;
  /// tls-server-name: the name the certificate must carry (and SNI) instead
  /// of the server's host.
  std::string tls_server_name;
  /// Settings of the kubeconfig hvdrun does not apply (proxy-url,
  /// impersonation), one line each; the caller logs them as warnings.
  std::vector<std::string> ignored;
  /// A fixed bearer token (kubeconfig `token`), or the file to read it from
  /// (`tokenFile`, the service account's token): re-read when it changes.
  std::string token;
  std::string token_file;
  /// A kubeconfig `exec` credential plugin giving the token (exec_plugin.h).
  std::optional<ExecPlugin> exec;
  /// Client certificate and key (PEM), kubeconfig client-certificate(-data)
  /// and client-key(-data).
  std::string client_cert_pem;
  std::string client_key_pem;
  /// The namespace the credentials imply: the service account's, or the
  /// context's; empty when neither says (then "default").
  std::string namespace_name;
  /// How messages name the credentials: "the in-cluster service account
  /// (/var/run/secrets/kubernetes.io/serviceaccount)", "kubeconfig
  /// /home/u/.kube/config, context 'prod'".
  std::string origin;
  bool in_cluster = false;
};

/// The in-cluster configuration when this process runs in a pod:
/// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT set and the service
/// account's token present. nullopt when not in a pod; throws when the
/// mount is incomplete (no ca.crt).
std::optional<KubeConfig> load_in_cluster(const Environment& env);

/// The kubeconfig files to read: $KUBECONFIG (':'-separated, empty entries
/// skipped), else ~/.kube/config. `explicit_list` tells whether $KUBECONFIG
/// named them.
struct KubeconfigFiles {
  std::vector<std::string> paths;
  bool explicit_list = false;
};
KubeconfigFiles kubeconfig_files(const Environment& env);

/// The current context of the merged files (kubectl's rules: the first file
/// that sets current-context wins, and of clusters, users and contexts of
/// the same name the first one wins; files that do not exist are skipped,
/// relative paths in a file are relative to that file). Throws for a
/// missing context, cluster or user, for auth this build does not support
/// (auth-provider, username/password, interactive exec plugins), and when no
/// file exists.
KubeConfig load_kubeconfig(const std::vector<std::string>& paths);

/// What hvdrun uses: $KUBECONFIG when set, else the in-cluster service
/// account in a pod, else ~/.kube/config. Throws InvalidArgument with one
/// line naming what was looked at when there is nothing to use.
KubeConfig resolve_kube_config(const Environment& env);

}  // namespace hvd::launcher::kube
