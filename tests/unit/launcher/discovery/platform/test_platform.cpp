// Platform host sources (discovery/platform/): each detector over fixture
// directories written here and environments given as maps, Slurm's host
// list grammar, and how --hosts-from merges a platform into the Options (choose_host_source).
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "../../test_util.h"
#include "../../fakes/fake_machine.h"
#include "hvd/launcher/discovery/choose.h"
#include "hvd/launcher/discovery/platform/platform.h"
#include "hvd/launcher/plan/plan.h"

using namespace hvd::launcher;
using namespace hvd::launcher::platform;
using hvd_test::hosts_text;
using hvd_test::invalid_message;
namespace fs = std::filesystem;
using Strings = std::vector<std::string>;

namespace {

/// A fixture root with files written under it.
using FakeRoot = hvd::launcher::fakes::FakeMachine;

const char* kResourceConfig = "/opt/ml/input/config/resourceconfig.json";
const char* kHyperparameters = "/opt/ml/input/config/hyperparameters.json";

Options with_hosts_from(const std::string& from) {
  Options o;
  o.hosts_from = from;
  o.num_proc = 1;
  o.command = {"true"};
  return o;
}

}  // namespace

TEST_CASE("platform sagemaker: absent without resourceconfig.json and SM_* variables", "[platform]") {
  FakeRoot root;
  CHECK_FALSE(detect_sagemaker(root.context()).has_value());
  CHECK_FALSE(detect_sagemaker(root.context({{"SM_NUM_GPUS", "4"}})).has_value());
}

TEST_CASE("platform sagemaker: resourceconfig.json gives hosts sorted the leader this host and the interface",
          "[platform]") {
  FakeRoot root;
  root.write(kResourceConfig,
             R"({"current_host": "algo-2", "current_instance_type": "ml.p3.16xlarge",
                 "hosts": ["algo-3", "algo-1", "algo-2"], "network_interface_name": "eth0"})");
  root.write(kHyperparameters, R"({"sagemaker_mpi_num_of_processes_per_host": "2",
                                   "sagemaker_mpi_custom_mpi_options": "\"-verbose --NCCL_DEBUG=INFO\"",
                                   "sagemaker_mpi_enabled": "true"})");
  auto p = detect_sagemaker(root.context({{"SM_NUM_GPUS", "8"}}));
  REQUIRE(p);
  CHECK(p->name == "sagemaker");
  CHECK(p->hosts == std::vector<HostSpec>{{"algo-1", 2}, {"algo-2", 2}, {"algo-3", 2}});
  CHECK(p->this_host == "algo-2");
  CHECK(p->leader == "algo-1");
  CHECK_FALSE(p->launches_here());
  REQUIRE(p->interface);
  CHECK(*p->interface == "eth0");
  REQUIRE(p->custom_mpi_options);
  CHECK(*p->custom_mpi_options == "-verbose --NCCL_DEBUG=INFO");
  CHECK(p->evidence == Strings{kResourceConfig, kHyperparameters});
}

TEST_CASE("platform sagemaker: SAGEMAKER_BASE_DIR moves the files", "[platform]") {
  FakeRoot root;
  root.write("/custom/input/config/resourceconfig.json", R"({"current_host": "algo-1", "hosts": ["algo-1"]})");
  root.write(kResourceConfig, R"({"current_host": "other", "hosts": ["other"]})");
  auto p = detect_sagemaker(root.context({{"SAGEMAKER_BASE_DIR", "/custom"}}));
  REQUIRE(p);
  CHECK(p->hosts == std::vector<HostSpec>{{"algo-1", 1}});
  CHECK(p->launches_here());
  CHECK_FALSE(p->interface);
}

TEST_CASE("platform sagemaker: slots from the hyperparameter else SM_NUM_GPUS (0 means 1) else 1", "[platform]") {
  FakeRoot root;
  root.write(kResourceConfig, R"({"current_host": "algo-1", "hosts": ["algo-1", "algo-2"]})");
  CHECK(detect_sagemaker(root.context())->hosts.front().slots == 1);
  CHECK(detect_sagemaker(root.context({{"SM_NUM_GPUS", "4"}}))->hosts.back().slots == 4);
  CHECK(detect_sagemaker(root.context({{"SM_NUM_GPUS", "0"}}))->hosts.back().slots == 1);
  CHECK(invalid_message([&] {
          detect_sagemaker(root.context({{"SM_NUM_GPUS", "four"}}));
        }) == "SM_NUM_GPUS='four' is not a whole number >= 0");
  root.write(kHyperparameters, R"({"sagemaker_mpi_num_of_processes_per_host": 3})");  // not JSON-encoded: accepted
  CHECK(detect_sagemaker(root.context({{"SM_NUM_GPUS", "4"}}))->hosts.back().slots == 3);
  root.write(kHyperparameters, R"({"sagemaker_mpi_num_of_processes_per_host": "\"0\""})");
  CHECK(invalid_message([&] { detect_sagemaker(root.context()); }) ==
        std::string(kHyperparameters) +
            ": sagemaker_mpi_num_of_processes_per_host: expected a whole number >= 1, "
            "got \"0\"");
  root.write(kHyperparameters, R"({"epochs": "10"})");
  CHECK(detect_sagemaker(root.context({{"SM_NUM_GPUS", "2"}}))->hosts.back().slots == 2);
}

TEST_CASE("platform sagemaker: the SM_* variables without the file", "[platform]") {
  FakeRoot root;
  auto p = detect_sagemaker(root.context({{"SM_HOSTS", R"(["algo-2","algo-1"])"},
                                          {"SM_CURRENT_HOST", "algo-1"},
                                          {"SM_NETWORK_INTERFACE_NAME", "ethwe"},
                                          {"SM_NUM_GPUS", "2"}}));
  REQUIRE(p);
  CHECK(p->hosts == std::vector<HostSpec>{{"algo-1", 2}, {"algo-2", 2}});
  CHECK(p->launches_here());
  CHECK(*p->interface == "ethwe");
  CHECK(p->evidence == Strings{R"(SM_HOSTS=["algo-2","algo-1"])", "SM_CURRENT_HOST=algo-1",
                               "SM_NETWORK_INTERFACE_NAME=ethwe", "SM_NUM_GPUS=2"});
}

TEST_CASE("platform sagemaker: malformed descriptions are one line naming the file or variable and the field",
          "[platform]") {
  FakeRoot root;
  const std::string file = kResourceConfig;
  auto error_for = [&](const std::string& content) {
    root.write(kResourceConfig, content);
    return invalid_message([&] { detect_sagemaker(root.context()); });
  };
  CHECK(error_for("{\"current_host\": ").rfind(file + ": malformed JSON (", 0) == 0);
  CHECK(error_for("[1]") == file + ": expected a JSON object");
  CHECK(error_for(R"({"hosts": ["algo-1"]})") == file + ": field 'current_host' is missing");
  CHECK(error_for(R"({"current_host": 3, "hosts": ["algo-1"]})") ==
        file + ": field 'current_host' is not a non-empty string");
  CHECK(error_for(R"({"current_host": "algo-1"})") == file + ": field 'hosts' is missing");
  CHECK(error_for(R"({"current_host": "algo-1", "hosts": []})") == file + ": field 'hosts': the host list is empty");
  CHECK(error_for(R"({"current_host": "algo-1", "hosts": "algo-1"})") ==
        file + ": field 'hosts': expected a list of host names");
  CHECK(error_for(R"({"current_host": "algo-9", "hosts": ["algo-1"]})") ==
        file + ": the current host 'algo-9' is not one of the hosts");
  CHECK(error_for(R"({"current_host": "algo-1", "hosts": ["algo-1", "algo-1"]})") ==
        file + ": host 'algo-1' is listed twice");
  error_for(R"({"current_host": "algo-1", "hosts": ["algo-1"]})");
  root.write(kHyperparameters, "{\"sagemaker_mpi_num_of_processes_per_host\": ");
  CHECK(invalid_message([&] {
          detect_sagemaker(root.context());
        }).rfind(std::string(kHyperparameters) + ": malformed JSON (", 0) == 0);
  fs::remove(root.root() + kHyperparameters);
  fs::remove(root.root() + kResourceConfig);
  CHECK(invalid_message([&] {
          detect_sagemaker(root.context({{"SM_HOSTS", "[\"a\""}, {"SM_CURRENT_HOST", "a"}}));
        }).rfind("SM_HOSTS: malformed JSON (", 0) == 0);
  CHECK(invalid_message([&] {
          detect_sagemaker(root.context({{"SM_HOSTS", "[\"a\"]"}}));
        }) == "SM_HOSTS is set but SM_CURRENT_HOST is not (expected e.g. SM_CURRENT_HOST=algo-1)");
  CHECK(invalid_message([&] {
          detect_sagemaker(root.context({{"SM_CURRENT_HOST", "a"}}));
        }).rfind("SM_CURRENT_HOST is set but SM_HOSTS is not", 0) == 0);
}

TEST_CASE("platform slurm hostlist: single names ranges lists zero padding several groups", "[platform]") {
  CHECK(expand_hostlist("node1") == Strings{"node1"});
  CHECK(expand_hostlist("a,b,c") == Strings{"a", "b", "c"});
  CHECK(expand_hostlist("node[01-04,07],gpu-[1-2]") ==
        Strings{"node01", "node02", "node03", "node04", "node07", "gpu-1", "gpu-2"});
  CHECK(expand_hostlist("n[8-11]") == Strings{"n8", "n9", "n10", "n11"});
  CHECK(expand_hostlist("n[098-101]") == Strings{"n098", "n099", "n100", "n101"});
  CHECK(expand_hostlist("n[0-1]") == Strings{"n0", "n1"});
  CHECK(expand_hostlist("n[5]") == Strings{"n5"});
  CHECK(expand_hostlist("rack[1-2]-n[01-02].ib") ==
        Strings{"rack1-n01.ib", "rack1-n02.ib", "rack2-n01.ib", "rack2-n02.ib"});
  CHECK(expand_hostlist("[1-2]x") == Strings{"1x", "2x"});
  CHECK(expand_hostlist("login,c[1,3-4]") == Strings{"login", "c1", "c3", "c4"});
}

TEST_CASE("platform slurm hostlist: malformed lists are one line naming the variable", "[platform]") {
  auto error = [](const std::string& text) { return invalid_message([&] { expand_hostlist(text); }); };
  CHECK(error("n[1-2") == "SLURM_JOB_NODELIST: 'n[1-2': '[' without ']'");
  CHECK(error("n1-2]") == "SLURM_JOB_NODELIST: 'n1-2]': ']' without '['");
  CHECK(error("n[2-1]") == "SLURM_JOB_NODELIST: 'n[2-1]': range '2-1' runs backwards");
  CHECK(error("n[a-b]") == "SLURM_JOB_NODELIST: 'n[a-b]': range 'a-b' is not N or N-M (whole numbers)");
  CHECK(error("n[]") == "SLURM_JOB_NODELIST: 'n[]': range '' is not N or N-M (whole numbers)");
  CHECK(error("n[1,,2]") == "SLURM_JOB_NODELIST: 'n[1,,2]': range '' is not N or N-M (whole numbers)");
  CHECK(error("n[1-]") == "SLURM_JOB_NODELIST: 'n[1-]': range '1-' is not N or N-M (whole numbers)");
  CHECK(error("n[[1]]") == "SLURM_JOB_NODELIST: 'n[[1]]': nested '['");
  CHECK(error("a,,b") == "SLURM_JOB_NODELIST: empty host entry before a ',' in 'a,,b'");
  CHECK(error("a,") == "SLURM_JOB_NODELIST: empty host entry at the end in 'a,'");
  CHECK(error("") == "SLURM_JOB_NODELIST: empty host entry at the end in ''");
  CHECK(error("a b") == "SLURM_JOB_NODELIST: unexpected whitespace in 'a b'");
  CHECK(error("n[1-70000]") == "SLURM_JOB_NODELIST: 'n[1-70000]': more than 65536 hosts");
  CHECK(invalid_message([] { expand_hostlist("x[", "SLURM_NODELIST"); }) == "SLURM_NODELIST: 'x[': '[' without ']'");
}

TEST_CASE("platform slurm tasks per node: N and N(xM) lists", "[platform]") {
  CHECK(expand_tasks_per_node("2(x3),1") == std::vector<int>{2, 2, 2, 1});
  CHECK(expand_tasks_per_node("4") == std::vector<int>{4});
  CHECK(expand_tasks_per_node("1,2(x2)") == std::vector<int>{1, 2, 2});
  auto error = [](const std::string& text) { return invalid_message([&] { expand_tasks_per_node(text); }); };
  CHECK(error("2(3)") == "SLURM_TASKS_PER_NODE='2(3)': '2(3)' is not N or N(xM)");
  CHECK(error("2(x)") == "SLURM_TASKS_PER_NODE='2(x)': '2(x)' is not N or N(xM)");
  CHECK(error("x") == "SLURM_TASKS_PER_NODE='x': 'x' is not N or N(xM)");
  CHECK(error("0") == "SLURM_TASKS_PER_NODE='0': '0' has a zero count");
  CHECK(error("1,") == "SLURM_TASKS_PER_NODE='1,': '' is not N or N(xM)");
}

TEST_CASE("platform slurm: an allocation's nodes slots this node and the leader", "[platform]") {
  FakeRoot root;
  CHECK_FALSE(detect_slurm(root.context({{"SLURM_JOB_NODELIST", "n1"}})).has_value());
  std::map<std::string, std::string> env = {{"SLURM_JOB_ID", "42"},
                                            {"SLURM_JOB_NODELIST", "node[01-03],gpu-1"},
                                            {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                                            {"SLURM_NTASKS_PER_NODE", "8"},
                                            {"SLURMD_NODENAME", "node01"}};
  auto p = detect_slurm(root.context(env));
  REQUIRE(p);
  CHECK(p->hosts == std::vector<HostSpec>{{"node01", 2}, {"node02", 2}, {"node03", 2}, {"gpu-1", 1}});
  CHECK(p->leader == "node01");
  CHECK(p->this_host == "node01");
  CHECK(p->launches_here());
  CHECK(p->evidence == Strings{"SLURM_JOB_ID=42", "SLURM_JOB_NODELIST=node[01-03],gpu-1",
                               "SLURM_TASKS_PER_NODE=2(x3),1", "SLURMD_NODENAME=node01"});

  env["SLURMD_NODENAME"] = "node02";
  CHECK_FALSE(detect_slurm(root.context(env))->launches_here());
  env.erase("SLURMD_NODENAME");  // salloc's shell on the submission host: launches from outside
  CHECK(detect_slurm(root.context(env))->launches_here());

  env.erase("SLURM_TASKS_PER_NODE");
  CHECK(detect_slurm(root.context(env))->hosts.front().slots == 8);
  env.erase("SLURM_NTASKS_PER_NODE");
  CHECK(detect_slurm(root.context(env))->hosts.front().slots == 1);

  env["SLURM_TASKS_PER_NODE"] = "2(x2)";
  CHECK(invalid_message([&] { detect_slurm(root.context(env)); }) ==
        "SLURM_TASKS_PER_NODE='2(x2)' gives 2 nodes but SLURM_JOB_NODELIST lists 4");
  env.erase("SLURM_TASKS_PER_NODE");
  env["SLURM_NTASKS_PER_NODE"] = "2,3";
  CHECK(invalid_message([&] { detect_slurm(root.context(env)); }) ==
        "SLURM_NTASKS_PER_NODE='2,3' is not one whole number");
  env.erase("SLURM_NTASKS_PER_NODE");
  env["SLURM_JOB_NODELIST"] = "n[1-2],n2";
  CHECK(invalid_message([&] { detect_slurm(root.context(env)); }) == "SLURM_JOB_NODELIST: node 'n2' is listed twice");
  env.erase("SLURM_JOB_NODELIST");
  CHECK(invalid_message([&] { detect_slurm(root.context(env)); }) ==
        "SLURM_JOB_ID is set but SLURM_JOB_NODELIST is empty or unset: not inside an allocation?");
  env["SLURM_NODELIST"] = "c[1-2]";  // the older name
  CHECK(detect_slurm(root.context(env))->hosts.size() == 2);
}

TEST_CASE("platform slurm: an srun step with several hvdruns on a node is refused", "[platform]") {
  // srun inside an allocation of 2 tasks per node inherits SLURM_NTASKS and,
  // without -n, ignores --ntasks-per-node=1: every hvdrun of a node would
  // run its own copy of the job (seen on a real Slurm, issue 34).
  FakeRoot root;
  std::map<std::string, std::string> env = {{"SLURM_JOB_ID", "7"},
                                            {"SLURM_JOB_NODELIST", "node[1-3]"},
                                            {"SLURM_TASKS_PER_NODE", "2(x3)"},
                                            {"SLURM_STEP_TASKS_PER_NODE", "2(x3)"},
                                            {"SLURMD_NODENAME", "node1"}};
  CHECK(invalid_message([&] { detect_slurm(root.context(env)); }) ==
        "srun started 2 hvdruns on one node (SLURM_STEP_TASKS_PER_NODE=2(x3)), and each would run a copy of the job: "
        "run one per node, e.g. srun -n \"$SLURM_JOB_NUM_NODES\" --ntasks-per-node=1 hvdrun ... "
        "(docs/platforms.md#slurm)");
  env["SLURM_STEP_TASKS_PER_NODE"] = "1,2";
  CHECK_FALSE(invalid_message([&] { detect_slurm(root.context(env)); }).empty());
  env["SLURM_STEP_TASKS_PER_NODE"] = "1(x3)";  // one per node: the follower form
  env["SLURM_TASKS_PER_NODE"] = "1(x3)";
  CHECK(detect_slurm(root.context(env))->hosts.size() == 3);
  env.erase("SLURM_STEP_TASKS_PER_NODE");  // the batch script: no step variables
  env["SLURM_TASKS_PER_NODE"] = "2(x3)";
  CHECK(detect_slurm(root.context(env))->hosts.front().slots == 2);
}

TEST_CASE("platform hosts-from auto: the first platform present - explicit hosts win - none keeps localhost",
          "[platform]") {
  FakeRoot root;
  root.write(kResourceConfig, R"({"current_host": "algo-1", "hosts": ["algo-1", "algo-2"],
                                  "network_interface_name": "eth0"})");
  const auto ctx = root.context({{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "n1"}, {"SM_NUM_GPUS", "2"}});

  auto d = choose_host_source(with_hosts_from("auto"), ctx);
  REQUIRE(d.platform);
  CHECK(d.platform->name == "sagemaker");  // SageMaker is looked for first
  CHECK(hosts_text(d) == "algo-1:2,algo-2:2");
  CHECK(d.options.hosts.empty());  // the platform's hosts are HostSpecs, never -H text
  CHECK(d.options.network_interfaces == Strings{"eth0"});
  CHECK_FALSE(d.follower);
  REQUIRE(d.info.size() == 3);  // the last: --launcher auto inside the (also present) Slurm job
  CHECK(d.info.front().rfind("hosts from sagemaker (detected; --hosts-from none turns this off): algo-1:2, algo-2:2",
                             0) == 0);
  CHECK(d.info[1] ==
        "sagemaker gives every worker SM_MODEL_DIR, SM_OUTPUT_DIR, SM_OUTPUT_DATA_DIR, SM_INPUT_DIR, "
        "SM_INPUT_CONFIG_DIR, SM_HOSTS");

  CHECK(hosts_text(choose_host_source(with_hosts_from("slurm"), ctx)) == "n1:1");
  CHECK_FALSE(choose_host_source(with_hosts_from("none"), ctx).platform);
  CHECK(hosts_text(choose_host_source(with_hosts_from("none"), ctx)) == "localhost:1");

  Options explicit_hosts = with_hosts_from("auto");
  explicit_hosts.hosts = "a:2";
  auto kept = choose_host_source(explicit_hosts, ctx);
  CHECK_FALSE(kept.platform);
  CHECK(hosts_text(kept) == "a:2");
  // Every explicit source wins over a detected platform (one function names them).
  Options hostfile = with_hosts_from("auto");
  hostfile.hostfile = "hosts.txt";
  CHECK(explicit_host_flag(hostfile) == "--hostfile");
  CHECK_FALSE(apply_platform(hostfile, explicit_host_flag(hostfile), ctx).platform);
  Options script = with_hosts_from("auto");
  script.elastic.host_discovery_script = "./discover.sh";
  CHECK(explicit_host_flag(script) == "--host-discovery-script");
  CHECK_FALSE(apply_platform(script, explicit_host_flag(script), ctx).platform);
  Options kube = with_hosts_from("auto");
  kube.elastic.kubernetes.selector = "app=x";
  CHECK(explicit_host_flag(kube) == "--kubernetes-selector");
  CHECK_FALSE(apply_platform(kube, explicit_host_flag(kube), ctx).platform);
  CHECK(explicit_host_flag(with_hosts_from("auto")).empty());

  FakeRoot empty;
  CHECK_FALSE(choose_host_source(with_hosts_from("auto"), empty.context()).platform);
}

TEST_CASE("platform hosts-from: contradictions and an absent named platform are one line", "[platform]") {
  FakeRoot root;
  root.write(kResourceConfig, R"({"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]})");
  Options too_many = with_hosts_from("auto");
  too_many.num_proc = 3;
  CHECK(invalid_message([&] { choose_host_source(too_many, root.context()); }) ==
        std::string("-np 3 but the sagemaker job offers only 2 slots (algo-1:1, algo-2:1; from ") + kResourceConfig +
            ")");
  Options named = with_hosts_from("sagemaker");
  named.hosts = "a:1";
  CHECK(invalid_message([&] { choose_host_source(named, root.context()); }) ==
        "--hosts-from sagemaker and -H/--hosts cannot be used together: give one source of hosts (or --hosts-from "
        "none)");
  CHECK(invalid_message([&] { choose_host_source(with_hosts_from("slurm"), root.context()); }) ==
        "--hosts-from slurm: SLURM_JOB_ID is not set (not inside a Slurm allocation)");
  FakeRoot empty;
  CHECK(invalid_message([&] {
          choose_host_source(with_hosts_from("sagemaker"), empty.context());
        }).rfind("--hosts-from sagemaker: no <base>/input/config/resourceconfig.json", 0) == 0);
  // A follower: this machine is algo-2, the leader algo-1.
  auto d = choose_host_source(with_hosts_from("auto"), root.context());
  CHECK(d.follower);
  CHECK(render_platform(*d.platform)
            .find("this host: algo-2 (a follower: waits for the leader algo-1 to attach, then exits with the job's "
                  "status)") != std::string::npos);
}

TEST_CASE("platform hosts-from: explicit --network-interface and --mpi-args win - custom MPI options need --mpi",
          "[platform]") {
  FakeRoot root;
  root.write(kResourceConfig, R"({"current_host": "algo-1", "hosts": ["algo-1"], "network_interface_name": "eth0"})");
  root.write(kHyperparameters, R"({"sagemaker_mpi_custom_mpi_options": "\"-verbose -x NCCL_DEBUG=INFO\""})");
  Options own = with_hosts_from("auto");
  own.network_interfaces = {"ib0"};
  auto d = choose_host_source(own, root.context());
  CHECK(d.options.network_interfaces == Strings{"ib0"});
  CHECK_FALSE(d.options.mpi_args);
  // Without --mpi the -x settings reach the workers; -verbose is named as ignored.
  CHECK(d.options.env_exports == Strings{"NCCL_DEBUG=INFO"});
  REQUIRE(d.warnings.size() == 1);
  CHECK(d.warnings.front() ==
        "sagemaker's custom MPI option '-verbose' (sagemaker_mpi_custom_mpi_options) is ignored: mpirun options have "
        "no effect when hvdrun starts the job itself (give --mpi to pass them to mpirun)");
  REQUIRE(d.info.size() == 4);
  CHECK(d.info[1] == "--network-interface ib0 wins over sagemaker's interface eth0");
  CHECK(d.info[2].rfind("sagemaker gives every worker SM_HPS, SM_USER_ARGS, SM_MODEL_DIR", 0) == 0);
  CHECK(d.info[3] == "sagemaker's custom MPI options give every worker -x NCCL_DEBUG=INFO");

  Options mpi = with_hosts_from("auto");
  mpi.engine = Engine::Mpi;
  auto m = choose_host_source(mpi, root.context());
  CHECK(m.warnings.empty());
  CHECK(m.options.mpi_args == std::optional<std::string>("-verbose -x NCCL_DEBUG=INFO"));
  mpi.mpi_args = "-v";
  auto given = choose_host_source(mpi, root.context());
  CHECK(given.options.mpi_args == std::optional<std::string>("-v"));
  CHECK(given.info.back() == "--mpi-args '-v' wins over sagemaker's custom MPI options '-verbose -x NCCL_DEBUG=INFO'");
}

TEST_CASE("platform hosts-from: the flag its config key and HVDRUN_HOSTS_FROM - every platform implemented",
          "[platform]") {
  CHECK(hvd_test::parse_ok({"-np", "1", "true"}).hosts_from == "auto");
  CHECK(hvd_test::parse_ok({"-np", "1", "--hosts-from", "SLURM", "true"}).hosts_from == "slurm");
  CHECK(hvd_test::parse_ok({"-np", "1", "--hosts-from=none", "true"}).hosts_from == "none");
  CHECK(hvd_test::parse_ok({"-np", "1", "--hosts-from", "Vertex", "true"}).hosts_from == "vertex");
  CHECK(hvd_test::parse_ok({"-np", "1", "--hosts-from", "lsf", "true"}).hosts_from == "lsf");
  CHECK(hvd_test::parse_ok({"-np", "1", "--hosts-from", "OCI", "true"}).hosts_from == "oci");
  CHECK(planned_platforms().empty());
  auto bad = hvd_test::parse({"-np", "1", "--hosts-from", "cloud", "true"});
  CHECK(bad.message == "hvdrun: error: --hosts-from: 'cloud' is not auto, none, sagemaker, vertex, slurm, lsf, oci\n");
  hvd_test::TempFile config("hosts_from: slurm\n", ".yaml");
  CHECK(hvd_test::parse_ok({"-np", "1", "--config-file", config.path(), "true"}).hosts_from == "slurm");
  setenv("HVDRUN_HOSTS_FROM", "none", 1);
  CHECK(hvd_test::parse_ok({"-np", "1", "true"}).hosts_from == "none");
  CHECK(hvd_test::parse_ok({"-np", "1", "--hosts-from", "auto", "true"}).hosts_from == "auto");
  unsetenv("HVDRUN_HOSTS_FROM");
}

TEST_CASE("platform hosts-from: -np defaults to the platform's slots - explicit -np wins", "[platform]") {
  FakeRoot root;
  root.write(kResourceConfig, R"({"current_host": "algo-1", "hosts": ["algo-1", "algo-2"]})");
  root.write(kHyperparameters, R"({"sagemaker_mpi_num_of_processes_per_host": "2"})");
  Options no_np = with_hosts_from("auto");
  no_np.num_proc.reset();
  auto d = choose_host_source(no_np, root.context());
  REQUIRE(d.options.num_proc);
  CHECK(*d.options.num_proc == 4);
  CHECK(std::find(d.info.begin(), d.info.end(), "-np not given: 4 ranks, the sagemaker job's slots") != d.info.end());
  Options three = with_hosts_from("auto");
  three.num_proc = 3;
  CHECK(*choose_host_source(three, root.context()).options.num_proc == 3);

  // Without a platform -np stays required: parsing leaves the question to
  // choose_host_source, which reads the machine (parsing never does).
  const std::string required = "-np/--num-proc is required (e.g. hvdrun -np 4 python train.py)";
  FakeRoot empty;
  CHECK(invalid_message([&] { choose_host_source(no_np, empty.context()); }) == required);
  Options none = no_np;
  none.hosts_from = "none";
  CHECK(invalid_message([&] { choose_host_source(none, root.context()); }) == required);
  Options explicit_hosts = no_np;
  explicit_hosts.hosts = "a:2";
  CHECK(invalid_message([&] { choose_host_source(explicit_hosts, root.context()); }) == required);
  // A named platform that is absent, or a malformed description: that is the error.
  Options named = no_np;
  named.hosts_from = "slurm";
  CHECK(invalid_message([&] { choose_host_source(named, empty.context()); }) ==
        "--hosts-from slurm: SLURM_JOB_ID is not set (not inside a Slurm allocation)");
  FakeRoot bad;
  bad.write(kResourceConfig, "{not json");
  CHECK(invalid_message([&] { choose_host_source(no_np, bad.context()); }).find("resourceconfig.json") !=
        std::string::npos);
}

// Issue 29 item 8: names from platform variables and JSON are checked as -H
// checks them; the refusal is one line with the name escaped.
TEST_CASE("platform: control characters or over-long names from a platform are one escaped line", "[platform]") {
  FakeRoot root;
  auto slurm =
      root.context({{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "n1,n\x1b[31m2"}, {"SLURMD_NODENAME", "n1"}});
  std::string why = invalid_message([&] { choose_host_source(with_hosts_from("slurm"), slurm); });
  INFO(why);
  CHECK(why.find("n\\x1b[31m2") != std::string::npos);
  CHECK(why.find_first_of("\x1b\n") == std::string::npos);
  auto sm =
      root.context({{"SM_HOSTS", "[\"algo-1\", \"algo-2\\n[0]<stdout>:forged\"]"}, {"SM_CURRENT_HOST", "algo-1"}});
  why = invalid_message([&] { choose_host_source(with_hosts_from("sagemaker"), sm); });
  INFO(why);
  CHECK_FALSE(why.empty());
  CHECK(why.find('\n') == std::string::npos);
  auto long_name =
      root.context({{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", std::string(300, 'n')}, {"SLURMD_NODENAME", "x"}});
  why = invalid_message([&] { choose_host_source(with_hosts_from("slurm"), long_name); });
  CHECK(why.find("at most 253") != std::string::npos);
  CHECK(why.size() < 1200);
}

TEST_CASE("platform sagemaker: hyperparameters follow the command and the toolkit's variables reach the workers",
          "[platform]") {
  // Issue 33 item 1: `exec hvdrun python train.py` gave the script argv=[]
  // and no SM_MODEL_DIR; SageMaker's training toolkit passes both.
  FakeRoot root;
  root.write(kResourceConfig, R"({"current_host": "algo-1", "hosts": ["algo-2", "algo-1"]})");
  root.write(kHyperparameters, R"({"sagemaker_mpi_num_of_processes_per_host": "2", "epochs": "3",
                                   "lr": "0.01", "model-name": "\"resnet\"", "verbose": "true", "b": "64"})");
  root.write("/opt/ml/input/config/inputdataconfig.json", R"({"training": {}, "test": {}})");
  auto p = detect_sagemaker(root.context());
  REQUIRE(p);
  CHECK(p->user_args == Strings{"-b", "64", "--epochs", "3", "--lr", "0.01", "--model-name", "resnet", "--verbose",
                                "True"});
  CHECK(p->user_args_origin == kHyperparameters);
  auto env = std::map<std::string, std::string>(p->job_env.begin(), p->job_env.end());
  CHECK(env["SM_MODEL_DIR"] == "/opt/ml/model");
  CHECK(env["SM_OUTPUT_DATA_DIR"] == "/opt/ml/output/data");
  CHECK(env["SM_CHANNEL_TRAINING"] == "/opt/ml/input/data/training");
  CHECK(env["SM_CHANNEL_TEST"] == "/opt/ml/input/data/test");
  CHECK(env["SM_HP_EPOCHS"] == "3");
  CHECK(env["SM_HOSTS"] == R"(["algo-1","algo-2"])");
  CHECK(env.count("SM_HP_SAGEMAKER_MPI_NUM_OF_PROCESSES_PER_HOST") == 0);  // SageMaker's own are not the user's
  // Each host's own SM_CURRENT_HOST, not this machine's.
  CHECK(p->host_env["algo-1"]["SM_CURRENT_HOST"] == "algo-1");
  CHECK(p->host_env["algo-2"]["SM_CURRENT_HOST"] == "algo-2");

  // apply_platform: arguments after the command, variables where unset.
  Options o = with_hosts_from("auto");
  o.num_proc.reset();
  o.command = {"python", "/opt/ml/code/train.py"};
  auto d = choose_host_source(o, root.context({{"SM_MODEL_DIR", "/mine"}}));
  CHECK(d.options.command == Strings{"python", "/opt/ml/code/train.py", "-b", "64", "--epochs", "3", "--lr", "0.01",
                                     "--model-name", "resnet", "--verbose", "True"});
  for (const char* host : {"algo-1", "algo-2"}) {
    auto& env_of = d.options.host_env[host];
    CHECK(env_of["SM_CHANNEL_TRAINING"] == "/opt/ml/input/data/training");
    CHECK(env_of.count("SM_MODEL_DIR") == 0);  // hvdrun's environment has it: the workers inherit that
    CHECK(env_of["SM_CURRENT_HOST"] == host);
  }
  CHECK(d.options.env_exports.empty());
  // The user's own -x of a name wins over the platform's value.
  Options mine = o;
  mine.env_exports = {"SM_CHANNEL_TRAINING=/data"};
  CHECK(choose_host_source(mine, root.context()).options.host_env["algo-2"].count("SM_CHANNEL_TRAINING") == 0);
  // HVDRUN_PLATFORM_ARGS=0 keeps the command as given, and says so.
  auto kept = choose_host_source(o, root.context({{"HVDRUN_PLATFORM_ARGS", "0"}}));
  CHECK(kept.options.command == Strings{"python", "/opt/ml/code/train.py"});
  CHECK(std::any_of(kept.info.begin(), kept.info.end(),
                    [](const std::string& l) { return l.find("HVDRUN_PLATFORM_ARGS=0") != std::string::npos; }));
  // Without hyperparameters.json, the toolkit's SM_USER_ARGS.
  FakeRoot env_only;
  auto from_env = detect_sagemaker(env_only.context(
      {{"SM_HOSTS", R"(["algo-1"])"}, {"SM_CURRENT_HOST", "algo-1"}, {"SM_USER_ARGS", R"(["--epochs","5"])"}}));
  REQUIRE(from_env);
  CHECK(from_env->user_args == Strings{"--epochs", "5"});
  CHECK(invalid_message([&] {
          detect_sagemaker(env_only.context(
              {{"SM_HOSTS", R"(["algo-1"])"}, {"SM_CURRENT_HOST", "algo-1"}, {"SM_USER_ARGS", "--epochs 5"}}));
        }).rfind("SM_USER_ARGS: malformed JSON", 0) == 0);
}

TEST_CASE("plan: a platform's per-machine variables reach the ranks of that machine", "[platform]") {
  Options o = with_hosts_from("none");
  o.num_proc = 4;
  o.host_env["algo-1"]["SM_CURRENT_HOST"] = "algo-1";
  o.host_env["algo-2"]["SM_CURRENT_HOST"] = "algo-2";
  JobPlan plan = make_plan(o, {{"algo-1", 2}, {"algo-2", 2}}, {{"SM_CURRENT_HOST", "algo-1"}}, "/");
  REQUIRE(plan.workers.size() == 4);
  CHECK(plan.workers[1].env.at("SM_CURRENT_HOST") == "algo-1");
  CHECK(plan.workers[2].env.at("SM_CURRENT_HOST") == "algo-2");
  CHECK(plan.workers[3].env.at("SM_CURRENT_HOST") == "algo-2");
}
