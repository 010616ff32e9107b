// kube_client.h: the pods URL, the watch stream's framing, backoff, the
// wording of API errors, the token file, and the client's failures against
// real sockets on loopback.
#include "hvd/launcher/discovery/kubernetes/kube_client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "kube_test_util.h"

using namespace hvd::launcher::kube;
using kube_test::TempDir;

TEST_CASE("kube_client: label selectors are percent-encoded in the pods URL", "[kubernetes]") {
  CHECK(url_encode("app=hvd") == "app%3Dhvd");
  CHECK(url_encode("app in (a,b),!canary") == "app%20in%20%28a%2Cb%29%2C%21canary");
  CHECK(url_encode("hvdrun.io/role-x_y~") == "hvdrun.io%2Frole-x_y~");
  CHECK(pods_target("", "team-a", "app=hvd") == "/api/v1/namespaces/team-a/pods?labelSelector=app%3Dhvd");
  CHECK(pods_target("/k8s", "ns", "a!=b", std::string("1234"), 300) ==
        "/k8s/api/v1/namespaces/ns/pods?labelSelector=a%21%3Db&watch=1&allowWatchBookmarks=true"
        "&resourceVersion=1234&timeoutSeconds=300");
  CHECK(pods_target("", "ns", "", std::string(""), 0) == "/api/v1/namespaces/ns/pods?watch=1&allowWatchBookmarks=true");
}

TEST_CASE("kube_client: watch events split across arbitrary pieces", "[kubernetes]") {
  const std::string stream = R"({"type":"ADDED","object":{"metadata":{"name":"a","resourceVersion":"5"}}})"
                             "\n"
                             R"({"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"9"}}})"
                             "\r\n\n"
                             R"({"type":"DELETED","object":{"metadata":{"name":"a"}}})"
                             "\n";
  for (size_t piece : {size_t(1), size_t(7), size_t(64), stream.size()}) {
    WatchStreamParser parser;
    std::vector<WatchEvent> events;
    for (size_t at = 0; at < stream.size(); at += piece) {
      REQUIRE(parser.feed(stream.data() + at, std::min(piece, stream.size() - at),
                          [&](WatchEvent e) { events.push_back(std::move(e)); }));
    }
    INFO("piece " << piece);
    REQUIRE(events.size() == 3);
    CHECK(events[0].type == "ADDED");
    CHECK(events[0].object["metadata"]["name"] == "a");
    CHECK(events[1].type == "BOOKMARK");
    CHECK(events[1].object["metadata"]["resourceVersion"] == "9");
    CHECK(events[2].type == "DELETED");
    CHECK(parser.buffered() == 0);
  }
  // A partial line waits; a line that is not an event is an error.
  WatchStreamParser parser;
  int n = 0;
  CHECK(parser.feed(R"({"type":"ADD)", 12, [&](WatchEvent) { ++n; }));
  CHECK(n == 0);
  CHECK(parser.buffered() == 12);
  const std::string bad = "ED\",\"object\":{}}\nnot json\n";
  CHECK_FALSE(parser.feed(bad.data(), bad.size(), [&](WatchEvent) { ++n; }));
  CHECK(n == 1);
  CHECK(parser.error() == "a watch event that is not JSON {type, object}: 'not json'");
  // The server's bytes are escaped and cut (issue 29).
  WatchStreamParser hostile;
  const std::string garbage = std::string("\x1b[31mred\x07\x00'\\", 12) + std::string(200, 'x') + "\n";
  CHECK_FALSE(hostile.feed(garbage.data(), garbage.size(), [&](WatchEvent) { ++n; }));
  CHECK(hostile.error() == "a watch event that is not JSON {type, object}: '\\x1b[31mred\\x07\\x00\\'\\\\" +
                               std::string(108, 'x') + "... (212 bytes)'");
}

TEST_CASE("kube_client: server text is escaped and cut for the log", "[kubernetes]") {
  CHECK(quote_server_text("plain text") == "'plain text'");
  CHECK(quote_server_text("it's") == "'it\\'s'");
  CHECK(escape_server_text("it's") == "it's");
  CHECK(escape_server_text("a\nb\tc\xff\x7f") == "a\\nb\\tc\\xff\\x7f");
  CHECK(escape_server_text(std::string(300, 'y'), 200) == std::string(200, 'y') + "... (300 bytes)");
  CHECK(quote_server_text(std::string(121, 'z')) == "'" + std::string(120, 'z') + "... (121 bytes)'");
  CHECK(quote_server_text(std::string(120, 'z')) == "'" + std::string(120, 'z') + "'");
  // An API error's message and reason too.
  const std::string line = describe_http_failure(500, R"({"reason":"\u001b[2Jboom","message":"etcd\u0007 down\nnow"})",
                                                 "list", "x", "https://k:1");
  CHECK(line ==
        "the Kubernetes API server at https://k:1 answered 500 \\x1b[2Jboom to list pods in namespace 'x': "
        "etcd\\x07 down\\nnow");
  const std::string huge = describe_http_failure(502, std::string(5000, 'h'), "watch", "x", "s");
  CHECK(huge.size() < 400);
  CHECK(huge.find("... (5000 bytes)") != std::string::npos);
}

TEST_CASE("kube_client: backoff doubles up to its bound and resets", "[kubernetes]") {
  using ms = std::chrono::milliseconds;
  Backoff b(ms(100), ms(1000));
  CHECK(b.next() == ms(100));
  CHECK(b.next() == ms(200));
  CHECK(b.next() == ms(400));
  CHECK(b.next() == ms(800));
  CHECK(b.next() == ms(1000));
  for (int i = 0; i < 100; ++i) CHECK(b.next() == ms(1000));
  b.reset();
  CHECK(b.next() == ms(100));
}

TEST_CASE("kube_client: API errors are one line - 403 names the verb and the service account", "[kubernetes]") {
  const std::string forbidden =
      R"({"kind":"Status","code":403,"reason":"Forbidden","message":"pods is forbidden: User \"system:serviceaccount:jobs:hvdrun\" cannot watch resource \"pods\" in API group \"\" in the namespace \"jobs\""})";
  CHECK(describe_http_failure(403, forbidden, "watch", "jobs", "https://k:1") ==
        "the service account 'hvdrun' (namespace 'jobs') may not 'watch' pods in namespace 'jobs' (403 Forbidden): "
        "add the verb to its Role (pod discovery needs list and watch on pods)");
  CHECK(describe_http_failure(403, R"({"message":"User \"alice\" cannot list"})", "list", "x", "s")
            .find("user 'alice' may not 'list' pods in namespace 'x'") == 0);
  CHECK(describe_http_failure(403, "", "list", "x", "s").find("these credentials may not 'list'") == 0);
  CHECK(describe_http_failure(401, "{}", "list", "x", "https://k:1")
            .find("the Kubernetes API server at https://k:1 refused the credentials (401 Unauthorized)") == 0);
  CHECK(describe_http_failure(500, R"({"reason":"InternalError","message":"etcd down"})", "list", "x", "https://k:1") ==
        "the Kubernetes API server at https://k:1 answered 500 InternalError to list pods in namespace 'x': etcd down");
  const std::string line = describe_http_failure(502, "<html>\nbad gateway\n</html>\n", "watch", "x", "s");
  CHECK(line.find("502") != std::string::npos);
}

TEST_CASE("kube_client: the token file is re-read when it changes, and on demand", "[kubernetes]") {
  TempDir dir;
  const std::string token = dir.write("token", "first\n");
  KubeConfig c;
  c.server = parse_server_url("https://127.0.0.1:1", "t");
  c.token_file = token;
  KubeClient client(c);
  CHECK(client.token() == "first");
  dir.write("token", "second-longer\n");  // a new size: the stamp changes even within one mtime tick
  CHECK(client.token() == "second-longer");
  // A rotation through a symlink swap, as kubelet does (..data -> new dir).
  dir.write("v2/token", "third\n");
  std::remove(token.c_str());
  REQUIRE(symlink((dir.path() + "/v2/token").c_str(), token.c_str()) == 0);
  CHECK(client.token() == "third");
  CHECK(client.token(true) == "third");
  KubeConfig fixed = c;
  fixed.token = "static";
  CHECK(KubeClient(fixed).token() == "static");
}

namespace {

/// A listening TCP socket on 127.0.0.1 (port chosen by the kernel).
struct Listener {
  int fd = -1;
  int port = 0;
  Listener() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 4) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    port = ntohs(a.sin_port);
  }
  ~Listener() { ::close(fd); }
};

KubeConfig local(int port) {
  KubeConfig c;
  c.server = parse_server_url("https://127.0.0.1:" + std::to_string(port), "t");
  c.token = "t";
  c.ca_origin = "the system's default CAs";
  return c;
}

std::string failure_of(KubeClient& client, std::chrono::milliseconds timeout) {
  try {
    client.get("/api/v1/namespaces/default/pods", timeout, std::size_t(1) << 20);
  } catch (const KubeError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("kube_client: a refused connection, a silent server and stop() fail in bounded time", "[kubernetes]") {
  int closed_port = 0;
  {
    Listener l;
    closed_port = l.port;
  }
  KubeClient refused(local(closed_port));
  CHECK(failure_of(refused, std::chrono::seconds(2)) ==
        "cannot connect to the Kubernetes API server at https://127.0.0.1:" + std::to_string(closed_port) +
            ": Connection refused");

  Listener silent;  // accepts (backlog) but never answers the TLS handshake
  KubeClient slow(local(silent.port));
  const auto t0 = std::chrono::steady_clock::now();
  const std::string timed_out = failure_of(slow, std::chrono::milliseconds(300));
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(timed_out == "the Kubernetes API server at https://127.0.0.1:" + std::to_string(silent.port) +
                         " did not complete the request within 300 ms (--discovery-timeout): it stalled during the TLS "
                         "handshake");
  CHECK(took < std::chrono::seconds(2));

  KubeClient stopped(local(silent.port));
  std::thread stopper([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    stopped.stop();
  });
  const auto t1 = std::chrono::steady_clock::now();
  CHECK(failure_of(stopped, std::chrono::seconds(30)) == "stopped");
  CHECK(std::chrono::steady_clock::now() - t1 < std::chrono::seconds(2));
  stopper.join();
  CHECK(failure_of(stopped, std::chrono::seconds(30)) == "stopped");  // and later requests fail at once
}
