// Every --dry-run is rendered from a DryRunReport in one place
// (job/dry_run_report.cpp): the platform block goes with any body, the
// elastic look and the OCI WORKER's registration as they always printed.
#include "hvd/launcher/job/dry_run_report.h"
#include "hvd/launcher/process/report.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "../fakes/scripted_host_source.h"
#include "../test_util.h"

#include <cstdlib>
#include <optional>

using namespace hvd::launcher;

namespace {

platform::PlatformDescription slurm() {
  platform::PlatformDescription p;
  p.name = "slurm";
  p.hosts = {{"n1", 1}, {"n2", 1}};
  p.this_host = "n1";
  p.leader = "n1";
  p.evidence = {"SLURM_JOB_ID=1"};
  return p;
}

ElasticLook look() {
  fakes::ScriptedHostSource source({{"h1", 2}, {"h2", 1}});
  return look_once(source, 4);
}

}  // namespace

TEST_CASE("dry run report: an elastic look, in text and JSON", "[dry_run]") {
  DryRunReport r;
  r.elastic = look();
  CHECK(render_dry_run_report(r, DryRunFormat::Text) ==
        "# elastic job: hosts from scripted hosts\n"
        "hosts: h1:2, h2:1\n"
        "slots: 3 (-np 4: not enough yet, the job would wait)\n");
  const auto j = nlohmann::json::parse(render_dry_run_report(r, DryRunFormat::Json));
  CHECK(j["source"] == "scripted hosts");
  CHECK(j["hosts"] == nlohmann::json::array({"h1:2", "h2:1"}));
  CHECK(j["slots"] == 3);
  CHECK(j["np"] == 4);
  CHECK(j["pods"].empty());
  CHECK_FALSE(j.contains("platform"));
}

TEST_CASE("dry run report: a failed look is exit 3 with the source's reason", "[dry_run]") {
  fakes::ScriptedHostSource source({});
  source.set_error("discovery script exited with code 1");
  try {
    look_once(source, 1);
    FAIL("a failed look was not an error");
  } catch (const JobError& e) {
    CHECK(e.code() == exit_code::kLaunch);
    CHECK(std::string(e.what()) == "discovery script exited with code 1");
  }
}

TEST_CASE("dry run report: the platform block goes with every body, first in text, an object in JSON", "[dry_run]") {
  const auto p = slurm();
  DryRunReport elastic;
  elastic.platform = &p;
  elastic.elastic = look();
  const std::string text = render_dry_run_report(elastic, DryRunFormat::Text);
  CHECK(text.rfind(platform::render_platform(p), 0) == 0);
  CHECK(text.find("# elastic job: hosts from scripted hosts\n") != std::string::npos);
  auto j = nlohmann::json::parse(render_dry_run_report(elastic, DryRunFormat::Json));
  CHECK(j["platform"]["name"] == "slurm");
  CHECK(j["slots"] == 3);
  DryRunReport mpirun;
  mpirun.platform = &p;
  mpirun.mpirun = "{\"command\": [\"mpirun\"]}\n";
  j = nlohmann::json::parse(render_dry_run_report(mpirun, DryRunFormat::Json));
  CHECK(j["command"] == nlohmann::json::array({"mpirun"}));
  CHECK(j["platform"]["leader"] == "n1");
  DryRunReport alone;
  alone.platform = &p;
  j = nlohmann::json::parse(render_dry_run_report(alone, DryRunFormat::Json));
  CHECK(j.size() == 1);
  CHECK(j["platform"]["this_host"] == "n1");
  CHECK(render_dry_run_report(alone, DryRunFormat::Text) == platform::render_platform(p));
}

TEST_CASE("dry run report: an OCI WORKER's registration", "[dry_run]") {
  DryRunReport r;
  r.oci_header = "platform: oci\n";
  r.oci_worker = OciWorkerDryRun{"10.0.0.5", 2, "/work/x"};
  CHECK(render_dry_run_report(r, DryRunFormat::Text) == "platform: oci\nwould register 10.0.0.5:2 in /work/x\n");
  CHECK(
      render_dry_run_report(r, DryRunFormat::Json) ==
      "{\"platform\": \"oci\", \"mode\": \"WORKER\", \"address\": \"10.0.0.5\", \"slots\": 2, \"dir\": \"/work/x\"}\n");
  r.oci_worker->dir = "/work/a \"quoted\" dir";  // escaped, so the line stays JSON
  CHECK(nlohmann::json::parse(render_dry_run_report(r, DryRunFormat::Json))["dir"] == "/work/a \"quoted\" dir");
}

namespace {

HostReach ssh_host(const std::string& name, const std::string& home) {
  HostReach h;
  h.host = name;
  h.kind = HostReach::Kind::Ssh;
  ssh::SessionOptions o;
  o.host = name;
  o.hostname = "198.18.1.7";
  o.user = "trainer";
  o.port = 2222;
  o.home = home;
  o.known_hosts_files = {home + "/.ssh/known_hosts"};
  ssh::SessionOptions hop;
  hop.host = "bastion";
  hop.hostname = "198.18.0.1";
  hop.user = "admin";
  hop.port = 22;
  o.jump_hosts = {hop};
  o.proxy_where = "~/.ssh/config:4";
  h.ssh = SshRoute{name, o, ""};
  return h;
}

struct UnsetAgent {
  UnsetAgent() {
    if (const char* v = std::getenv("SSH_AUTH_SOCK")) saved = v;
    ::unsetenv("SSH_AUTH_SOCK");
  }
  ~UnsetAgent() {
    if (saved) ::setenv("SSH_AUTH_SOCK", saved->c_str(), 1);
  }
  std::optional<std::string> saved;
};

}  // namespace

TEST_CASE("dry run report: how hosts are reached, in text and JSON", "[dry_run]") {
  hvd_test::TempDir home;
  home.write(".ssh/id_ed25519", "not a key: only its existence is shown");
  UnsetAgent no_agent;
  HostReach local;
  local.host = "localhost";
  HostReach node;
  node.host = "node-3";
  node.kind = HostReach::Kind::Srun;
  HostReach bad;
  bad.host = "badport";
  bad.kind = HostReach::Kind::Ssh;
  bad.ssh = SshRoute{"badport", std::nullopt, "badport: ~/.ssh/config:9: Port 'x' is not a port number (1-65535)"};

  DryRunReport r;
  r.reach = std::vector<HostReach>{local};
  CHECK(render_dry_run_report(r, DryRunFormat::Text).empty());  // every host is this machine: nothing to say

  r.reach = std::vector<HostReach>{local, ssh_host("w1", home.path()), node, bad};
  CHECK(render_dry_run_report(r, DryRunFormat::Text) ==
        "\nhow each host would be reached (nothing is connected):\n"
        "  localhost: this machine\n"
        "  w1: ssh trainer@198.18.1.7 port 2222\n"
        "    through ProxyJump (~/.ssh/config:4), outermost first:\n"
        "      bastion: ssh admin@198.18.0.1 port 22\n"
        "    keys: ~/.ssh/id_ed25519\n"
        "    host key: StrictHostKeyChecking accept-new (hvdrun's default); known_hosts ~/.ssh/known_hosts\n"
        "  node-3: srun --overlap (a node of this Slurm allocation)\n"
        "  badport: cannot be reached: ~/.ssh/config:9: Port 'x' is not a port number (1-65535)\n");

  const auto j = nlohmann::json::parse(render_dry_run_report(r, DryRunFormat::Json));
  REQUIRE(j["reached"].size() == 4);
  CHECK(j["reached"][0] == nlohmann::json({{"host", "localhost"}, {"via", "local"}}));
  const auto& w1 = j["reached"][1];
  CHECK(w1["via"] == "ssh");
  CHECK(w1["user"] == "trainer");
  CHECK(w1["hostname"] == "198.18.1.7");
  CHECK(w1["port"] == 2222);
  CHECK(w1["proxy"]["kind"] == "ProxyJump");
  CHECK(w1["proxy"]["where"] == "~/.ssh/config:4");
  CHECK(w1["proxy"]["hops"][0]["hostname"] == "198.18.0.1");
  CHECK(w1["proxy"]["hops"][0]["user"] == "admin");
  CHECK(w1["host_key_policy"] == "accept-new");
  CHECK(j["reached"][2]["via"] == "srun");
  CHECK(j["reached"][3]["error"] == bad.ssh->error);
}

TEST_CASE("dry run report: the keys line follows the agent, IdentitiesOnly and -i", "[dry_run]") {
  hvd_test::TempDir home;
  const std::string key = home.write(".ssh/work", "k");
  const std::string sock = home.write("agent.sock", "");  // the path's existence is what is shown
  UnsetAgent restore;
  auto keys_of = [&](const HostReach& h) {
    DryRunReport r;
    r.reach = std::vector<HostReach>{h};
    const std::string text = render_dry_run_report(r, DryRunFormat::Text);
    const auto at = text.find("keys: ");
    REQUIRE(at != std::string::npos);
    return text.substr(at + 6, text.find('\n', at) - at - 6);
  };
  HostReach h = ssh_host("w1", home.path());
  ssh::SessionOptions& o = *h.ssh->options;
  CHECK(keys_of(h) == "no default key file (~/.ssh/id_ed25519, id_ecdsa, id_rsa)");
  ::setenv("SSH_AUTH_SOCK", sock.c_str(), 1);
  CHECK(keys_of(h) == "ssh-agent ($SSH_AUTH_SOCK) (its copies of the files first, then its other keys), then no "
                      "default key file (~/.ssh/id_ed25519, id_ecdsa, id_rsa)");
  o.identity_files = {key, home.path() + "/.ssh/gone"};
  CHECK(keys_of(h) == "ssh-agent ($SSH_AUTH_SOCK) (its copies of the files first, then its other keys), then "
                      "IdentityFile ~/.ssh/work, ~/.ssh/gone (missing)");
  o.identities_only = true;
  CHECK(keys_of(h) == "IdentityFile ~/.ssh/work, ~/.ssh/gone (missing), only those (IdentitiesOnly); through "
                      "ssh-agent ($SSH_AUTH_SOCK) when it holds them");
  o.identity_agent = "";  // IdentityAgent none
  CHECK(keys_of(h) == "IdentityFile ~/.ssh/work, ~/.ssh/gone (missing), only those (IdentitiesOnly)");
  o.identity_agent.reset();
  ::setenv("SSH_AUTH_SOCK", "/nonexistent/agent", 1);
  CHECK(keys_of(h) == "IdentityFile ~/.ssh/work, ~/.ssh/gone (missing), only those (IdentitiesOnly) (no ssh-agent: "
                      "$SSH_AUTH_SOCK /nonexistent/agent does not exist)");
  o.identity_file = key;
  CHECK(keys_of(h) == "-i ~/.ssh/work, only that key (no ssh-agent: $SSH_AUTH_SOCK /nonexistent/agent does not exist)");
}
