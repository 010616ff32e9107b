// A platform job's followers (job/platform_follower.h, platform_leader.h):
// the key and socket name, which hosts are followed, and the socket protocol
// against a real follower loop on a thread (attach, status, start timeout,
// the leader going away, refused peers).
#include <catch2/catch.hpp>

#include "../fakes/fake_spawner.h"
#include "hvd/launcher/job/platform_follower.h"
#include "hvd/launcher/job/platform_leader.h"
#include "hvd/launcher/options/options.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>

using namespace hvd::launcher;
namespace fakes = hvd::launcher::fakes;
using namespace hvd::launcher::platform;
using namespace std::chrono_literals;

namespace {

PlatformDescription sagemaker(const std::string& this_host) {
  PlatformDescription p;
  p.name = "sagemaker";
  p.hosts = {{"algo-1", 2}, {"algo-2", 2}, {"algo-3", 2}};
  p.this_host = this_host;
  p.leader = "algo-1";
  return p;
}

/// A key no other test run uses (abstract names are machine-wide per netns).
std::string unique_key(const std::string& what) {
  static int n = 0;
  return "test:" + std::to_string(::getpid()) + ":" + what + std::to_string(++n);
}

std::future<int> start_follower(const std::string& key, std::chrono::milliseconds start_timeout,
                                std::chrono::milliseconds grace = 300ms) {
  FollowerOptions o;
  o.key = key;
  o.platform = "sagemaker";
  o.leader = "algo-1";
  o.start_timeout = start_timeout;
  o.grace = grace;
  o.handle_signals = false;
  auto f = std::async(std::launch::async, [o] { return run_follower(o); });
  std::this_thread::sleep_for(50ms);  // listening
  return f;
}

int status_main(const std::string& key, const std::string& status, const std::string& timeout = "2") {
  std::vector<std::string> args = {"hvdrun", "--follower-status", key, status, timeout};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  return follower_status_main(static_cast<int>(argv.size()), argv.data());
}

void send_line(int fd, const std::string& line) {
  REQUIRE(::send(fd, line.data(), line.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(line.size()));
}

}  // namespace

TEST_CASE("follower: the key names the platform, its job id and the host", "[platform_follower]") {
  const auto p = sagemaker("algo-1");
  CHECK(follower_key(p, {"", {}}, "algo-2") == "sagemaker::algo-2");
  CHECK(follower_key(p, {"", {{"TRAINING_JOB_NAME", "job-7"}}}, "algo-2") == "sagemaker:job-7:algo-2");
  CHECK(follower_key(p, {"", {{"SM_TRAINING_ENV", R"({"job_name": "from-env", "hosts": []})"}}}, "algo-2") ==
        "sagemaker:from-env:algo-2");
  CHECK(follower_key(p, {"", {{"SM_TRAINING_ENV", "{not json"}}}, "algo-2") == "sagemaker::algo-2");
  PlatformDescription slurm = p;
  slurm.name = "slurm";
  CHECK(follower_key(slurm, {"", {{"SLURM_JOB_ID", "1234"}}}, "node02") == "slurm:1234:node02");

  CHECK(follower_socket_name("slurm:1:n1") == "hvdrun-follower:slurm:1:n1");
  const std::string long_key = "sagemaker:" + std::string(200, 'j') + ":algo-2";
  const std::string name = follower_socket_name(long_key);
  CHECK(name.size() <= 100);
  CHECK(name == follower_socket_name(long_key));
  CHECK(name != follower_socket_name("sagemaker:" + std::string(200, 'j') + ":algo-3"));
}

TEST_CASE("follower: the leader attaches to every other host - Slurm only inside a multi-node srun step",
          "[platform_follower]") {
  std::string why;
  auto followers = follower_hosts(sagemaker("algo-1"), {"", {{"TRAINING_JOB_NAME", "j"}}}, &why);
  REQUIRE(followers.size() == 2);
  CHECK(followers[0].host == "algo-2");
  CHECK(followers[0].key == "sagemaker:j:algo-2");
  CHECK(followers[1].host == "algo-3");
  CHECK(why.empty());
  CHECK(follower_hosts(sagemaker("algo-2"), {"", {}}, &why).empty());  // a follower leads nobody
  CHECK(follower_hosts(sagemaker(""), {"", {}}, &why).empty());  // a launcher outside the hosts

  PlatformDescription slurm = sagemaker("algo-1");
  slurm.name = "slurm";
  CHECK(follower_hosts(slurm, {"", {{"SLURM_JOB_ID", "5"}}}, &why).empty());
  CHECK(why.find("SLURM_STEP_NUM_NODES is not set") != std::string::npos);
  CHECK(follower_hosts(slurm, {"", {{"SLURM_JOB_ID", "5"}, {"SLURM_STEP_NUM_NODES", "1"}}}, &why).empty());
  CHECK(follower_hosts(slurm, {"", {{"SLURM_JOB_ID", "5"}, {"SLURM_STEP_NUM_NODES", "3"}}}, nullptr).size() == 2);
}

TEST_CASE("follower: attach then status - the follower exits with the job's status", "[platform_follower]") {
  const std::string key = unique_key("status");
  auto follower = start_follower(key, 5s);
  std::string error;
  int fd = connect_follower(key, 2s, &error);
  REQUIRE(fd >= 0);
  send_line(fd, "attach\n");
  std::this_thread::sleep_for(100ms);
  CHECK(follower.wait_for(0ms) == std::future_status::timeout);  // attached: waits
  CHECK(status_main(key, "3") == 0);
  REQUIRE(follower.wait_for(2s) == std::future_status::ready);
  CHECK(follower.get() == 3);
  ::close(fd);
  // Nobody listens any more: the status has nowhere to go (bounded).
  auto t0 = std::chrono::steady_clock::now();
  CHECK(status_main(key, "0", "0.3") == 1);
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
}

TEST_CASE("follower: a status without an attach (a job that ended at once) is taken too", "[platform_follower]") {
  const std::string key = unique_key("early");
  auto follower = start_follower(key, 5s);
  CHECK(status_main(key, "0") == 0);
  REQUIRE(follower.wait_for(2s) == std::future_status::ready);
  CHECK(follower.get() == 0);
}

TEST_CASE("follower: no leader within the start timeout is exit 6", "[platform_follower]") {
  const std::string key = unique_key("timeout");
  auto t0 = std::chrono::steady_clock::now();
  auto follower = start_follower(key, 400ms);
  REQUIRE(follower.wait_for(3s) == std::future_status::ready);
  CHECK(follower.get() == exit_code::kPlatformFollower);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 400ms);
  CHECK(took < 2s);
}

TEST_CASE("follower: the leader's connection going away without a status is exit 6 after the grace",
          "[platform_follower]") {
  const std::string key = unique_key("gone");
  auto follower = start_follower(key, 5s, 300ms);
  int fd = connect_follower(key, 2s, nullptr);
  REQUIRE(fd >= 0);
  send_line(fd, "attach\n");
  std::this_thread::sleep_for(100ms);
  ::close(fd);  // the leader was killed: its attach process dies
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(follower.wait_for(3s) == std::future_status::ready);
  CHECK(follower.get() == exit_code::kPlatformFollower);
  CHECK(std::chrono::steady_clock::now() - t0 >= 250ms);
}

TEST_CASE("follower: a new attach within the grace keeps following", "[platform_follower]") {
  const std::string key = unique_key("reattach");
  auto follower = start_follower(key, 5s, 500ms);
  int a = connect_follower(key, 2s, nullptr);
  REQUIRE(a >= 0);
  send_line(a, "attach\n");
  int b = connect_follower(key, 2s, nullptr);
  REQUIRE(b >= 0);
  send_line(b, "attach\n");
  std::this_thread::sleep_for(100ms);
  ::close(a);  // one of two attach connections closed: still attached
  std::this_thread::sleep_for(800ms);
  CHECK(follower.wait_for(0ms) == std::future_status::timeout);
  CHECK(status_main(key, "7") == 0);
  REQUIRE(follower.wait_for(2s) == std::future_status::ready);
  CHECK(follower.get() == 7);
  ::close(b);
}

TEST_CASE("follower: garbage requests are dropped - a second follower with the same key is refused",
          "[platform_follower]") {
  const std::string key = unique_key("garbage");
  auto follower = start_follower(key, 3s);
  char c;
  for (const char* garbage : {"status 999\n", "status  +1\n", "status +1\n", "status 1 \n"}) {
    // Out of range, or not digits only (issue 29 item 4: "status  +1" was status 1): dropped.
    int fd = connect_follower(key, 2s, nullptr);
    REQUIRE(fd >= 0);
    send_line(fd, garbage);
    CHECK(::recv(fd, &c, 1, 0) == 0);  // closed by the follower
    ::close(fd);
  }
  FollowerOptions twin;
  twin.key = key;
  twin.platform = "sagemaker";
  twin.leader = "algo-1";
  twin.handle_signals = false;
  CHECK(run_follower(twin) == exit_code::kPlatformFollower);  // EADDRINUSE: one line
  CHECK(follower.wait_for(0ms) == std::future_status::timeout);
  CHECK(status_main(key, "0") == 0);
  CHECK(follower.get() == 0);
}

TEST_CASE("follower: peers of another uid are refused (SO_PEERCRED)", "[platform_follower]") {
  if (::geteuid() != 0) {
    WARN("SKIPPED: needs root to connect as another uid");
    return;
  }
  const std::string key = unique_key("uid");
  auto follower = start_follower(key, 3s);
  // Everything the child needs is prepared here: after fork() (threads
  // running) it makes system calls only.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string name = follower_socket_name(key);
  std::memcpy(addr.sun_path + 1, name.data(), name.size());
  const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  pid_t child = ::fork();
  if (child == 0) {
    if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(3);
    int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), len) != 0) ::_exit(4);
    struct pollfd p = {fd, POLLIN, 0};
    if (::poll(&p, 1, 2000) != 1) ::_exit(2);  // neither greeted nor closed
    char c;
    ::_exit(::recv(fd, &c, 1, 0) == 0 ? 0 : 1);  // 0: closed without a greeting
  }
  int st = 0;
  REQUIRE(::waitpid(child, &st, 0) == child);
  CHECK(WIFEXITED(st));
  CHECK(WEXITSTATUS(st) == 0);  // closed without a greeting for uid 65534
  CHECK(status_main(key, "0") == 0);
  CHECK(follower.get() == 0);
}

TEST_CASE("follower: tcp_port_listening sees this namespace's listening sockets", "[platform_follower]") {
  int s = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(s >= 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  socklen_t len = sizeof a;
  REQUIRE(::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0);
  const int port = ntohs(a.sin_port);
  CHECK_FALSE(tcp_port_listening(port));  // bound, not listening
  REQUIRE(::listen(s, 1) == 0);
  CHECK(tcp_port_listening(port));
  ::close(s);
}

TEST_CASE("follower: the remote command falls back to hvdrun on PATH", "[platform_follower]") {
  auto argv = PlatformLeader::remote_command("/no/such/hvdrun", {"--follower-attach", "k"});
  REQUIRE(argv.size() == 6);
  CHECK(argv[0] == "/bin/sh");
  // Run it with a PATH whose `hvdrun` echoes its arguments.
  char dir[] = "/tmp/hvdfollowXXXXXX";
  REQUIRE(::mkdtemp(dir));
  const std::string fake = std::string(dir) + "/hvdrun";
  {
    FILE* f = std::fopen(fake.c_str(), "w");
    REQUIRE(f);
    std::fputs("#!/bin/sh\necho \"fallback $*\"\n", f);
    std::fclose(f);
    ::chmod(fake.c_str(), 0755);
  }
  std::string cmd = "PATH=" + std::string(dir) + ":/usr/bin:/bin";
  for (const auto& a : argv) cmd += " '" + a + "'";
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  char buf[256] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, p);
  ::pclose(p);
  ::unlink(fake.c_str());
  ::rmdir(dir);
  CHECK(std::string(buf, n) == "fallback --follower-attach k\n");
  auto direct = PlatformLeader::remote_command("/bin/echo", {"a b"});
  std::string cmd2;
  for (const auto& a : direct) cmd2 += " '" + a + "'";
  p = ::popen(cmd2.c_str(), "r");
  REQUIRE(p);
  const std::size_t m = std::fread(buf, 1, sizeof buf - 1, p);
  ::pclose(p);
  CHECK(std::string(buf, m) == "a b\n");
}

// ---- the leader's side against fake spawners

namespace {

/// What one follower host does, on the shared fake spawners
/// (fakes/fake_spawner.h), which record what it was asked.
struct FollowerHost {
  enum class Attach { Ok, ExitsNoFollower, Silent };
  Attach attach = Attach::Ok;
  int refuse_first = 0;  // launches that throw "connection refused" first
  std::string hard_error;  // a launch error that is not retried
  int status_exit = 0;
};

/// The shared fake factory, each host doing what `hosts` says (set before
/// the leader makes its first spawner for it).
struct FollowerFactory {
  std::map<std::string, FollowerHost> hosts;
  fakes::FakeSpawnerFactory spawners;
  FollowerFactory() {
    spawners.local = false;
    spawners.on_new_host = [this](fakes::FakeHost& h) {
      FollowerHost& b = hosts[h.name];
      h.shutdown_exit = {0, 255, 0, "shut down"};
      h.before_launch = [&b](fakes::FakeHost& host, const std::vector<WorkerSpec>&) {
        std::lock_guard<std::mutex> lock(host.mutex);
        if (!b.hard_error.empty()) throw LaunchError(host.name, host.name + ": " + b.hard_error);
        if (b.refuse_first > 0) {
          --b.refuse_first;
          throw LaunchError(host.name, host.name + ": connection refused (198.18.0.3:22)");
        }
      };
      h.on_launch = [&b](fakes::FakeHost& host) {
        std::vector<std::string> argv;
        {
          std::lock_guard<std::mutex> lock(host.mutex);
          argv = host.launches.back().at(0).argv;
        }
        if (std::find(argv.begin(), argv.end(), "--follower-status") != argv.end()) {
          host.exit(0, b.status_exit);
        } else if (b.attach == FollowerHost::Attach::Ok) {
          host.output(0, Stream::Stdout, "attached\n");
        } else if (b.attach == FollowerHost::Attach::ExitsNoFollower) {
          host.output(0, Stream::Stderr, "hvdrun: error: no hvdrun follower of k answered on this machine within 1s\n");
          host.exit(0, 1);
        }
      };
    };
  }
  operator SpawnerFactory&() { return spawners; }
  /// What host `name` was asked.
  fakes::FakeHost& fake(const std::string& name) { return *spawners.host(name); }
};

std::vector<PlatformLeader::Follower> two_followers() {
  return {{"algo-2", "sagemaker:j:algo-2"}, {"algo-3", "sagemaker:j:algo-3"}};
}

/// The argument after `flag` in a remote command.
std::vector<std::string> args_after(const std::vector<std::string>& argv, const std::string& flag) {
  auto it = std::find(argv.begin(), argv.end(), flag);
  return it == argv.end() ? std::vector<std::string>{} : std::vector<std::string>(it, argv.end());
}

}  // namespace

TEST_CASE("leader: attaches to every follower, reports the status, then ends the attach processes",
          "[platform_follower]") {
  FollowerFactory factory;
  factory.hosts["algo-2"];
  factory.hosts["algo-3"];
  {
    PlatformLeader leader(factory, two_followers(), 5s, "/opt/hvdrun");
    REQUIRE(leader.attach() == 0);
    for (const auto& [host, b] : factory.hosts) {
      auto& h = factory.fake(host);
      REQUIRE(h.argvs().size() == 1);
      CHECK(args_after(h.argvs()[0], "--follower-attach") ==
            std::vector<std::string>{"--follower-attach", "sagemaker:j:" + host, "5"});
      CHECK(h.argvs()[0][3] == "/opt/hvdrun");
      CHECK(h.shutdowns == 0);
    }
    leader.report(3);
    for (const auto& [host, b] : factory.hosts) {
      auto& h = factory.fake(host);
      REQUIRE(h.argvs().size() == 2);
      CHECK(args_after(h.argvs()[1], "--follower-status") ==
            std::vector<std::string>{"--follower-status", "sagemaker:j:" + host, "3", "9"});
      CHECK(h.shutdowns == 2);  // the status spawner and the attach spawner
    }
  }
  for (const auto& [host, b] : factory.hosts) CHECK(factory.fake(host).shutdowns == 2);  // not again
}

TEST_CASE("leader: no follower on a host is exit 3 - nothing is left attached", "[platform_follower]") {
  FollowerFactory factory;
  factory.hosts["algo-2"];
  factory.hosts["algo-3"].attach = FollowerHost::Attach::ExitsNoFollower;
  PlatformLeader leader(factory, two_followers(), 5s, "/opt/hvdrun");
  CHECK(leader.attach() == exit_code::kLaunch);
  CHECK(factory.fake("algo-2").shutdowns == 1);
  CHECK(factory.fake("algo-3").shutdowns == 1);
  leader.report(0);  // after a failed attach: nothing to tell
  CHECK(factory.fake("algo-2").argvs().size() == 1);
}

TEST_CASE("leader: a follower that never answers is exit 3 after the start timeout", "[platform_follower]") {
  FollowerFactory factory;
  factory.hosts["algo-2"].attach = FollowerHost::Attach::Silent;
  factory.hosts["algo-3"];
  PlatformLeader leader(factory, two_followers(), 500ms, "/opt/hvdrun");
  auto t0 = std::chrono::steady_clock::now();
  CHECK(leader.attach() == exit_code::kLaunch);
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took >= 450ms);
  CHECK(took < 3s);
}

TEST_CASE("leader: a host not up yet is tried again - a refusing one is not", "[platform_follower]") {
  FollowerFactory factory;
  factory.hosts["algo-2"].refuse_first = 2;
  factory.hosts["algo-3"];
  {
    PlatformLeader leader(factory, two_followers(), 10s, "/opt/hvdrun");
    CHECK(leader.attach() == 0);
    CHECK(factory.fake("algo-2").launch_attempts == 3);
    leader.report(0);
  }
  FollowerFactory refusing;
  refusing.hosts["algo-2"].hard_error = "authentication failed (tried /root/.ssh/id_ed25519)";
  refusing.hosts["algo-3"];
  PlatformLeader leader(refusing, two_followers(), 10s, "/opt/hvdrun");
  auto t0 = std::chrono::steady_clock::now();
  CHECK(leader.attach() == exit_code::kLaunch);
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  CHECK(refusing.fake("algo-2").launch_attempts == 1);
}

TEST_CASE("leader: a follower that failed to take the status is a warning, the report stays bounded",
          "[platform_follower]") {
  FollowerFactory factory;
  factory.hosts["algo-2"].status_exit = 1;
  factory.hosts["algo-3"];
  PlatformLeader leader(factory, two_followers(), 5s, "/opt/hvdrun");
  REQUIRE(leader.attach() == 0);
  auto t0 = std::chrono::steady_clock::now();
  leader.report(0, 1s);
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  CHECK(factory.fake("algo-3").argvs().size() == 2);
}
