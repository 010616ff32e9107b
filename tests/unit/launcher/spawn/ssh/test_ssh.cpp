// Unit tests of the SSH spawner's building blocks that need no SSH server:
// shell quoting (checked by a real /bin/sh), TCP
// connect errors, and how a session fails against servers that are not SSH
// servers (garbage, silence) -- all on loopback.
#include "hvd/common/error.h"
#include "hvd/launcher/spawn/ssh/ssh_session.h"
#include "hvd/launcher/spawn/ssh/ssh_spawner.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

using namespace hvd::launcher;
using hvd::Clock;
using hvd::Deadline;
using std::chrono::milliseconds;

namespace {

/// Runs `sh -c 'printf "%s\n" <quoted>'` and returns what it printed.
std::string through_shell(const std::string& word) {
  std::string script = "printf '%s|' " + ssh::shell_quote(word);
  std::string cmd = "/bin/sh -c " + ssh::shell_quote(script);
  FILE* f = ::popen(cmd.c_str(), "r");
  REQUIRE(f != nullptr);
  std::string out;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  ::pclose(f);
  return out;
}

/// A loopback TCP listener whose accepted connections are handled by `serve`.
class Listener {
 public:
  explicit Listener(std::function<void(int)> serve) : serve_(std::move(serve)) {
    fd_ = hvd::UniqueFd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    REQUIRE(::listen(fd_.get(), 8) == 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      int c = ::accept(fd_.get(), nullptr, nullptr);
      if (c >= 0 && !stop_) serve_(c);
      if (c >= 0) ::close(c);
    });
  }
  ~Listener() {
    stop_ = true;
    ::shutdown(fd_.get(), SHUT_RDWR);
    // Unblock accept() if nobody connected.
    hvd::UniqueFd poke(::socket(AF_INET, SOCK_STREAM, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port_));
    ::connect(poke.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  std::function<void(int)> serve_;
  hvd::UniqueFd fd_;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// Reads until the client closes (bounded by a 5 s receive timeout): a
/// server that never says anything.
void stay_silent(int c) {
  timeval tv{5, 0};
  ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char b[256];
  while (::read(c, b, sizeof b) > 0) {
  }
}

/// A port on 127.0.0.1 that nothing listens on.
int closed_port() {
  hvd::UniqueFd fd(::socket(AF_INET, SOCK_STREAM, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);  // closed when fd goes away; nobody listened
}

ssh::SessionOptions loopback_options(int port) {
  ssh::SessionOptions o;
  o.host = "127.0.0.1";
  o.port = port;
  o.user = "nobody";
  o.home = "/nonexistent";
  o.known_hosts_files = {"/nonexistent/.ssh/known_hosts"};
  return o;
}

class NullSink : public EventSink {
 public:
  void on_output(int, Stream, const char*, std::size_t) override { ++events; }
  void on_exit(const WorkerExit&) override { ++events; }
  std::atomic<int> events{0};
};

}  // namespace

TEST_CASE("ssh: shell_quote survives a real shell", "[ssh]") {
  for (std::string w : {std::string(""), std::string("plain"), std::string("a b"), std::string("it's"),
                        std::string("$HOME"), std::string("`id`"), std::string("a\nb"), std::string("*"),
                        std::string("--flag=x,y:z"), std::string("'\"\\"), std::string("tab\there")}) {
    CAPTURE(w);
    CHECK(through_shell(w) == w + "|");
  }
  CHECK(ssh::shell_quote("/usr/bin/hvdrun") == "/usr/bin/hvdrun");
  CHECK(ssh::shell_join({"/opt/my dir/hvdrun", "--agent"}) == "'/opt/my dir/hvdrun' --agent");
}

TEST_CASE("ssh: connect_tcp: refused port gives one line naming host and cause", "[ssh]") {
  int port = closed_port();
  try {
    ssh::connect_tcp("127.0.0.1", port, Deadline::after(milliseconds(2000)));
    FAIL("connected to a closed port");
  } catch (const LaunchError& e) {
    std::string msg = e.what();
    CHECK(e.host() == "127.0.0.1");
    CHECK(msg.rfind("127.0.0.1: connection refused", 0) == 0);
    CHECK(msg.find(std::to_string(port)) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
}

TEST_CASE("ssh: connect_tcp: a name that does not resolve", "[ssh]") {
  try {
    ssh::connect_tcp("no-such-host.invalid", 22, Deadline::after(milliseconds(5000)));
    FAIL("resolved an .invalid name");
  } catch (const LaunchError& e) {
    CHECK(std::string(e.what()).rfind("no-such-host.invalid: name does not resolve", 0) == 0);
  }
}

TEST_CASE("ssh: connect_tcp succeeds against a listener", "[ssh]") {
  Listener l([](int) {});
  std::string peer;
  hvd::UniqueFd fd = ssh::connect_tcp("localhost", l.port(), Deadline::after(milliseconds(2000)), nullptr, &peer);
  CHECK(fd);
  CHECK(peer.find(std::to_string(l.port())) != std::string::npos);
}

TEST_CASE("ssh: connect_tcp: ConnectionAttempts tries again a second later", "[ssh]") {
  // Bound but not listening: refused, until the listen() 1.3 s later.
  hvd::UniqueFd srv(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(srv.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  ::getsockname(srv.get(), reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  ssh::TcpSettings one;
  CHECK_THROWS_WITH(
      ssh::connect_tcp("127.0.0.1", port, Deadline::after(milliseconds(5000)), nullptr, nullptr, nullptr, "", one),
      fmt::format("127.0.0.1: connection refused (127.0.0.1:{})", port));
  ssh::TcpSettings two;
  two.attempts = 2;
  auto t0 = Clock::now();
  CHECK_THROWS_WITH(
      ssh::connect_tcp("127.0.0.1", port, Deadline::after(milliseconds(5000)), nullptr, nullptr, nullptr, "", two),
      fmt::format("127.0.0.1: connection refused (127.0.0.1:{}; 2 attempts)", port));
  CHECK(Clock::now() - t0 >= milliseconds(950));  // one second apart
  std::thread later([&] {
    std::this_thread::sleep_for(milliseconds(1300));
    ::listen(srv.get(), 4);
  });
  ssh::TcpSettings three;
  three.attempts = 3;
  hvd::UniqueFd fd;
  CHECK_NOTHROW(fd = ssh::connect_tcp("127.0.0.1", port, Deadline::after(milliseconds(10000)), nullptr, nullptr,
                                      nullptr, "", three));
  CHECK(fd);
  later.join();
}

TEST_CASE("ssh: connect_tcp: AddressFamily and BindAddress", "[ssh]") {
  std::string seen_peer;
  Listener l([&](int c) {
    sockaddr_in peer{};
    socklen_t len = sizeof peer;
    ::getpeername(c, reinterpret_cast<sockaddr*>(&peer), &len);
    char buf[INET_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET, &peer.sin_addr, buf, sizeof buf);
    seen_peer = buf;
  });
  ssh::TcpSettings v6;
  v6.family = AF_INET6;  // an IPv4 literal has no IPv6 address
  CHECK_THROWS_WITH(
      ssh::connect_tcp("127.0.0.1", l.port(), Deadline::after(milliseconds(2000)), nullptr, nullptr, nullptr, "", v6),
      Catch::StartsWith("127.0.0.1: name does not resolve"));
  ssh::TcpSettings bound;
  bound.family = AF_INET;
  bound.bind_addresses = {"::1", "127.0.0.2"};  // the one of the peer's family; all of 127/8 is local
  hvd::UniqueFd fd = ssh::connect_tcp("127.0.0.1", l.port(), Deadline::after(milliseconds(2000)), nullptr, nullptr,
                                      nullptr, "", bound);
  CHECK(fd);
  fd.reset();
  for (int i = 0; i < 100 && seen_peer.empty(); ++i) std::this_thread::sleep_for(milliseconds(10));
  CHECK(seen_peer == "127.0.0.2");
  // A bind address of the other family: no address can be tried.
  ssh::TcpSettings other;
  other.bind_addresses = {"::1"};
  other.bind_source = "BindAddress ::1";
  CHECK_THROWS_WITH(
      ssh::connect_tcp("127.0.0.1", 9, Deadline::after(milliseconds(2000)), nullptr, nullptr, nullptr, "", other),
      "127.0.0.1: no address of the same family as the BindAddress ::1 (127.0.0.1:9)");
}

TEST_CASE("ssh: Session: a server that speaks garbage fails the handshake quickly", "[ssh]") {
  Listener l([](int c) {
    const char junk[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
    ssize_t n = ::write(c, junk, sizeof junk - 1);
    (void)n;
    ::usleep(200 * 1000);
  });
  auto t0 = Clock::now();
  try {
    ssh::Session::open(loopback_options(l.port()), Deadline::after(milliseconds(5000)));
    FAIL("handshake succeeded");
  } catch (const LaunchError& e) {
    std::string msg = e.what();
    CAPTURE(msg);
    CHECK(msg.rfind("127.0.0.1: ", 0) == 0);
    CHECK(msg.find("handshake") != std::string::npos);
  }
  CHECK(Clock::now() - t0 < std::chrono::seconds(4));
}

TEST_CASE("ssh: Session: a silent server times out at the deadline", "[ssh]") {
  Listener l(stay_silent);
  auto t0 = Clock::now();
  try {
    ssh::Session::open(loopback_options(l.port()), Deadline::after(milliseconds(1000)));
    FAIL("handshake succeeded");
  } catch (const LaunchError& e) {
    std::string msg = e.what();
    CAPTURE(msg);
    CHECK(msg.find("timed out after 1 s during the SSH handshake") != std::string::npos);
  }
  auto took = Clock::now() - t0;
  CHECK(took >= milliseconds(900));
  CHECK(took < milliseconds(2000));
}

namespace {
/// Whether a process whose command line holds `marker` is alive (a zombie
/// counts: nobody reaped it).
bool process_with(const std::string& marker) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos || name == std::to_string(::getpid())) continue;
    std::ifstream f(e.path() / "cmdline");
    std::string cmd((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    if (cmd.find(marker) != std::string::npos) return true;
  }
  return false;
}
}  // namespace

TEST_CASE("ssh: Session: a ProxyCommand that exits is named with its status, and reaped", "[ssh][proxy]") {
  ssh::SessionOptions o = loopback_options(22);
  o.host = "node7";
  o.proxy_command = "sh -c 'exit 5' hvd-proxy-exit-test";
  auto t0 = Clock::now();
  CHECK_THROWS_WITH(ssh::Session::open(o, Deadline::after(milliseconds(5000))),
                    "node7: its ProxyCommand exited with code 5 during the SSH handshake (through its ProxyCommand)");
  CHECK(Clock::now() - t0 < milliseconds(2000));
  CHECK_FALSE(process_with("hvd-proxy-exit-test"));
}

TEST_CASE("ssh: Session: a ProxyCommand's stdin and stdout carry the connection", "[ssh][proxy]") {
  // The command relays to a server speaking garbage: the handshake fails on
  // what the server said, through the command.
  Listener l([](int c) {
    const char junk[] = "HTTP/1.1 400 Bad Request\r\n\r\n";
    ssize_t n = ::write(c, junk, sizeof junk - 1);
    (void)n;
    ::usleep(300 * 1000);
  });
  ssh::SessionOptions o = loopback_options(l.port());
  o.host = "node8";
  o.proxy_command = fmt::format(
      "python3 -c 'import socket,sys; s=socket.create_connection((\"127.0.0.1\",{})); "
      "sys.stdout.buffer.write(s.recv(100)); sys.stdout.flush(); sys.stdin.read()' hvd-proxy-relay-test",
      l.port());
  try {
    ssh::Session::open(o, Deadline::after(milliseconds(5000)));
    FAIL("handshake succeeded");
  } catch (const LaunchError& e) {
    std::string msg = e.what();
    CAPTURE(msg);
    CHECK(msg.rfind("node8: ", 0) == 0);
    CHECK(msg.find("handshake") != std::string::npos);
    CHECK(msg.find("(through its ProxyCommand)") != std::string::npos);
    CHECK(msg.find("exited") == std::string::npos);
  }
  // (A relay that could not connect would have exited: "its ProxyCommand exited ...".)
  // The session closed its end: the command (waiting for stdin's end) is
  // gone, reaped.
  CHECK_FALSE(process_with("hvd-proxy-relay-test"));
}

TEST_CASE("ssh: Session: a ProxyCommand that never answers is stopped at the deadline", "[ssh][proxy]") {
  ssh::SessionOptions o = loopback_options(22);
  o.host = "node9";
  o.proxy_command = "sh -c 'sleep 30.4217; :' hvd-proxy-silent-test";
  auto t0 = Clock::now();
  CHECK_THROWS_WITH(ssh::Session::open(o, Deadline::after(milliseconds(1000))),
                    "node9: timed out after 1 s during the SSH handshake (through its ProxyCommand)");
  CHECK(Clock::now() - t0 < milliseconds(3000));  // 1 s, then SIGTERM after 0.3 s
  CHECK_FALSE(process_with("hvd-proxy-silent-test"));
  // The command's own child: its group was stopped. It is not hvdrun's
  // child, so init reaps it, a moment later.
  bool child_gone = false;
  for (int i = 0; i < 100 && !child_gone; ++i) {
    child_gone = !process_with("30.4217");
    if (!child_gone) std::this_thread::sleep_for(milliseconds(20));
  }
  CHECK(child_gone);
}

TEST_CASE("ssh: Session: cancel aborts a pending handshake", "[ssh]") {
  Listener l(stay_silent);
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(200));
    cancel = true;
  });
  auto t0 = Clock::now();
  CHECK_THROWS_WITH(ssh::Session::open(loopback_options(l.port()), Deadline::after(milliseconds(5000)), &cancel),
                    Catch::Contains("cancelled"));
  CHECK(Clock::now() - t0 < milliseconds(1500));
  canceller.join();
}

TEST_CASE("ssh: SshSpawner: a failed launch throws LaunchError, delivers nothing, and shuts down twice", "[ssh]") {
  SshSpawnerOptions o;
  o.port = closed_port();
  o.home = "/nonexistent";
  o.agent_command = {"/bin/false"};
  auto spawner = make_ssh_spawner(o);
  std::vector<WorkerSpec> workers(2);
  for (int r = 0; r < 2; ++r) {
    workers[r].slot.hostname = "127.0.0.1";
    workers[r].slot.rank = r;
    workers[r].argv = {"true"};
  }
  NullSink sink;
  auto t0 = Clock::now();
  try {
    spawner->launch(workers, sink, Deadline::after(milliseconds(3000)));
    FAIL("launch succeeded");
  } catch (const LaunchError& e) {
    CHECK(e.host() == "127.0.0.1");
    CHECK(std::string(e.what()).find("connection refused") != std::string::npos);
  }
  CHECK(Clock::now() - t0 < milliseconds(2000));
  spawner->signal(0, SIGTERM);  // no-op
  spawner->shutdown();
  spawner->shutdown();
  CHECK(sink.events == 0);
}

TEST_CASE("ssh: tilde_path abbreviates only paths under home", "[ssh]") {
  CHECK(ssh::tilde_path("/root/.ssh/id_rsa", "/root") == "~/.ssh/id_rsa");
  CHECK(ssh::tilde_path("/rootkit/id", "/root") == "/rootkit/id");
  CHECK(ssh::tilde_path("/tmp/k", "") == "/tmp/k");
}

namespace {

std::vector<WorkerSpec> one_worker(const std::string& host) {
  std::vector<WorkerSpec> workers(1);
  workers[0].slot.hostname = host;
  workers[0].slot.rank = 0;
  workers[0].argv = {"true"};
  return workers;
}

/// The LaunchError message of launching one worker on `host` ("" if none).
std::string launch_error(const SshSpawnerOptions& o, const std::string& host,
                         milliseconds timeout = milliseconds(3000)) {
  auto spawner = make_ssh_spawner(o);
  NullSink sink;
  try {
    spawner->launch(one_worker(host), sink, Deadline::after(timeout));
  } catch (const LaunchError& e) {
    return e.what();
  }
  return "";
}

std::string write_temp(const std::string& text) {
  char path[] = "/tmp/hvd-ssh-config-XXXXXX";
  int fd = ::mkstemp(path);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size()));
  ::close(fd);
  return path;
}

}  // namespace

TEST_CASE("ssh: connect errors always carry the address and port (docs/ssh.md)", "[ssh]") {
  int port = closed_port();
  CHECK_THROWS_WITH(ssh::connect_tcp("127.0.0.1", port, Deadline::after(milliseconds(2000))),
                    Catch::Equals(fmt::format("127.0.0.1: connection refused (127.0.0.1:{})", port)));
  CHECK_THROWS_WITH(
      ssh::connect_tcp("127.0.0.1", port, Deadline::after(milliseconds(2000)), nullptr, nullptr, nullptr, "alias"),
      Catch::Equals(fmt::format("alias: connection refused (127.0.0.1:{})", port)));
}

TEST_CASE("ssh: SshSpawner: ssh_config aliases, HostName and Port - -p wins over the file", "[ssh][config]") {
  int file_port = closed_port();
  const std::string cfg = write_temp(fmt::format("Host pod-*\n  HostName 127.0.0.1\n  Port {}\n", file_port));
  SshSpawnerOptions o;
  o.home = "/nonexistent";
  o.agent_command = {"/bin/false"};
  o.config_files = std::vector<std::string>{cfg};
  CHECK(launch_error(o, "pod-0") == fmt::format("pod-0: connection refused (127.0.0.1:{})", file_port));
  int flag_port = closed_port();
  o.port = flag_port;
  CHECK(launch_error(o, "pod-0") == fmt::format("pod-0: connection refused (127.0.0.1:{})", flag_port));
  // A config value hvdrun cannot use: one line naming file and line.
  const std::string bad = write_temp("Host pod-*\n  HostName 127.0.0.1\n  StrictHostKeyChecking sometimes\n");
  o.config_files = std::vector<std::string>{bad};
  CHECK_THAT(launch_error(o, "pod-0"), Catch::StartsWith("pod-0: " + bad + ":3: StrictHostKeyChecking 'sometimes'"));
  // A file that cannot be parsed at all: every host reports it.
  const std::string broken = write_temp("Host \"pod-*\n");
  o.config_files = std::vector<std::string>{broken};
  CHECK_THAT(launch_error(o, "pod-0"), Catch::StartsWith("pod-0: " + broken + ":1: unterminated quote"));
  ::unlink(cfg.c_str());
  ::unlink(bad.c_str());
  ::unlink(broken.c_str());
}

TEST_CASE("ssh: describe_ssh_route resolves a host as launch() does, without connecting", "[ssh][config]") {
  const int file_port = closed_port();
  const std::string cfg = write_temp(fmt::format(
      "Host bastion\n  HostName 127.0.0.9\n  User hopper\n  Port 2200\n"
      "Host pod-*\n  HostName 127.0.0.1\n  Port {}\n  User trainer\n  ProxyJump bastion,admin@second:2201\n"
      "  IdentityFile /nonexistent/key\n  IdentitiesOnly yes\n  StrictHostKeyChecking yes\n"
      "Host direct\n  HostName 127.0.0.1\n  Port {}\n"
      "Host badport\n  Port x\n",
      file_port, file_port));
  SshSpawnerOptions o;
  o.home = "/nonexistent";
  o.agent_command = {"/bin/false"};
  o.config_files = std::vector<std::string>{cfg};

  const SshRoute pod = describe_ssh_route(o, "pod-0");
  REQUIRE(pod.options);
  CHECK(pod.error.empty());
  CHECK(pod.options->hostname == "127.0.0.1");
  CHECK(pod.options->port == file_port);
  CHECK(pod.options->user == "trainer");
  CHECK(pod.options->identity_files == std::vector<std::string>{"/nonexistent/key"});
  CHECK(pod.options->identities_only);
  CHECK(pod.options->host_key_policy == ssh::HostKeyPolicy::Yes);
  CHECK(pod.options->host_key_policy_source == cfg + ":12");
  CHECK(pod.options->proxy_where == cfg + ":9");
  REQUIRE(pod.options->jump_hosts.size() == 2);
  CHECK(pod.options->jump_hosts[0].hostname == "127.0.0.9");  // its own Host block
  CHECK(pod.options->jump_hosts[0].user == "hopper");
  CHECK(pod.options->jump_hosts[0].port == 2200);
  CHECK(pod.options->jump_hosts[1].host == "second");  // user and port from the ProxyJump entry
  CHECK(pod.options->jump_hosts[1].user == "admin");
  CHECK(pod.options->jump_hosts[1].port == 2201);

  // The address is the one launch() connects to.
  const SshRoute direct = describe_ssh_route(o, "direct");
  REQUIRE(direct.options);
  CHECK(launch_error(o, "direct") ==
        fmt::format("direct: connection refused ({}:{})", direct.options->hostname, direct.options->port));
  // -p wins over the file, for the route as for launch().
  o.port = closed_port();
  CHECK(describe_ssh_route(o, "direct").options->port == *o.port);
  CHECK(launch_error(o, "direct") == fmt::format("direct: connection refused (127.0.0.1:{})", *o.port));
  // A host the configuration does not let launch() reach: launch()'s own line.
  const SshRoute bad = describe_ssh_route(o, "badport");
  CHECK_FALSE(bad.options);
  CHECK(bad.error == launch_error(o, "badport"));
  CHECK_THAT(bad.error, Catch::StartsWith("badport: " + cfg + ":17: Port 'x'"));
  ::unlink(cfg.c_str());
}

TEST_CASE("ssh: SshSpawner: cancel_launch stops a launch stuck in the handshake within a second", "[ssh]") {
  Listener l(stay_silent);
  SshSpawnerOptions o;
  o.port = l.port();
  o.home = "/nonexistent";
  o.agent_command = {"/bin/false"};
  o.config_files = std::vector<std::string>{};
  auto spawner = make_ssh_spawner(o);
  NullSink sink;
  std::thread canceller([&] {
    std::this_thread::sleep_for(milliseconds(300));
    spawner->cancel_launch();
  });
  auto t0 = Clock::now();
  std::string msg;
  try {
    spawner->launch(one_worker("127.0.0.1"), sink, Deadline::after(milliseconds(20000)));
  } catch (const LaunchError& e) {
    msg = e.what();
  }
  auto took = Clock::now() - t0;
  canceller.join();
  CHECK_THAT(msg, Catch::Contains("hvdrun is stopping"));
  CHECK(took < milliseconds(1300));
  spawner->shutdown();
  CHECK(sink.events == 0);
  // A launch after cancel_launch does not even connect.
  auto second = make_ssh_spawner(o);
  second->cancel_launch();
  t0 = Clock::now();
  CHECK_THROWS_WITH(second->launch(one_worker("127.0.0.1"), sink, Deadline::after(milliseconds(20000))),
                    Catch::Contains("hvdrun is stopping"));
  CHECK(Clock::now() - t0 < milliseconds(200));
}
