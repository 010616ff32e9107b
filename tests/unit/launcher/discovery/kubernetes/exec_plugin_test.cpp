// exec_plugin.h: ExecCredential parsing and real plugin runs (shell
// scripts): the token, KUBERNETES_EXEC_INFO and env, failures, timeout;
// and KubeClient's caching of the plugin's token.
#include "hvd/launcher/discovery/kubernetes/exec_plugin.h"

#include <sys/stat.h>

#include "hvd/launcher/discovery/kubernetes/kube_client.h"
#include "kube_test_util.h"

using namespace hvd::launcher::kube;
using kube_test::TempDir;

namespace {

ExecPlugin plugin(const std::string& command) {
  ExecPlugin p;
  p.command = command;
  p.api_version = "client.authentication.k8s.io/v1";
  p.user = "u";
  return p;
}

std::string script(const TempDir& dir, const std::string& name, const std::string& body) {
  const std::string path = dir.write(name, "#!/bin/sh\n" + body);
  ::chmod(path.c_str(), 0755);
  return path;
}

std::string failure_of(const ExecPlugin& p, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  try {
    run_exec_plugin(p, timeout);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("exec_plugin: RFC 3339 times", "[kubernetes]") {
  using std::chrono::system_clock;
  CHECK(parse_rfc3339("1970-01-01T00:01:00Z") == system_clock::from_time_t(60));
  CHECK(parse_rfc3339("1970-01-01T01:00:00.123456Z") == system_clock::from_time_t(3600));
  CHECK(parse_rfc3339("1970-01-01T02:00:00+01:00") == system_clock::from_time_t(3600));
  CHECK(parse_rfc3339("1970-01-01T00:00:00-00:30") == system_clock::from_time_t(1800));
  CHECK_FALSE(parse_rfc3339("tomorrow"));
  CHECK_FALSE(parse_rfc3339("1970-01-01T00:00:00"));
  CHECK_FALSE(parse_rfc3339("1970-01-01T00:00:00Zjunk"));
}

TEST_CASE("exec_plugin: ExecCredential output", "[kubernetes]") {
  const ExecPlugin p = plugin("get-token");
  auto c = parse_exec_credential(
      R"({"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","status":{"token":"abc","expirationTimestamp":"1970-01-01T00:01:00Z"}})",
      p);
  CHECK(c.token == "abc");
  REQUIRE(c.expires);
  CHECK(*c.expires == std::chrono::system_clock::from_time_t(60));
  CHECK_FALSE(parse_exec_credential(R"({"kind":"ExecCredential","status":{"token":"t"}})", p).expires);
  auto message = [&](const std::string& out) {
    try {
      parse_exec_credential(out, p);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(message("hello") ==
        "exec credential plugin 'get-token' of kubeconfig user 'u' did not print an ExecCredential: 'hello'");
  CHECK(message(R"({"kind":"ExecCredential","status":{}})").find("returned no status.token") != std::string::npos);
  CHECK(message(R"({"kind":"ExecCredential","status":{"clientCertificateData":"x","clientKeyData":"y"}})")
            .find("only takes tokens") != std::string::npos);
  CHECK(message(R"({"kind":"ExecCredential","status":{"token":"t","expirationTimestamp":"soon"}})")
            .find("malformed expirationTimestamp 'soon'") != std::string::npos);
}

TEST_CASE("exec_plugin: a real plugin run: args, env, KUBERNETES_EXEC_INFO - failures in bounded time",
          "[kubernetes]") {
  TempDir dir;
  ExecPlugin p = plugin(script(dir, "ok.sh",
                               "case \"$KUBERNETES_EXEC_INFO\" in *'\"interactive\":false'*) ;; *) exit 9;; esac\n"
                               "printf '{\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%s-%s-%s\"}}' "
                               "\"$1\" \"$2\" \"$PROFILE\"\n"));
  p.args = {"a", "b"};
  p.env = {{"PROFILE", "ml"}};
  CHECK(run_exec_plugin(p, std::chrono::seconds(10)).token == "a-b-ml");

  CHECK(failure_of(plugin(script(dir, "fail.sh", "echo 'no credentials here' >&2\nexit 3\n"))) ==
        "exec credential plugin '" + dir.path() +
            "/fail.sh' of kubeconfig user 'u' exited with code 3: no credentials "
            "here");
  CHECK(failure_of(plugin(dir.path() + "/missing")).find("was not found") != std::string::npos);
  CHECK(failure_of(plugin("hvd-no-such-plugin-anywhere")).find("was not found") != std::string::npos);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(failure_of(plugin(script(dir, "hang.sh", "sleep 30 &\nsleep 30\n")), std::chrono::milliseconds(300))
            .find("did not finish within 0.3 s and was killed") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
}

TEST_CASE("exec_plugin: KubeClient runs the plugin once, again when forced or near expiry", "[kubernetes]") {
  TempDir dir;
  const std::string count = dir.path() + "/count";
  // Prints token-N where N counts the runs; expiry from $EXPIRES.
  const std::string path =
      script(dir, "counting.sh",
             "n=$(($(cat " + count + " 2>/dev/null || echo 0) + 1)); echo $n > " + count + "\n" +
                 "printf '{\"kind\":\"ExecCredential\",\"status\":{\"token\":\"token-%s\"%s}}' $n \"$EXPIRES\"\n");
  KubeConfig c;
  c.server = parse_server_url("https://127.0.0.1:1", "t");
  c.exec = plugin(path);
  {
    KubeClient client(c);
    CHECK(client.token() == "token-1");
    CHECK(client.token() == "token-1");  // cached: no expiry given
    CHECK(client.token(true) == "token-2");  // a 401: run again
  }
  c.exec->env = {{"EXPIRES", ",\"expirationTimestamp\":\"2000-01-01T00:00:00Z\""}};  // already expired
  KubeClient expiring(c);
  CHECK(expiring.token() == "token-3");
  CHECK(expiring.token() == "token-4");
}
