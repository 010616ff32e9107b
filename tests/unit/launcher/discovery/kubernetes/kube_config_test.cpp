// kube_config.h: kubeconfig parsing and kubectl's merge, the in-cluster
// service account, and which of them hvdrun uses.
#include "hvd/launcher/discovery/kubernetes/kube_config.h"

#include "kube_test_util.h"

using namespace hvd::launcher::kube;
using kube_test::env_of;
using kube_test::invalid_message;
using kube_test::TempDir;

namespace {

const char* kPem = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";

std::string kubeconfig(const std::string& current, const std::string& clusters, const std::string& users,
                       const std::string& contexts) {
  std::string out = "apiVersion: v1\nkind: Config\n";
  if (!current.empty()) out += "current-context: " + current + "\n";
  return out + "clusters:\n" + clusters + "users:\n" + users + "contexts:\n" + contexts;
}

}  // namespace

TEST_CASE("kube_config: server URLs: host, port, IPv6, path - http:// refused", "[kubernetes]") {
  auto u = parse_server_url("https://api.example.com:6443", "t");
  CHECK(u.host == "api.example.com");
  CHECK(u.port == "6443");
  CHECK(u.base_path.empty());
  CHECK(u.text() == "https://api.example.com:6443");
  u = parse_server_url("https://10.0.0.1", "t");
  CHECK(u.port == "443");
  u = parse_server_url("https://[fd00::1]:8443/prefix/", "t");
  CHECK(u.host == "fd00::1");
  CHECK(u.port == "8443");
  CHECK(u.base_path == "/prefix");
  CHECK(u.text() == "https://[fd00::1]:8443/prefix");
  CHECK(invalid_message([] { parse_server_url("http://10.0.0.1:8080", "kc"); }).find("plain http://") !=
        std::string::npos);
  CHECK(invalid_message([] { parse_server_url("https://h:99999", "kc"); }).find("not a port number") !=
        std::string::npos);
  CHECK(invalid_message([] { parse_server_url("ftp://h", "kc"); }) == "kc: server 'ftp://h' is not an https:// URL");
}

TEST_CASE("kube_config: token, CA file relative to the kubeconfig, context namespace", "[kubernetes]") {
  TempDir dir;
  dir.write("certs/ca.crt", kPem);
  const std::string path = dir.write(
      "config", kubeconfig("dev",
                           "- name: c1\n  cluster:\n    server: https://127.0.0.1:6443\n"
                           "    certificate-authority: certs/ca.crt\n",
                           "- name: u1\n  user:\n    token: abc123\n",
                           "- name: dev\n  context:\n    cluster: c1\n    user: u1\n    namespace: team-a\n"));
  const KubeConfig c = load_kubeconfig({path});
  CHECK(c.server.host == "127.0.0.1");
  CHECK(c.server.port == "6443");
  CHECK(c.ca_pem == kPem);
  CHECK(c.ca_origin == dir.path() + "/certs/ca.crt");
  CHECK(c.token == "abc123");
  CHECK(c.token_file.empty());
  CHECK(c.namespace_name == "team-a");
  CHECK_FALSE(c.in_cluster);
  CHECK(c.origin == "kubeconfig " + path + ", context 'dev'");
}

TEST_CASE("kube_config: embedded -data fields, client certificate, tokenFile, insecure", "[kubernetes]") {
  TempDir dir;
  // base64 of "CA PEM", "CERT", "KEY"
  const std::string path = dir.write(
      "config",
      kubeconfig("x",
                 "- name: c\n  cluster:\n    server: https://k.example:443\n    certificate-authority-data: Q0EgUEVN\n",
                 "- name: u\n  user:\n    client-certificate-data: Q0VSVA==\n    client-key-data: S0VZ\n",
                 "- name: x\n  context:\n    cluster: c\n    user: u\n"));
  KubeConfig c = load_kubeconfig({path});
  CHECK(c.ca_pem == "CA PEM");
  CHECK(c.ca_origin.find("certificate-authority-data of cluster 'c'") == 0);
  CHECK(c.client_cert_pem == "CERT");
  CHECK(c.client_key_pem == "KEY");
  CHECK(c.token.empty());
  CHECK(c.namespace_name.empty());

  dir.write("tok", "t0k\n");
  const std::string p2 = dir.write(
      "config2",
      kubeconfig("x", "- name: c\n  cluster:\n    server: https://k:1\n    insecure-skip-tls-verify: true\n",
                 "- name: u\n  user:\n    tokenFile: tok\n", "- name: x\n  context:\n    cluster: c\n    user: u\n"));
  c = load_kubeconfig({p2});
  CHECK(c.insecure_skip_tls_verify);
  CHECK(c.token_file == dir.path() + "/tok");
  CHECK(c.ca_origin == "the system's default CAs");
}

TEST_CASE("kube_config: several files merge as kubectl does (first wins), missing files skipped", "[kubernetes]") {
  TempDir dir;
  const std::string a = dir.write("a", kubeconfig("ctx-b", "- name: shared\n  cluster:\n    server: https://first:1\n",
                                                  "- name: shared-user\n  user:\n    token: from-a\n", ""));
  const std::string b = dir.write(
      "b", kubeconfig("ctx-a", "- name: shared\n  cluster:\n    server: https://second:2\n",
                      "- name: shared-user\n  user:\n    token: from-b\n",
                      "- name: ctx-b\n  context:\n    cluster: shared\n    user: shared-user\n    namespace: nb\n"));
  const KubeConfig c = load_kubeconfig({dir.path() + "/missing", a, b});
  CHECK(c.server.host == "first");  // cluster 'shared' from a, the first file
  CHECK(c.token == "from-a");
  CHECK(c.namespace_name == "nb");  // context only in b
  CHECK(c.origin.find("context 'ctx-b'") != std::string::npos);  // current-context of the first file that sets it

  // KUBECONFIG's list: empty entries skipped.
  const auto files = kubeconfig_files(env_of({{"KUBECONFIG", a + "::" + b}, {"HOME", "/nonexistent"}}));
  CHECK(files.explicit_list);
  CHECK(files.paths == std::vector<std::string>{a, b});
  const auto home = kubeconfig_files(env_of({{"HOME", "/home/u"}}));
  CHECK_FALSE(home.explicit_list);
  CHECK(home.paths == std::vector<std::string>{"/home/u/.kube/config"});
}

TEST_CASE("kube_config: unsupported auth and broken references are one clear line", "[kubernetes]") {
  TempDir dir;
  const std::string cluster = "- name: c\n  cluster:\n    server: https://k:1\n";
  const std::string ctx = "- name: x\n  context:\n    cluster: c\n    user: u\n";
  auto load = [&](const std::string& users, const std::string& contexts = "") {
    const std::string p = dir.write("cfg", kubeconfig("x", cluster, users, contexts.empty() ? ctx : contexts));
    return invalid_message([&] { load_kubeconfig({p}); });
  };
  CHECK(load("- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1alpha1\n"
             "      command: aws\n")
            .find("asks for apiVersion 'client.authentication.k8s.io/v1alpha1'") != std::string::npos);
  CHECK(load("- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n"
             "      command: login\n      interactiveMode: Always\n")
            .find("needs a terminal (interactiveMode: Always)") != std::string::npos);
  CHECK(load("- name: u\n  user:\n    auth-provider:\n      name: gcp\n").find("auth-provider 'gcp'") !=
        std::string::npos);
  CHECK(load("- name: u\n  user:\n    username: a\n    password: b\n").find("basic auth") != std::string::npos);
  CHECK(load("- name: u\n  user:\n    client-certificate-data: Q0VSVA==\n").find("without a key") != std::string::npos);
  CHECK(load("- name: other\n  user:\n    token: t\n").find("user 'u' is not defined") != std::string::npos);
  CHECK(load("- name: u\n  user:\n    token: t\n", "- name: y\n  context:\n    cluster: c\n")
            .find("current-context 'x' is not defined") != std::string::npos);
  CHECK(invalid_message([&] { load_kubeconfig({dir.path() + "/nope"}); }) ==
        "no kubeconfig: " + dir.path() + "/nope does not exist");
}

TEST_CASE("kube_config: in a pod, the service account (token file, CA, namespace)", "[kubernetes]") {
  TempDir dir;
  dir.write("sa/token", "sa-token\n");
  dir.write("sa/ca.crt", kPem);
  dir.write("sa/namespace", "jobs\n");
  const std::string sa = dir.path() + "/sa";
  auto env = env_of(
      {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"}, {"KUBERNETES_SERVICE_PORT", "443"}, {kServiceAccountDirVariable, sa}});
  const auto c = load_in_cluster(env);
  REQUIRE(c);
  CHECK(c->in_cluster);
  CHECK(c->server.text() == "https://10.96.0.1:443");
  CHECK(c->token_file == sa + "/token");
  CHECK(c->token.empty());  // read per request, so a rotated token is used
  CHECK(c->ca_pem == kPem);
  CHECK(c->ca_origin == sa + "/ca.crt");
  CHECK(c->namespace_name == "jobs");
  // IPv6 service address.
  const auto v6 = load_in_cluster(env_of(
      {{"KUBERNETES_SERVICE_HOST", "fd00::1"}, {"KUBERNETES_SERVICE_PORT", "6443"}, {kServiceAccountDirVariable, sa}}));
  REQUIRE(v6);
  CHECK(v6->server.text() == "https://[fd00::1]:6443");
  // Not in a pod: no variables, or no token.
  CHECK_FALSE(load_in_cluster(env_of({{kServiceAccountDirVariable, sa}})));
  CHECK_FALSE(load_in_cluster(env_of({{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                                      {"KUBERNETES_SERVICE_PORT", "443"},
                                      {kServiceAccountDirVariable, dir.path() + "/none"}})));
  // A token without ca.crt cannot be used safely.
  dir.write("sa2/token", "t");
  CHECK(invalid_message([&] {
          load_in_cluster(env_of({{"KUBERNETES_SERVICE_HOST", "h"},
                                  {"KUBERNETES_SERVICE_PORT", "1"},
                                  {kServiceAccountDirVariable, dir.path() + "/sa2"}}));
        }).find("no ca.crt") != std::string::npos);
}

TEST_CASE("kube_config: $KUBECONFIG, then the pod's service account, then ~/.kube/config", "[kubernetes]") {
  TempDir dir;
  dir.write("sa/token", "sa-token");
  dir.write("sa/ca.crt", kPem);
  const std::string cfg = "- name: c\n  cluster:\n    server: https://from-file:1\n";
  const std::string users = "- name: u\n  user:\n    token: t\n";
  const std::string ctx = "- name: x\n  context:\n    cluster: c\n    user: u\n";
  const std::string explicit_file = dir.write("explicit", kubeconfig("x", cfg, users, ctx));
  dir.write("home/.kube/config",
            kubeconfig("x", "- name: c\n  cluster:\n    server: https://from-home:1\n", users, ctx));
  std::map<std::string, std::string> pod = {{"KUBERNETES_SERVICE_HOST", "10.96.0.1"},
                                            {"KUBERNETES_SERVICE_PORT", "443"},
                                            {kServiceAccountDirVariable, dir.path() + "/sa"},
                                            {"HOME", dir.path() + "/home"}};
  CHECK(resolve_kube_config(env_of(pod)).in_cluster);
  auto with_kubeconfig = pod;
  with_kubeconfig["KUBECONFIG"] = explicit_file;
  CHECK(resolve_kube_config(env_of(with_kubeconfig)).server.host == "from-file");
  auto outside = pod;
  outside.erase("KUBERNETES_SERVICE_HOST");
  CHECK(resolve_kube_config(env_of(outside)).server.host == "from-home");
  outside["HOME"] = dir.path() + "/nohome";
  const std::string none = invalid_message([&] { resolve_kube_config(env_of(outside)); });
  CHECK(none.find("no Kubernetes credentials: not in a pod") == 0);
  CHECK(none.find(dir.path() + "/nohome/.kube/config missing") != std::string::npos);
}

TEST_CASE("kube_config: exec credential plugins: command (relative to the file), args, env", "[kubernetes]") {
  TempDir dir;
  const std::string path =
      dir.write("kube/config",
                kubeconfig("x", "- name: c\n  cluster:\n    server: https://k:1\n",
                           "- name: eks\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1beta1\n"
                           "      command: bin/get-token\n      args: [\"--cluster\", \"prod\"]\n"
                           "      env:\n      - name: AWS_PROFILE\n        value: ml\n      interactiveMode: Never\n",
                           "- name: x\n  context:\n    cluster: c\n    user: eks\n"));
  const KubeConfig c = load_kubeconfig({path});
  REQUIRE(c.exec);
  CHECK(c.exec->command == dir.path() + "/kube/bin/get-token");
  CHECK(c.exec->args == std::vector<std::string>{"--cluster", "prod"});
  CHECK(c.exec->env == std::vector<std::pair<std::string, std::string>>{{"AWS_PROFILE", "ml"}});
  CHECK(c.exec->api_version == "client.authentication.k8s.io/v1beta1");
  CHECK(c.exec->user == "eks");
  CHECK(c.token.empty());
  // A bare name stays a PATH lookup.
  const std::string p2 = dir.write(
      "config2", kubeconfig("x", "- name: c\n  cluster:\n    server: https://k:1\n",
                            "- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n"
                            "      command: gke-gcloud-auth-plugin\n",
                            "- name: x\n  context:\n    cluster: c\n    user: u\n"));
  CHECK(load_kubeconfig({p2}).exec->command == "gke-gcloud-auth-plugin");
}

TEST_CASE("kube_config: tls-server-name is kept, proxy-url and impersonation are named as ignored", "[kubernetes]") {
  TempDir dir;
  const std::string path =
      dir.write("config", kubeconfig("x",
                                     "- name: c\n  cluster:\n    server: https://10.0.0.1:6443\n"
                                     "    tls-server-name: api.internal\n    proxy-url: http://proxy:3128\n",
                                     "- name: u\n  user:\n    token: t\n    as: admin\n",
                                     "- name: x\n  context:\n    cluster: c\n    user: u\n"));
  const KubeConfig c = load_kubeconfig({path});
  CHECK(c.tls_server_name == "api.internal");
  REQUIRE(c.ignored.size() == 2);
  CHECK(c.ignored[0].find("proxy-url 'http://proxy:3128' of cluster 'c' ignored") != std::string::npos);
  CHECK(c.ignored[1].find("as of user 'u' ignored: hvdrun does not impersonate") != std::string::npos);
}
