// choose_host_source (discovery/choose.h): which HostSource a job gets from
// its flags and an Environment, with no process started and no platform on
// the machine that runs the test (an empty Environment).
#include <catch2/catch.hpp>

#include "../test_util.h"
#include "hvd/launcher/discovery/choose.h"
#include "hvd/launcher/spawn/srun/srun_launch.h"

using namespace hvd::launcher;
using hvd_test::hosts_text;
using hvd_test::invalid_message;

namespace {

Options job(int np) {
  Options o;
  o.num_proc = np;
  o.command = {"true"};
  return o;
}

}  // namespace

TEST_CASE("choose: a static job's fixed list is -H, else the hostfile, else localhost:np", "[choose]") {
  Options o = job(3);
  auto local = choose_host_source(o, Environment{});
  CHECK(local.source->describe() == "fixed host list");
  CHECK(hosts_text(local) == "localhost:3");
  CHECK_FALSE(local.platform);
  CHECK(local.info.empty());

  hvd_test::TempFile hostfile("# two nodes\nn1 slots=2\nn2 slots=1\n");
  o.hostfile = hostfile.path();
  CHECK(hosts_text(choose_host_source(o, Environment{})) == "n1:2,n2:1");
  // Both set (the command line refuses that; another layer could): -H
  // wins, as horovodrun reads the hostfile only when no -H is given.
  o.hosts = "a:1,[::1]:2";
  CHECK(hosts_text(choose_host_source(o, Environment{})) == "a:1,[::1]:2");
}

TEST_CASE("choose: malformed hosts are one-line usage errors when the source is chosen", "[choose]") {
  Options o = job(2);
  o.hosts = "a:x";
  CHECK(invalid_message([&] { choose_host_source(o, Environment{}); }) == "'a:x': slot count 'x' is not a number");
  o.hosts.clear();
  o.hostfile = "/nonexistent/hvd.hosts";
  CHECK(invalid_message([&] { choose_host_source(o, Environment{}); }) ==
        "cannot read hostfile '/nonexistent/hvd.hosts': No such file or directory");
}

TEST_CASE("choose: elastic jobs get the script, or the fixed list with one line saying so", "[choose]") {
  Options script = job(2);
  script.elastic.enabled = true;
  script.elastic.host_discovery_script = "./discover.sh";
  auto s = choose_host_source(script, Environment{});
  CHECK(s.source->describe() == "host discovery script './discover.sh'");
  CHECK(s.info.empty());

  Options fixed = job(2);
  fixed.elastic.enabled = true;
  fixed.elastic.min_np = 1;
  fixed.hosts = "a:1,b:1";
  auto f = choose_host_source(fixed, Environment{});
  CHECK(hosts_text(f) == "a:1,b:1");
  REQUIRE(f.info.size() == 1);
  CHECK(f.info.front() ==
        "elastic job on fixed hosts a:1, b:1: failed workers are restarted, failing hosts blacklisted");
}

TEST_CASE("choose: Kubernetes credentials come from the Environment, not the process", "[choose]") {
  Options o = job(2);
  o.elastic.enabled = true;
  o.elastic.kubernetes.selector = "app=x";
  // No KUBECONFIG, no HOME, no service account in this Environment: one
  // usage error, whatever the machine running the test has.
  const Environment bare{"", {{"HVDRUN_KUBERNETES_SERVICEACCOUNT_DIR", "/nonexistent"}}, std::nullopt};
  CHECK_THROWS_AS(choose_host_source(o, bare), hvd::InvalidArgument);
}

TEST_CASE("choose: the one explicit_host_flag names what keeps a platform out", "[choose]") {
  Options o = job(1);
  CHECK(explicit_host_flag(o).empty());
  o.elastic.kubernetes.selector = "app=x";
  CHECK(explicit_host_flag(o) == "--kubernetes-selector");
  o.elastic.host_discovery_script = "./d.sh";
  CHECK(explicit_host_flag(o) == "--host-discovery-script");
  o.hostfile = "f";
  CHECK(explicit_host_flag(o) == "--hostfile");
  o.hosts = "a";
  CHECK(explicit_host_flag(o) == "-H/--hosts");
}

TEST_CASE("choose: --launcher auto starts an allocation's nodes through srun, srun needs an allocation",
          "[choose]") {
  // Outside Slurm: ssh, nothing said.
  Options o = job(2);
  o.hosts = "node1:1,node2:1";
  auto outside = choose_host_source(o, Environment{});
  CHECK(outside.options.launcher == "ssh");
  CHECK(outside.options.srun_nodes.empty());
  CHECK(outside.info.empty());
  // Inside an allocation: its nodes through srun, whatever names the hosts.
  Environment slurm{"", {{"SLURM_JOB_ID", "7"}, {"SLURM_JOB_NODELIST", "node[1-3]"}}, std::nullopt};
  auto inside = choose_host_source(o, slurm);
  CHECK(inside.options.launcher == "ssh");  // for hosts outside the allocation
  CHECK(inside.options.srun_nodes == std::vector<std::string>{"node1", "node2", "node3"});
  REQUIRE(inside.info.size() == 1);
  CHECK(inside.info.front().rfind("workers on the nodes of Slurm job 7 start through srun --overlap", 0) == 0);
  // --launcher ssh keeps SSH everywhere; srun starts every other host.
  o.launcher = "ssh";
  CHECK(choose_host_source(o, slurm).options.srun_nodes.empty());
  o.launcher = "srun";
  CHECK(choose_host_source(o, slurm).options.launcher == "srun");
  CHECK(invalid_message([&] { choose_host_source(o, Environment{}); }) ==
        "--launcher srun needs a Slurm allocation (SLURM_JOB_ID is not set): run hvdrun inside sbatch, salloc or "
        "srun, or use --launcher ssh");
}

TEST_CASE("srun: an agent is one overlapping task on its node, no PMI, its frames unbuffered", "[choose]") {
  CHECK(srun_agent_command("node2", {"/opt/hvd/bin/hvdrun-agent"}) ==
        std::vector<std::string>{"srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=node2", "--mpi=none",
                                 "--quiet", "--unbuffered", "--job-name=hvdrun-agent", "/opt/hvd/bin/hvdrun-agent"});
}
