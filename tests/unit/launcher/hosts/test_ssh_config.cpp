// ssh_config(5) parsing and per-host resolution (ssh_config.h).
#include "hvd/common/error.h"
#include "hvd/launcher/hosts/ssh_config.h"

#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace hvd::launcher::ssh;

namespace {

TokenValues tokens() {
  TokenValues t;
  t.home = "/home/alice";
  t.local_user = "alice";
  t.remote_user = "alice";
  t.local_host = "laptop";
  return t;
}

SshConfig parse(const std::string& text, std::vector<std::string>* warnings = nullptr) {
  return SshConfig::parse(text, "/home/alice/.ssh/config", "/home/alice", "/home/alice/.ssh", warnings);
}

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "hvd-sshcfg-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path); }
  void write(const std::string& rel, const std::string& text) const {
    fs::create_directories((path / rel).parent_path());
    std::ofstream(path / rel) << text;
  }
};

}  // namespace

TEST_CASE("ssh_config: split_config_line", "[ssh][config]") {
  using V = std::vector<std::string>;
  CHECK(split_config_line("") == V{});
  CHECK(split_config_line("   # comment") == V{});
  CHECK(split_config_line("Port 2222") == V{"Port", "2222"});
  CHECK(split_config_line("  Port=2222") == V{"Port", "2222"});
  CHECK(split_config_line("Port = 2222") == V{"Port", "2222"});
  CHECK(split_config_line("\tHost a b\t!c  ") == V{"Host", "a", "b", "!c"});
  CHECK(split_config_line("IdentityFile \"/path with space/key\" other") ==
        V{"IdentityFile", "/path with space/key", "other"});
  CHECK(split_config_line("User bob # trailing comment") == V{"User", "bob"});
  CHECK(split_config_line("Port 22\r") == V{"Port", "22"});
  CHECK_THROWS_AS(split_config_line("IdentityFile \"/open"), hvd::InvalidArgument);
}

TEST_CASE("ssh_config: patterns: wildcards, case, negation, several per line", "[ssh][config]") {
  CHECK(match_pattern("worker-3", "worker-*"));
  CHECK(match_pattern("worker-3", "worker-?"));
  CHECK_FALSE(match_pattern("worker-33", "worker-?"));
  CHECK(match_pattern("Worker-3.EXAMPLE", "worker-*.example"));
  CHECK(match_pattern("a", "*"));
  CHECK(match_pattern("abcabd", "*abd"));
  CHECK(match_pattern("", "*"));
  CHECK_FALSE(match_pattern("a", ""));
  CHECK_FALSE(match_pattern("worker", "worker-*"));
  CHECK(match_pattern("x.y.z", "*.*.*"));

  CHECK(match_host_line("db1", {"web*", "db*"}));
  CHECK_FALSE(match_host_line("db1", {"web*"}));
  CHECK_FALSE(match_host_line("db1", {"*", "!db*"}));  // negation vetoes
  CHECK_FALSE(match_host_line("db1", {"!db*", "*"}));  // wherever it stands
  CHECK(match_host_line("web1", {"*", "!db*"}));
  CHECK_FALSE(match_host_line("web1", {"!db*"}));  // only negated patterns never match
}

TEST_CASE("ssh_config: tokens and tilde", "[ssh][config]") {
  TokenValues t = tokens();
  t.host = "10.0.0.5";
  t.remote_user = "bob";
  t.alias = "w1";
  t.port = 2222;
  CHECK(expand_tokens("%d/.ssh/id_%u_%r@%h:%p(%n)%%", t) == "/home/alice/.ssh/id_alice_bob@10.0.0.5:2222(w1)%");
  CHECK(expand_tokens("%l", t) == "laptop");
  CHECK(expand_tokens("%i", t) == std::to_string(::getuid()));
  CHECK_THROWS_WITH(expand_tokens("%C", t), Catch::Contains("%C") && Catch::Contains("not supported"));
  CHECK_THROWS_AS(expand_tokens("abc%", t), hvd::InvalidArgument);
  CHECK(expand_tilde("~/.ssh/k", "/h") == "/h/.ssh/k");
  CHECK(expand_tilde("~", "/h") == "/h");
  CHECK(expand_tilde("/abs/~/k", "/h") == "/abs/~/k");
}

TEST_CASE("ssh_config: StrictHostKeyChecking values", "[ssh][config]") {
  CHECK(parse_host_key_policy("yes") == HostKeyPolicy::Yes);
  CHECK(parse_host_key_policy("ASK") == HostKeyPolicy::Yes);  // non-interactive
  CHECK(parse_host_key_policy("true") == HostKeyPolicy::Yes);
  CHECK(parse_host_key_policy("accept-new") == HostKeyPolicy::AcceptNew);
  CHECK(parse_host_key_policy("no") == HostKeyPolicy::No);
  CHECK(parse_host_key_policy("off") == HostKeyPolicy::No);
  CHECK(parse_host_key_policy("false") == HostKeyPolicy::No);
  CHECK_FALSE(parse_host_key_policy("maybe"));
  CHECK(std::string(policy_name(HostKeyPolicy::AcceptNew)) == "accept-new");
}

TEST_CASE("ssh_config: a Horovod helm chart's config", "[ssh][config]") {
  // What charts write: a Port and no host key checking for every host.
  auto cfg = parse(
      "Host *\n"
      "    Port 2222\n"
      "    StrictHostKeyChecking no\n"
      "    UserKnownHostsFile /dev/null\n");
  HostConfig h = cfg.resolve("horovod-worker-0.horovod", tokens());
  CHECK(h.port == 2222);
  CHECK(h.host_key_policy == HostKeyPolicy::No);
  CHECK(h.host_key_policy_where == "/home/alice/.ssh/config:3");
  CHECK(h.known_hosts_files == std::vector<std::string>{"/dev/null"});
  CHECK_FALSE(h.hostname);
  CHECK_FALSE(h.user);
  CHECK(h.identity_files.empty());
  CHECK(h.unsupported.empty());
}

TEST_CASE("ssh_config: the first value obtained wins, across blocks", "[ssh][config]") {
  auto cfg = parse(
      "Host w1\n"
      "  Port 2201\n"
      "  User first\n"
      "Host w*\n"
      "  Port 2299\n"
      "  User second\n"
      "  HostName %h.cluster.local\n"
      "Host *\n"
      "  Port 22\n"
      "  StrictHostKeyChecking accept-new\n"
      "  StrictHostKeyChecking no\n");
  HostConfig w1 = cfg.resolve("w1", tokens());
  CHECK(w1.port == 2201);
  CHECK(w1.user == "first");
  CHECK(w1.hostname == "w1.cluster.local");
  CHECK(w1.host_key_policy == HostKeyPolicy::AcceptNew);
  CHECK(w1.host_key_policy_where == "/home/alice/.ssh/config:10");
  HostConfig w2 = cfg.resolve("w2", tokens());
  CHECK(w2.port == 2299);
  CHECK(w2.user == "second");
  HostConfig other = cfg.resolve("db", tokens());
  CHECK(other.port == 22);
  CHECK_FALSE(other.user);
  CHECK_FALSE(other.hostname);
}

TEST_CASE("ssh_config: keywords before any Host apply to every host - Host matches the alias", "[ssh][config]") {
  auto cfg = parse(
      "User everyone\n"
      "Host alias\n"
      "  HostName 198.18.0.2\n"
      "Host 198.18.0.2\n"
      "  Port 2222\n");
  HostConfig h = cfg.resolve("alias", tokens());
  CHECK(h.user == "everyone");
  CHECK(h.hostname == "198.18.0.2");
  CHECK_FALSE(h.port);  // Host lines match the alias, not the HostName (as OpenSSH)
  CHECK(cfg.resolve("198.18.0.2", tokens()).port == 2222);
}

TEST_CASE("ssh_config: negation and several patterns on a Host line", "[ssh][config]") {
  auto cfg = parse(
      "Host node? !node9 gpu-*\n"
      "  User trainer\n");
  CHECK(cfg.resolve("node1", tokens()).user == "trainer");
  CHECK(cfg.resolve("gpu-a", tokens()).user == "trainer");
  CHECK_FALSE(cfg.resolve("node9", tokens()).user);
  CHECK_FALSE(cfg.resolve("node10", tokens()).user);
}

TEST_CASE("ssh_config: IdentityFile accumulates, with tokens and ~", "[ssh][config]") {
  auto cfg = parse(
      "Host w*\n"
      "  HostName %h.svc\n"
      "  User bob\n"
      "  IdentityFile ~/.ssh/%r_%h\n"
      "  IdentityFile %d/keys/%u \"/with space/k\"\n"
      "Host *\n"
      "  IdentityFile ~/.ssh/id_default\n");
  HostConfig h = cfg.resolve("w1", tokens());
  CHECK(h.identity_files == std::vector<std::string>{"/home/alice/.ssh/bob_w1.svc", "/home/alice/keys/alice",
                                                     "/with space/k", "/home/alice/.ssh/id_default"});
}

TEST_CASE("ssh_config: UserKnownHostsFile: several files, first line wins, none", "[ssh][config]") {
  auto cfg = parse(
      "Host a\n"
      "  UserKnownHostsFile ~/.ssh/kh_%h /etc/ssh/shared_known_hosts\n"
      "Host *\n"
      "  UserKnownHostsFile /ignored\n"
      "Host b\n"
      "  UserKnownHostsFile none\n");
  CHECK(cfg.resolve("a", tokens()).known_hosts_files ==
        std::vector<std::string>{"/home/alice/.ssh/kh_a", "/etc/ssh/shared_known_hosts"});
  CHECK(cfg.resolve("c", tokens()).known_hosts_files == std::vector<std::string>{"/ignored"});
  CHECK(cfg.resolve("b", tokens()).known_hosts_files == std::vector<std::string>{"/ignored"});
  auto none = parse("UserKnownHostsFile none\n");
  CHECK(none.resolve("x", tokens()).known_hosts_files == std::vector<std::string>{"/dev/null"});
}

TEST_CASE("ssh_config: keywords are case-insensitive, '=' works, comments", "[ssh][config]") {
  auto cfg = parse(
      "# comment\n"
      "\n"
      "HOST=x\n"
      "  port=2200\n"
      "  sTrIcThOsTkEyChEcKiNg = Accept-New\n"
      "  identitiesonly yes\n");
  HostConfig h = cfg.resolve("x", tokens());
  CHECK(h.port == 2200);
  CHECK(h.host_key_policy == HostKeyPolicy::AcceptNew);
  CHECK(h.identities_only == true);
}

TEST_CASE("ssh_config: Match host matches the HostName so far, originalhost the alias", "[ssh][config]") {
  std::vector<std::string> warnings;
  auto cfg = parse(
      "Host a\n"
      "  HostName 10.0.0.1\n"
      "Match host a\n"  // a's HostName is 10.0.0.1 by now: no match
      "  Port 9999\n"
      "Match host 10.0.0.*,!10.0.0.7\n"
      "  User by-address\n"
      "Match originalhost A\n"  // host names compare case-insensitively
      "  Port 2201\n"
      "  User by-alias\n"
      "Match !originalhost a host b\n"  // b has no HostName: the alias is the host
      "  Port 2202\n"
      "Host *\n"
      "  User everyone\n",
      &warnings);
  CHECK(warnings.empty());
  HostConfig a = cfg.resolve("a", tokens());
  CHECK(a.hostname == "10.0.0.1");
  CHECK(a.port == 2201);
  CHECK(a.user == "by-address");  // the first value obtained wins
  HostConfig b = cfg.resolve("b", tokens());
  CHECK(b.port == 2202);
  CHECK(b.user == "everyone");
}

TEST_CASE("ssh_config: Match user sees the User so far, localuser the local one, all applies", "[ssh][config]") {
  auto cfg = parse(
      "Host gpu*\n"
      "  User trainer\n"
      "Match user trainer\n"
      "  IdentityFile ~/.ssh/trainer_key\n"
      "Match user Trainer\n"  // user names compare exactly
      "  Port 9999\n"
      "Match localuser alice,bob\n"
      "  IdentitiesOnly yes\n"
      "Match user alice\n"  // no User for other hosts: the local user
      "  Port 2200\n"
      "Match all\n"
      "  StrictHostKeyChecking accept-new\n");
  HostConfig g = cfg.resolve("gpu1", tokens());
  CHECK(g.user == "trainer");
  CHECK(g.identity_files == std::vector<std::string>{"/home/alice/.ssh/trainer_key"});
  CHECK_FALSE(g.port.has_value());
  CHECK(g.identities_only == true);
  CHECK(g.host_key_policy == HostKeyPolicy::AcceptNew);
  HostConfig o = cfg.resolve("other", tokens());
  CHECK(o.port == 2200);
  CHECK(o.identity_files.empty());
  TokenValues carol = tokens();
  carol.local_user = "carol";
  CHECK_FALSE(cfg.resolve("other", carol).identities_only.has_value());
  // hvdrun's own user flag wins over User, and Match user sees it.
  TokenValues flag = tokens();
  flag.remote_user = "Trainer";
  flag.user_from_flag = true;
  HostConfig f = cfg.resolve("gpu1", flag);
  CHECK(f.port == 9999);
  CHECK(f.identity_files.empty());
}

TEST_CASE("ssh_config: Match exec runs the command with tokens expanded, exit 0 matches", "[ssh][config]") {
  TempDir dir;
  const std::string flag = (dir.path / "flag-node1").string();
  std::ofstream(flag) << "x";
  const std::string count = (dir.path / "runs").string();
  auto cfg = parse("Match exec \"test -f " + dir.path.string() +
                   "/flag-%n\"\n"
                   "  Port 2222\n"
                   "Match originalhost never exec \"echo ran >> " +
                   count +
                   "\"\n"  // not run: the line already failed
                   "  Port 1\n"
                   "Match exec \"echo out; exit 3\"\n"  // stdout goes to /dev/null
                   "  User nobody\n");
  CHECK(cfg.resolve("node1", tokens()).port == 2222);
  CHECK_FALSE(cfg.resolve("node2", tokens()).port.has_value());
  CHECK_FALSE(cfg.resolve("node1", tokens()).user.has_value());
  CHECK_FALSE(fs::exists(count));
  // An unknown token in the command: the line is named.
  auto bad = parse("Match exec \"true %k\"\n  Port 1\n");
  CHECK_THROWS_WITH(bad.resolve("x", tokens()), Catch::Contains("config:1: Match exec") && Catch::Contains("%k"));
}

TEST_CASE("ssh_config: Match exec that hangs is killed after 10 s and does not apply", "[ssh][config]") {
  auto cfg = parse("Match exec \"sleep 60; true\"\n  Port 2222\n");
  const auto t0 = std::chrono::steady_clock::now();
  HostConfig h = cfg.resolve("n", tokens());
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK_FALSE(h.port.has_value());
  REQUIRE(h.unsupported.size() == 1);
  CHECK_THAT(h.unsupported[0], Catch::Contains("config:1: Match exec 'sleep 60; true' did not finish within 10 s"));
  CHECK(took < std::chrono::seconds(15));
}

TEST_CASE("ssh_config: Match final applies in a second pass, after every other line", "[ssh][config]") {
  auto cfg = parse(
      "Match final\n"
      "  User late\n"
      "  Port 2300\n"
      "  IdentityFile ~/.ssh/final_key\n"
      "Match canonical\n"  // hvdrun never canonicalizes: never matches
      "  Port 1\n"
      "Host a\n"
      "  User early\n"
      "  IdentityFile ~/.ssh/a_key\n"
      "Match !final\n"
      "  IdentityFile ~/.ssh/first_pass_key\n");
  HostConfig a = cfg.resolve("a", tokens());
  CHECK(a.user == "early");  // set in the first pass
  CHECK(a.port == 2300);
  CHECK(a.identity_files == std::vector<std::string>{"/home/alice/.ssh/a_key", "/home/alice/.ssh/first_pass_key",
                                                     "/home/alice/.ssh/final_key"});
}

TEST_CASE("ssh_config: Match criteria hvdrun cannot evaluate warn once and skip the block, bad lines fail",
          "[ssh][config]") {
  std::vector<std::string> warnings;
  auto cfg = parse(
      "Host a\n"
      "  Port 2201\n"
      "Match localnetwork 10.0.0.0/8\n"
      "  User from-match\n"
      "  Port 9999\n"
      "Match frobnicate x\n"
      "  User nobody\n"
      "Host *\n"
      "  User everyone\n",
      &warnings);
  REQUIRE(warnings.size() == 2);
  CHECK(warnings[0].rfind("/home/alice/.ssh/config:3: ", 0) == 0);
  CHECK_THAT(warnings[0], Catch::Contains("'localnetwork' is not supported") && Catch::Contains("skipped"));
  CHECK(warnings[1].rfind("/home/alice/.ssh/config:6: ", 0) == 0);
  CHECK_THAT(warnings[1], Catch::Contains("'frobnicate' is not a Match criterion"));
  HostConfig h = cfg.resolve("a", tokens());
  CHECK(h.port == 2201);
  CHECK(h.user == "everyone");
  // Malformed lines: refused with file:line, as OpenSSH refuses them.
  CHECK_THROWS_WITH(parse("Match host\n"), Catch::Contains("config:1: Match: 'host' needs an argument"));
  CHECK_THROWS_WITH(parse("Match\n"), Catch::Contains("config:1: Match: needs at least one criterion"));
  CHECK_THROWS_WITH(parse("Match all host a\n"), Catch::Contains("'all' cannot be combined"));
  CHECK_NOTHROW(parse("Match final all\n  Port 2\n"));
}

TEST_CASE("ssh_config: IdentityAgent - a socket path, $VAR, SSH_AUTH_SOCK, none", "[ssh][config]") {
  ::setenv("HVD_TEST_AGENT_SOCK", "/run/agent.sock", 1);
  ::setenv("SSH_AUTH_SOCK", "/tmp/default.sock", 1);
  auto cfg = parse(
      "Host pw\n"
      "  IdentityAgent ~/.1password/agent-%r.sock\n"
      "Host var\n"
      "  IdentityAgent $HVD_TEST_AGENT_SOCK\n"
      "Host env\n"
      "  IdentityAgent SSH_AUTH_SOCK\n"
      "Host off\n"
      "  IdentityAgent none\n"
      "Host *\n"
      "  User bob\n"
      "  IdentityAgent /never/used\n");
  CHECK(cfg.resolve("pw", tokens()).identity_agent == "/home/alice/.1password/agent-bob.sock");
  CHECK(cfg.resolve("var", tokens()).identity_agent == "/run/agent.sock");
  CHECK(cfg.resolve("env", tokens()).identity_agent == "/tmp/default.sock");
  CHECK(cfg.resolve("off", tokens()).identity_agent == "");
  CHECK(cfg.resolve("other", tokens()).identity_agent == "/never/used");
  CHECK_FALSE(parse("Host x\n").resolve("x", tokens()).identity_agent.has_value());
  CHECK(cfg.resolve("pw", tokens()).unsupported.empty());
  ::unsetenv("HVD_TEST_AGENT_SOCK");
  ::unsetenv("SSH_AUTH_SOCK");
}

TEST_CASE("ssh_config: ConnectTimeout takes OpenSSH's times", "[ssh][config]") {
  CHECK(parse_config_time("10") == std::chrono::seconds(10));
  CHECK(parse_config_time("10s") == std::chrono::seconds(10));
  CHECK(parse_config_time("1m30s") == std::chrono::seconds(90));
  CHECK(parse_config_time("2H") == std::chrono::seconds(7200));
  CHECK(parse_config_time("1w1d") == std::chrono::seconds(8 * 86400));
  CHECK(parse_config_time("0") == std::chrono::seconds(0));
  for (const char* bad : {"", "s", "-1", "1x", "1.5", "99999999999"}) {
    INFO(bad);
    CHECK_FALSE(parse_config_time(bad).has_value());
  }
  auto cfg = parse("Host slow\n  ConnectTimeout 1m\nHost bad\n  ConnectTimeout soon\n");
  HostConfig h = cfg.resolve("slow", tokens());
  CHECK(h.connect_timeout == std::chrono::seconds(60));
  CHECK(h.connect_timeout_where == "/home/alice/.ssh/config:2");
  CHECK(h.unsupported.empty());
  CHECK_FALSE(cfg.resolve("other", tokens()).connect_timeout.has_value());
  CHECK_THROWS_WITH(cfg.resolve("bad", tokens()), Catch::Contains("config:4: ConnectTimeout 'soon' is not a time"));
}

TEST_CASE("ssh_config: HostKeyAlias is taken as written, in lower case", "[ssh][config]") {
  auto cfg = parse("Host pod-*\n  HostKeyAlias Worker-%h\n  HostName 10.0.0.9\n");
  HostConfig h = cfg.resolve("pod-1", tokens());
  CHECK(h.host_key_alias == "worker-%h");  // as OpenSSH: lower-cased, no tokens expanded
  CHECK(h.unsupported.empty());
  CHECK_FALSE(cfg.resolve("other", tokens()).host_key_alias.has_value());
}

TEST_CASE("ssh_config: resolve_lenient passes over values hvdrun cannot use", "[ssh][config]") {
  // The driver address is chosen by routing to the HostName before any
  // connection: a bad Port is the spawner's to report, not a reason to
  // route to the alias.
  auto cfg = parse(
      "Match originalhost n1\n"
      "  Port not-a-port\n"
      "  HostName 10.1.1.1\n"
      "Match exec \"true %k\"\n"
      "  HostName 10.9.9.9\n");
  CHECK_THROWS_WITH(cfg.resolve("n1", tokens()), Catch::Contains("config:2: Port 'not-a-port'"));
  CHECK(cfg.resolve_lenient("n1", tokens()).hostname.value_or("n1") == "10.1.1.1");
  CHECK(cfg.resolve_lenient("n2", tokens()).hostname.value_or("n2") == "n2");  // the bad exec line does not apply
}

TEST_CASE("ssh_config: Match inside an Included file holds together with the including Host", "[ssh][config]") {
  TempDir dir;
  dir.write("conf.d/cluster", "Match originalhost gpu*\n  Port 2222\nHost *\n  User cluster\n");
  auto cfg =
      SshConfig::parse("Host gpu1 cpu1\n  Include conf.d/*\n", "/x/config", "/home/alice", dir.path.string(), nullptr);
  CHECK(cfg.resolve("gpu1", tokens()).port == 2222);
  CHECK(cfg.resolve("gpu1", tokens()).user == "cluster");
  CHECK_FALSE(cfg.resolve("cpu1", tokens()).port.has_value());
  CHECK_FALSE(cfg.resolve("gpu2", tokens()).user.has_value());  // the including Host does not match
}

TEST_CASE("ssh_config: unsupported keywords warn per applying key - cosmetic ones are listed", "[ssh][config]") {
  std::vector<std::string> warnings;
  auto cfg = parse(
      "Host certified\n"
      "  CertificateFile ~/.ssh/id_ed25519-cert.pub\n"
      "  Tunnel yes\n"
      "Host direct\n"
      "  CertificateFile none\n"
      "Host *\n"
      "  ForwardX11 yes\n"
      "  SendEnv LANG LC_*\n"
      "  ServerAliveInterval 30\n"
      "  PubkeyAuthentication yes\n"
      "  FrobnicateHosts yes\n",
      &warnings);
  // Unknown keywords are reported while reading.
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::StartsWith("/home/alice/.ssh/config:11: ") && Catch::Contains("FrobnicateHosts"));
  HostConfig b = cfg.resolve("certified", tokens());
  REQUIRE(b.unsupported.size() == 2);
  CHECK_THAT(b.unsupported[0], Catch::StartsWith("/home/alice/.ssh/config:2: CertificateFile is not supported"));
  CHECK_THAT(b.unsupported[1], Catch::StartsWith("/home/alice/.ssh/config:3: Tunnel is not supported"));
  CHECK(b.ignored.size() == 4);
  HostConfig d = cfg.resolve("direct", tokens());
  CHECK(d.unsupported.empty());  // "CertificateFile none" asks for nothing
  HostConfig o = cfg.resolve("other", tokens());
  CHECK(o.unsupported.empty());
  CHECK(o.ignored.size() == 4);
}

TEST_CASE("ssh_config: ProxyJump hops - user, host, port, ssh:// and IPv6 forms", "[ssh][config]") {
  std::string why;
  auto j = parse_jump_host("bastion", &why);
  REQUIRE(j);
  CHECK((j->user.empty() && j->host == "bastion" && j->port == 0));
  j = parse_jump_host("ops@bastion.example:2200", &why);
  REQUIRE(j);
  CHECK((j->user == "ops" && j->host == "bastion.example" && j->port == 2200));
  j = parse_jump_host("ssh://ops@[2001:db8::1]:22", &why);
  REQUIRE(j);
  CHECK((j->user == "ops" && j->host == "2001:db8::1" && j->port == 22));
  j = parse_jump_host("[2001:db8::2]", &why);
  REQUIRE(j);
  CHECK((j->host == "2001:db8::2" && j->port == 0));
  j = parse_jump_host("a@b@host", &why);  // the last '@' separates, as OpenSSH
  REQUIRE(j);
  CHECK((j->user == "a@b" && j->host == "host"));
  for (const char* bad : {"", "@host", "host:", "host:0", "host:65536", "host:22x", "2001:db8::1", "[::1", "[::1]x",
                          "us er@host", "ssh://"}) {
    INFO(bad);
    CHECK_FALSE(parse_jump_host(bad, &why));
    CHECK_FALSE(why.empty());
  }
}

TEST_CASE("ssh_config: ProxyJump resolves to hops, outermost first, and competes with ProxyCommand", "[ssh][config]") {
  auto cfg = parse(
      "Host inner-*\n"
      "  ProxyJump ops@gate1,gate2:2222\n"
      "  ProxyCommand nc %h %p\n"
      "Host cmd-*\n"
      "  ProxyCommand ssh -W %h:%p -l %r \"jump host\" # %n\n"
      "  ProxyJump ignored\n"
      "  HostName 10.0.0.%n\n"
      "Host none-*\n"
      "  ProxyJump none\n"
      "Host *\n"
      "  ProxyJump default-gate\n"
      "  User bob\n");
  HostConfig a = cfg.resolve("inner-1", tokens());
  REQUIRE(a.proxy_jump.size() == 2);
  CHECK((a.proxy_jump[0].user == "ops" && a.proxy_jump[0].host == "gate1" && a.proxy_jump[0].port == 0));
  CHECK((a.proxy_jump[1].user.empty() && a.proxy_jump[1].host == "gate2" && a.proxy_jump[1].port == 2222));
  CHECK_FALSE(a.proxy_command);  // ProxyJump came first
  CHECK(a.proxy_where == "/home/alice/.ssh/config:2");
  CHECK(a.unsupported.empty());
  // The command is the rest of the line as written, tokens expanded with the
  // final HostName and User.
  HostConfig c = cfg.resolve("cmd-7", tokens());
  REQUIRE(c.proxy_command);
  CHECK(*c.proxy_command == "ssh -W 10.0.0.cmd-7:22 -l bob \"jump host\" # cmd-7");
  CHECK(c.proxy_jump.empty());
  // none: a direct connection, and later lines do not bring a proxy back.
  HostConfig n = cfg.resolve("none-1", tokens());
  CHECK((n.proxy_jump.empty() && !n.proxy_command));
  HostConfig d = cfg.resolve("other", tokens());
  REQUIRE(d.proxy_jump.size() == 1);
  CHECK(d.proxy_jump[0].host == "default-gate");
}

TEST_CASE("ssh_config: AddressFamily, BindAddress, ConnectionAttempts", "[ssh][config]") {
  auto cfg = parse(
      "Host v4\n  AddressFamily inet\n  BindAddress 10.0.0.5\n  ConnectionAttempts 4\n"
      "Host v6\n  AddressFamily INET6\n  BindAddress fd00::5\n  BindInterface eth7\n"
      "Host if\n  BindInterface eth7\n"
      "Host *\n  AddressFamily any\n");
  HostConfig a = cfg.resolve("v4", tokens());
  CHECK(a.address_family == AF_INET);
  CHECK(a.bind_address == "10.0.0.5");
  CHECK(a.connection_attempts == 4);
  CHECK(a.unsupported.empty());
  HostConfig b = cfg.resolve("v6", tokens());
  CHECK(b.address_family == AF_INET6);
  CHECK(b.bind_address == "fd00::5");
  CHECK_FALSE(b.connection_attempts.has_value());
  CHECK(b.bind_interface == "eth7");  // read; BindAddress wins in the spawner, as in OpenSSH
  HostConfig i = cfg.resolve("if", tokens());
  CHECK((i.bind_interface == "eth7" && !i.bind_address && i.bind_interface_where == "/home/alice/.ssh/config:10"));
  CHECK(cfg.resolve("other", tokens()).address_family == AF_UNSPEC);
  CHECK_THROWS_WITH(parse("Host x\n  AddressFamily ipx\n").resolve("x", tokens()),
                    Catch::Contains("config:2: AddressFamily 'ipx' must be any, inet or inet6"));
  CHECK_THROWS_WITH(parse("Host x\n  BindAddress eth0.example\n").resolve("x", tokens()),
                    Catch::Contains("config:2: BindAddress 'eth0.example' must be an IPv4 or IPv6 address"));
  CHECK_THROWS_WITH(parse("Host x\n  ConnectionAttempts 0\n").resolve("x", tokens()),
                    Catch::Contains("config:2: ConnectionAttempts '0' must be a number of attempts"));
}

TEST_CASE("ssh_config: ProxyJump and ProxyCommand errors name file:line", "[ssh][config]") {
  CHECK_THROWS_WITH(parse("Host x\n  ProxyJump gate1,:22\n").resolve("x", tokens()),
                    Catch::Contains("config:2: ProxyJump ':22': no host"));
  CHECK_THROWS_WITH(parse("Host x\n  ProxyJump gate1 gate2\n").resolve("x", tokens()),
                    Catch::Contains("config:2: ProxyJump takes one comma-separated list"));
  CHECK_THROWS_WITH(parse("Host x\n  ProxyCommand nc %h %q\n").resolve("x", tokens()),
                    Catch::Contains("config:2: ProxyCommand") && Catch::Contains("%q"));
  CHECK_THROWS_WITH(parse("Host x\n  ProxyCommand\n").resolve("x", tokens()),
                    Catch::Contains("config:2: ProxyCommand needs a value"));
}

TEST_CASE("ssh_config: IgnoreUnknown silences the named unknown keywords", "[ssh][config]") {
  std::vector<std::string> warnings;
  parse("IgnoreUnknown UseKeychainX,Foo*\nUseKeychainX yes\nFooBar 1\nBaz 2\n", &warnings);
  REQUIRE(warnings.size() == 1);
  CHECK_THAT(warnings[0], Catch::Contains(":4:") && Catch::Contains("Baz"));
}

TEST_CASE("ssh_config: invalid values of implemented keys are errors naming file:line", "[ssh][config]") {
  CHECK_THROWS_WITH(parse("Port abc\n").resolve("h", tokens()),
                    Catch::StartsWith("/home/alice/.ssh/config:1: Port 'abc' is not a port number"));
  CHECK_THROWS_WITH(parse("Host h\n Port 70000\n").resolve("h", tokens()), Catch::Contains("config:2: Port"));
  CHECK_NOTHROW(parse("Host h\n Port 70000\n").resolve("other", tokens()));  // only applying lines count
  CHECK_THROWS_WITH(parse("StrictHostKeyChecking maybe\n").resolve("h", tokens()),
                    Catch::Contains("config:1: StrictHostKeyChecking 'maybe'"));
  CHECK_THROWS_WITH(parse("User\n").resolve("h", tokens()), Catch::Contains("config:1: User needs a value"));
  CHECK_THROWS_WITH(parse("IdentityFile ~/%Z\n").resolve("h", tokens()), Catch::Contains("config:1: IdentityFile"));
  CHECK_THROWS_WITH(parse("Host\n"), Catch::Contains("config:1: Host needs"));
  CHECK_THROWS_WITH(parse("\nUser \"bob\n"), Catch::Contains("config:2: unterminated quote"));
}

TEST_CASE("ssh_config: load reads the user file, then the system file", "[ssh][config]") {
  TempDir d;
  d.write("home/.ssh/config", "Host w*\n  Port 2222\n");
  d.write("etc/ssh_config", "Host *\n  Port 22\n  User sysuser\n  StrictHostKeyChecking yes\n");
  std::vector<std::string> warnings;
  auto cfg = SshConfig::load(
      {(d.path / "home/.ssh/config").string(), (d.path / "etc/ssh_config").string(), (d.path / "missing").string()},
      (d.path / "home").string(), &warnings);
  CHECK(warnings.empty());
  HostConfig h = cfg.resolve("w1", tokens());
  CHECK(h.port == 2222);
  CHECK(h.user == "sysuser");
  CHECK(h.host_key_policy == HostKeyPolicy::Yes);
  CHECK(h.host_key_policy_where == (d.path / "etc/ssh_config").string() + ":4");
  CHECK(cfg.resolve("db", tokens()).port == 22);
}

TEST_CASE("ssh_config: Include: relative, glob, inside a Host block, nested Host", "[ssh][config]") {
  TempDir d;
  const std::string home = (d.path / "home").string();
  d.write("home/.ssh/config",
          "Include conf.d/*.conf\n"
          "Host gpu*\n"
          "  Include ~/.ssh/gpu.inc\n"
          "Host *\n"
          "  User fallback\n");
  d.write("home/.ssh/conf.d/10-a.conf", "Host a\n  Port 2001\n");
  d.write("home/.ssh/conf.d/20-b.conf", "Host a b\n  Port 2002\n  User bee\n");
  d.write("home/.ssh/conf.d/ignored.txt", "Port 1\n");
  // Lines of an included file before its own Host line keep the outer block's
  // condition; its Host lines narrow it further.
  d.write("home/.ssh/gpu.inc", "IdentityFile ~/.ssh/gpu_key\nHost gpu2\n  User gpu2user\n");
  std::vector<std::string> warnings;
  auto cfg = SshConfig::load({home + "/.ssh/config"}, home, &warnings);
  CHECK(warnings.empty());
  CHECK(cfg.resolve("a", tokens()).port == 2001);
  CHECK(cfg.resolve("a", tokens()).user == "bee");
  CHECK(cfg.resolve("b", tokens()).port == 2002);
  CHECK_FALSE(cfg.resolve("c", tokens()).port);
  TokenValues t = tokens();
  t.home = home;
  HostConfig g1 = cfg.resolve("gpu1", t);
  CHECK(g1.identity_files == std::vector<std::string>{home + "/.ssh/gpu_key"});
  CHECK(g1.user == "fallback");
  HostConfig g2 = cfg.resolve("gpu2", t);
  CHECK(g2.user == "gpu2user");
  CHECK(cfg.resolve("cpu2", t).identity_files.empty());  // the outer Host gpu* condition still holds
  CHECK(cfg.resolve("cpu2", t).user == "fallback");
}

TEST_CASE("ssh_config: an Include loop stops at the depth limit with an error", "[ssh][config]") {
  TempDir d;
  d.write("loop.conf", "Include loop.conf\n");
  std::vector<std::string> warnings;
  CHECK_THROWS_WITH(SshConfig::load({(d.path / "loop.conf").string()}, "/h", &warnings),
                    Catch::Contains("Include nested more than"));
}

TEST_CASE("ssh_config: the system file's relative Includes are under its own directory", "[ssh][config]") {
  TempDir d;
  d.write("etc/ssh_config", "Include ssh_config.d/*.conf\n");
  d.write("etc/ssh_config.d/k8s.conf", "Host *\n  StrictHostKeyChecking no\n");
  auto cfg = SshConfig::load({(d.path / "etc/ssh_config").string()}, "/h", nullptr);
  CHECK(cfg.resolve("x", tokens()).host_key_policy == HostKeyPolicy::No);
}

TEST_CASE("ssh_config: algorithm lists are taken (first value wins), marked by where they come from",
          "[ssh][config]") {
  TempDir d;
  const std::string home = (d.path / "home").string();
  d.write("home/.ssh/config", "Host strict\n  Ciphers aes256-gcm@openssh.com\n  Ciphers aes128-ctr\n");
  d.write("etc/crypto.config", "Ciphers aes128-ctr\nMACs hmac-sha2-256\nGSSAPIKexAlgorithms gss-curve25519-sha256-\n"
                               "PubkeyAcceptedAlgorithms ssh-ed25519\n");
  d.write("etc/ssh_config", "Include " + (d.path / "etc/crypto.config").string() + "\n");
  std::vector<std::string> warnings;
  auto cfg = SshConfig::load({home + "/.ssh/config", (d.path / "etc/ssh_config").string()}, home, &warnings);
  CHECK(warnings.empty());  // GSSAPIKexAlgorithms is known (and cosmetic)
  TokenValues t = tokens();
  t.home = home;
  HostConfig strict = cfg.resolve("strict", t);
  CAPTURE(strict.unsupported, strict.ignored);
  CHECK(strict.unsupported.empty());
  REQUIRE(strict.algorithms.count("ciphers") == 1);
  CHECK(strict.algorithms.at("ciphers").value == "aes256-gcm@openssh.com");
  CHECK(strict.algorithms.at("ciphers").keyword == "Ciphers");
  CHECK(strict.algorithms.at("ciphers").user_file);
  CHECK_THAT(strict.algorithms.at("ciphers").where, Catch::EndsWith("home/.ssh/config:2"));
  REQUIRE(strict.algorithms.count("macs") == 1);
  CHECK_FALSE(strict.algorithms.at("macs").user_file);
  HostConfig other = cfg.resolve("other", t);
  CHECK(other.unsupported.empty());
  CHECK(other.algorithms.at("ciphers").value == "aes128-ctr");
  CHECK_FALSE(other.algorithms.at("ciphers").user_file);
  // Not implemented (libssh2 1.10 has no choice of signature algorithm):
  // from a system file, listed under --verbose only.
  REQUIRE(other.ignored.size() == 2);
  CHECK_THAT(other.ignored[1], Catch::Contains("PubkeyAcceptedAlgorithms ignored (a system-wide algorithm policy"));
}

TEST_CASE("ssh_config: an algorithm list with blanks is refused as OpenSSH refuses it", "[ssh][config]") {
  auto cfg = parse("Host *\n  KexAlgorithms curve25519-sha256, ecdh-sha2-nistp256\n");
  CHECK_THROWS_WITH(cfg.resolve("x", tokens()),
                    Catch::Contains("config:2: KexAlgorithms takes one comma-separated list (no blanks), not 2 words"));
}

TEST_CASE("ssh_config: GlobalKnownHostsFile: several files, ~ and tokens, none", "[ssh][config]") {
  auto cfg = parse(
      "Host a\n  GlobalKnownHostsFile /etc/ssh/ssh_known_hosts ~/.ssh/site_%h\n"
      "Host b\n  GlobalKnownHostsFile none\n"
      "Host a b\n  GlobalKnownHostsFile /never\n");
  HostConfig a = cfg.resolve("a", tokens());
  REQUIRE(a.global_known_hosts_files);
  CHECK(*a.global_known_hosts_files == std::vector<std::string>{"/etc/ssh/ssh_known_hosts", "/home/alice/.ssh/site_a"});
  CHECK(a.unsupported.empty());
  HostConfig b = cfg.resolve("b", tokens());
  REQUIRE(b.global_known_hosts_files);
  CHECK(b.global_known_hosts_files->empty());
  CHECK_FALSE(cfg.resolve("c", tokens()).global_known_hosts_files);
}
