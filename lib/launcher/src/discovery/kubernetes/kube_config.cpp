// Where the API server is and how to authenticate (kube_config.h).
#include "hvd/launcher/discovery/kubernetes/kube_config.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "hvd/common/error.h"
#include "hvd/common/text.h"

namespace hvd::launcher::kube {

namespace {

bool file_exists(const std::string& path) {
  std::ifstream in(path);
  return in.good();
}

std::string read_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InvalidArgument(fmt::format("cannot read {} '{}'", what, path));
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string dirname_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

/// A path from a kubeconfig: relative ones are relative to that file.
std::string resolve_path(const std::string& path, const std::string& file) {
  if (path.empty() || path.front() == '/') return path;
  if (path.rfind("~/", 0) == 0) {
    if (const char* home = std::getenv("HOME")) return std::string(home) + path.substr(1);
  }
  return std::filesystem::path(dirname_of(file) + "/" + path).lexically_normal().string();
}

std::string base64_decode(const std::string& text, const std::string& what) {
  std::optional<std::string> out = hvd::base64_decode(text);
  if (!out) throw InvalidArgument(fmt::format("{} is not valid base64", what));
  return *out;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::string scalar(const YAML::Node& node, const char* key) {
  const YAML::Node v = node[key];
  if (!v || v.IsNull() || !v.IsScalar()) return "";
  return v.Scalar();
}

bool truthy(const YAML::Node& node, const char* key) {
  const YAML::Node v = node[key];
  if (!v || !v.IsScalar()) return false;
  try {
    return v.as<bool>();
  } catch (const YAML::Exception&) {
    return false;
  }
}

/// One named entry (cluster, user or context) and the file it came from.
struct Named {
  YAML::Node body;
  std::string file;
};

}  // namespace

std::string ServerUrl::text() const {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return "https://" + h + ":" + port + base_path;
}

ServerUrl parse_server_url(const std::string& url, const std::string& origin) {
  ServerUrl out;
  const std::string scheme = "https://";
  if (url.rfind(scheme, 0) != 0) {
    if (url.rfind("http://", 0) == 0) {
      throw InvalidArgument(
          fmt::format("{}: server '{}' is plain http://; hvdrun only talks to the API server over "
                      "https:// (credentials would travel in clear)",
                      origin, url));
    }
    throw InvalidArgument(fmt::format("{}: server '{}' is not an https:// URL", origin, url));
  }
  std::string rest = url.substr(scheme.size());
  const size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    out.base_path = rest.substr(slash);
    while (!out.base_path.empty() && out.base_path.back() == '/') out.base_path.pop_back();
    rest = rest.substr(0, slash);
  }
  std::string port;
  if (!rest.empty() && rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string::npos) throw InvalidArgument(fmt::format("{}: server '{}': unclosed '['", origin, url));
    out.host = rest.substr(1, close - 1);
    if (close + 1 < rest.size()) {
      if (rest[close + 1] != ':') throw InvalidArgument(fmt::format("{}: server '{}': bad address", origin, url));
      port = rest.substr(close + 2);
    }
  } else {
    const size_t colon = rest.rfind(':');
    out.host = rest.substr(0, colon);
    if (colon != std::string::npos) port = rest.substr(colon + 1);
  }
  if (out.host.empty()) throw InvalidArgument(fmt::format("{}: server '{}' has no host", origin, url));
  if (!port.empty()) {
    const bool digits = port.find_first_not_of("0123456789") == std::string::npos && port.size() <= 5;
    if (!digits || std::stoi(port) < 1 || std::stoi(port) > 65535) {
      throw InvalidArgument(fmt::format("{}: server '{}': '{}' is not a port number", origin, url, port));
    }
    out.port = port;
  }
  return out;
}

std::optional<KubeConfig> load_in_cluster(const Environment& env) {
  const auto host = env.get("KUBERNETES_SERVICE_HOST");
  const auto port = env.get("KUBERNETES_SERVICE_PORT");
  if (!host || host->empty() || !port || port->empty()) return std::nullopt;
  const std::string dir = env.get(kServiceAccountDirVariable).value_or(kServiceAccountDir);
  const std::string token_file = dir + "/token";
  if (!file_exists(token_file)) return std::nullopt;
  KubeConfig c;
  c.in_cluster = true;
  c.origin = fmt::format("the in-cluster service account ({})", dir);
  const std::string h = host->find(':') != std::string::npos ? "[" + *host + "]" : *host;
  c.server = parse_server_url("https://" + h + ":" + *port, "KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT");
  c.token_file = token_file;
  const std::string ca = dir + "/ca.crt";
  if (!file_exists(ca)) {
    throw InvalidArgument(fmt::format("{}: no ca.crt beside the token: cannot verify the API server", c.origin));
  }
  c.ca_pem = read_file(ca, "the service account's CA");
  c.ca_origin = ca;
  if (file_exists(dir + "/namespace")) c.namespace_name = trim(read_file(dir + "/namespace", "namespace file"));
  return c;
}

KubeconfigFiles kubeconfig_files(const Environment& env) {
  KubeconfigFiles out;
  if (const auto list = env.get("KUBECONFIG"); list && !list->empty()) {
    out.explicit_list = true;
    std::stringstream ss(*list);
    for (std::string item; std::getline(ss, item, ':');) {
      if (!item.empty()) out.paths.push_back(item);
    }
    return out;
  }
  if (const auto home = env.get("HOME"); home && !home->empty()) out.paths.push_back(*home + "/.kube/config");
  return out;
}

KubeConfig load_kubeconfig(const std::vector<std::string>& paths) {
  std::string current_context;
  std::string current_file;
  std::map<std::string, Named> clusters, users, contexts;
  std::vector<std::string> read;
  for (const auto& path : paths) {
    if (!file_exists(path)) continue;  // kubectl skips missing files of the list
    YAML::Node root;
    try {
      root = YAML::LoadFile(path);
    } catch (const YAML::Exception& e) {
      throw InvalidArgument(fmt::format("kubeconfig {}:{}: {}", path, e.mark.line + 1, e.msg));
    }
    read.push_back(path);
    if (!root.IsMap()) continue;
    if (current_context.empty()) {
      current_context = scalar(root, "current-context");
      if (!current_context.empty()) current_file = path;
    }
    auto collect = [&](const char* list, const char* field, std::map<std::string, Named>& into) {
      const YAML::Node items = root[list];
      if (!items || !items.IsSequence()) return;
      for (const auto& item : items) {
        const std::string name = scalar(item, "name");
        if (name.empty() || into.count(name)) continue;  // first one wins
        into[name] = Named{item[field], path};
      }
    };
    collect("clusters", "cluster", clusters);
    collect("users", "user", users);
    collect("contexts", "context", contexts);
  }
  std::string files;
  for (const auto& p : paths) files += (files.empty() ? "" : ":") + p;
  if (read.empty()) throw InvalidArgument(fmt::format("no kubeconfig: {} does not exist", files));
  if (current_context.empty()) throw InvalidArgument(fmt::format("kubeconfig {}: no current-context set", files));
  const auto ctx = contexts.find(current_context);
  if (ctx == contexts.end()) {
    throw InvalidArgument(fmt::format("kubeconfig {}: current-context '{}' is not defined", files, current_context));
  }
  const std::string cluster_name = scalar(ctx->second.body, "cluster");
  const std::string user_name = scalar(ctx->second.body, "user");
  KubeConfig c;
  c.origin = fmt::format("kubeconfig {}, context '{}'", read.size() == 1 ? read.front() : files, current_context);
  c.namespace_name = scalar(ctx->second.body, "namespace");
  const auto cl = clusters.find(cluster_name);
  if (cl == clusters.end()) {
    throw InvalidArgument(fmt::format("{}: cluster '{}' is not defined", c.origin, cluster_name));
  }
  const YAML::Node cluster = cl->second.body;
  const std::string server = cluster ? scalar(cluster, "server") : "";
  if (server.empty()) throw InvalidArgument(fmt::format("{}: cluster '{}' has no server", c.origin, cluster_name));
  c.server = parse_server_url(server, c.origin);
  c.insecure_skip_tls_verify = cluster && truthy(cluster, "insecure-skip-tls-verify");
  c.tls_server_name = scalar(cluster, "tls-server-name");
  if (const std::string proxy = scalar(cluster, "proxy-url"); !proxy.empty()) {
    c.ignored.push_back(fmt::format("{}: proxy-url '{}' of cluster '{}' ignored: hvdrun connects to the API server "
                                    "directly",
                                    c.origin, proxy, cluster_name));
  }
  if (const std::string data = scalar(cluster, "certificate-authority-data"); !data.empty()) {
    c.ca_origin = fmt::format("certificate-authority-data of cluster '{}' in {}", cluster_name, cl->second.file);
    c.ca_pem = base64_decode(data, c.ca_origin);
  } else if (const std::string file = scalar(cluster, "certificate-authority"); !file.empty()) {
    c.ca_origin = resolve_path(file, cl->second.file);
    c.ca_pem = read_file(c.ca_origin, fmt::format("certificate-authority of cluster '{}'", cluster_name));
  } else {
    c.ca_origin = "the system's default CAs";
  }
  const auto us = users.find(user_name);
  if (!user_name.empty() && us == users.end()) {
    throw InvalidArgument(fmt::format("{}: user '{}' is not defined", c.origin, user_name));
  }
  if (us != users.end() && us->second.body && us->second.body.IsMap()) {
    const YAML::Node user = us->second.body;
    const std::string& file = us->second.file;
    if (user["exec"] && !user["exec"].IsNull()) {
      const YAML::Node exec = user["exec"];
      ExecPlugin plugin;
      plugin.user = user_name;
      plugin.command = scalar(exec, "command");
      plugin.api_version = scalar(exec, "apiVersion");
      if (plugin.command.empty()) {
        throw InvalidArgument(fmt::format("{}: the exec plugin of user '{}' has no command", c.origin, user_name));
      }
      if (plugin.api_version != "client.authentication.k8s.io/v1" &&
          plugin.api_version != "client.authentication.k8s.io/v1beta1") {
        throw InvalidArgument(
            fmt::format("{}: the exec plugin '{}' of user '{}' asks for apiVersion '{}'; hvdrun speaks "
                        "client.authentication.k8s.io/v1 and v1beta1",
                        c.origin, plugin.command, user_name, plugin.api_version));
      }
      if (scalar(exec, "interactiveMode") == "Always") {
        throw InvalidArgument(
            fmt::format("{}: the exec plugin '{}' of user '{}' needs a terminal (interactiveMode: Always), which "
                        "hvdrun never gives it",
                        c.origin, plugin.command, user_name));
      }
      if (plugin.command.find('/') != std::string::npos) plugin.command = resolve_path(plugin.command, file);
      if (exec["args"] && exec["args"].IsSequence()) {
        for (const auto& a : exec["args"]) plugin.args.push_back(a.IsScalar() ? a.Scalar() : "");
      }
      if (exec["env"] && exec["env"].IsSequence()) {
        for (const auto& e : exec["env"]) plugin.env.emplace_back(scalar(e, "name"), scalar(e, "value"));
      }
      c.exec = std::move(plugin);
    }
    if (user["auth-provider"] && !user["auth-provider"].IsNull()) {
      throw InvalidArgument(fmt::format(
          "{}: user '{}' uses auth-provider '{}', which hvdrun does not support; use a token, tokenFile or client "
          "certificate for pod discovery",
          c.origin, user_name, scalar(user["auth-provider"], "name")));
    }
    if (!scalar(user, "username").empty() || !scalar(user, "password").empty()) {
      throw InvalidArgument(fmt::format(
          "{}: user '{}' uses a username and password (basic auth, removed from Kubernetes), which hvdrun does not "
          "support; use a token or client certificate",
          c.origin, user_name));
    }
    for (const char* key : {"as", "as-uid", "as-groups", "as-user-extra"}) {
      if (user[key] && !user[key].IsNull()) {
        c.ignored.push_back(fmt::format("{}: {} of user '{}' ignored: hvdrun does not impersonate", c.origin, key,
                                        user_name));
      }
    }
    c.token = trim(scalar(user, "token"));
    if (c.token.empty()) c.token_file = resolve_path(scalar(user, "tokenFile"), file);
    if (const std::string data = scalar(user, "client-certificate-data"); !data.empty()) {
      c.client_cert_pem = base64_decode(data, fmt::format("client-certificate-data of user '{}'", user_name));
    } else if (const std::string cert = scalar(user, "client-certificate"); !cert.empty()) {
      c.client_cert_pem = read_file(resolve_path(cert, file), "client-certificate");
    }
    if (const std::string data = scalar(user, "client-key-data"); !data.empty()) {
      c.client_key_pem = base64_decode(data, fmt::format("client-key-data of user '{}'", user_name));
    } else if (const std::string key = scalar(user, "client-key"); !key.empty()) {
      c.client_key_pem = read_file(resolve_path(key, file), "client-key");
    }
    if (c.client_cert_pem.empty() != c.client_key_pem.empty()) {
      throw InvalidArgument(fmt::format(
          "{}: user '{}' has a client certificate without a key or a key without a certificate", c.origin, user_name));
    }
    if (!c.token_file.empty() && !file_exists(c.token_file)) {
      throw InvalidArgument(
          fmt::format("{}: tokenFile '{}' of user '{}' does not exist", c.origin, c.token_file, user_name));
    }
  }
  return c;
}

KubeConfig resolve_kube_config(const Environment& env) {
  const KubeconfigFiles files = kubeconfig_files(env);
  if (files.explicit_list) return load_kubeconfig(files.paths);
  if (auto in_cluster = load_in_cluster(env)) return *in_cluster;
  bool any = false;
  for (const auto& p : files.paths) any = any || file_exists(p);
  if (!any) {
    const std::string dir = env.get(kServiceAccountDirVariable).value_or(kServiceAccountDir);
    throw InvalidArgument(fmt::format(
        "no Kubernetes credentials: not in a pod (KUBERNETES_SERVICE_HOST {}, {}/token {}), KUBECONFIG unset and "
        "{} missing",
        env.get("KUBERNETES_SERVICE_HOST") ? "set" : "unset", dir, file_exists(dir + "/token") ? "present" : "absent",
        files.paths.empty() ? std::string("~/.kube/config") : files.paths.front()));
  }
  return load_kubeconfig(files.paths);
}

}  // namespace hvd::launcher::kube
