// Vertex AI (CLUSTER_SPEC, TF_CONFIG) and LSF (LSB_MCPU_HOSTS) detectors, the
// GPU count they take slots from, and SageMaker's custom MPI options split as
// the SageMaker training toolkit splits them (docs/platforms.md).
#include <unistd.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "../../test_util.h"
#include "../../fakes/fake_machine.h"
#include "hvd/launcher/discovery/choose.h"
#include "hvd/launcher/discovery/platform/platform.h"

using namespace hvd::launcher;
using namespace hvd::launcher::platform;
using hvd_test::invalid_message;
using Strings = std::vector<std::string>;
using Env = std::map<std::string, std::string>;

namespace {

/// A fixture root (removed at scope exit): `gpus` NVIDIA GPUs under
/// /proc/driver/nvidia/gpus, as the driver lists them (one directory each).
using Machine = hvd::launcher::fakes::FakeMachine;

// What Vertex sets on the second worker of a job with a primary replica, two
// workers and a reduction-server pool (ports 2222 as Vertex gives them).
const char* kClusterSpec = R"({"cluster": {
    "workerpool0": ["cmle-training-workerpool0-ab12cd34ef-0:2222"],
    "workerpool1": ["cmle-training-workerpool1-ab12cd34ef-0:2222", "cmle-training-workerpool1-ab12cd34ef-1:2222"],
    "workerpool2": ["cmle-training-workerpool2-ab12cd34ef-0:2222", "cmle-training-workerpool2-ab12cd34ef-1:2222"]},
  "environment": "cloud",
  "task": {"type": "workerpool1", "index": 1, "trial": ""},
  "job": "{\"python_module\":\"\",\"python_package_uris\":[],\"job_args\":[]}"})";

std::string cluster_spec(const std::string& task) {
  return R"({"cluster": {"workerpool0": ["primary:2222"], "workerpool1": ["w0:2222", "w1:2222"],
             "workerpool2": ["rs0:2222"], "workerpool3": ["eval0:2222"]}, "task": )" +
         task + "}";
}

std::string vertex_error(const std::string& var, const std::string& value) {
  Machine m;
  return invalid_message([&] { detect_vertex(m.context({{var, value}})); });
}

}  // namespace

TEST_CASE("platform gpus: /proc/driver/nvidia/gpus entries limited by CUDA_VISIBLE_DEVICES", "[platform]") {
  CHECK(count_nvidia_gpus(Machine(0).context()).count == 0);
  Machine four(4);
  auto all = count_nvidia_gpus(four.context());
  CHECK(all.count == 4);
  CHECK(all.evidence == Strings{"/proc/driver/nvidia/gpus (4 GPUs)"});
  auto two = count_nvidia_gpus(four.context({{"CUDA_VISIBLE_DEVICES", "1,3"}}));
  CHECK(two.count == 2);
  CHECK(two.evidence == Strings{"/proc/driver/nvidia/gpus (4 GPUs)", "CUDA_VISIBLE_DEVICES=1,3"});
  CHECK(count_nvidia_gpus(four.context({{"CUDA_VISIBLE_DEVICES", ""}})).count == 0);
  CHECK(count_nvidia_gpus(four.context({{"CUDA_VISIBLE_DEVICES", "NoDevFiles"}})).count == 0);
  CHECK(count_nvidia_gpus(four.context({{"CUDA_VISIBLE_DEVICES", "0,-1,2"}})).count == 1);  // CUDA stops at -1
  CHECK(count_nvidia_gpus(four.context({{"CUDA_VISIBLE_DEVICES", "GPU-8f1c,GPU-9a2b"}})).count == 2);
  CHECK(count_nvidia_gpus(four.context({{"CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5"}})).count == 4);
  CHECK(count_nvidia_gpus(Machine(0).context({{"CUDA_VISIBLE_DEVICES", "0"}})).count == 0);
}

TEST_CASE("platform vertex: absent without CLUSTER_SPEC and TF_CONFIG", "[platform]") {
  Machine m;
  CHECK_FALSE(detect_vertex(m.context()).has_value());
  CHECK_FALSE(detect_vertex(m.context({{"CLUSTER_SPEC", ""}, {"AIP_MODEL_DIR", "gs://x"}})).has_value());
  // TensorFlow's single local worker: TF_CONFIG without a cluster.
  CHECK_FALSE(detect_vertex(m.context({{"TF_CONFIG", "{}"}})).has_value());
  CHECK_FALSE(detect_vertex(m.context({{"TF_CONFIG", R"({"cluster": {}, "task": {}})"}})).has_value());
  // CLUSTER_SPEC is Vertex's own: present means a job, however malformed.
  CHECK(invalid_message([&] {
          detect_vertex(m.context({{"CLUSTER_SPEC", "{}"}}));
        }) == "CLUSTER_SPEC: field 'cluster' is missing");
}

TEST_CASE("platform vertex: CLUSTER_SPEC gives the primary then the workers - ports dropped - GPU slots",
          "[platform]") {
  Machine m(2);
  auto p = detect_vertex(m.context({{"CLUSTER_SPEC", kClusterSpec}}));
  REQUIRE(p);
  CHECK(p->name == "vertex");
  CHECK(p->hosts == std::vector<HostSpec>{{"cmle-training-workerpool0-ab12cd34ef-0", 2},
                                          {"cmle-training-workerpool1-ab12cd34ef-0", 2},
                                          {"cmle-training-workerpool1-ab12cd34ef-1", 2}});
  CHECK(p->leader == "cmle-training-workerpool0-ab12cd34ef-0");
  CHECK(p->this_host == "cmle-training-workerpool1-ab12cd34ef-1");
  CHECK_FALSE(p->unranked);
  CHECK_FALSE(p->launches_here());
  CHECK(p->evidence == Strings{"CLUSTER_SPEC (task workerpool1 index 1)", "/proc/driver/nvidia/gpus (2 GPUs)"});

  // The primary replica leads; no GPUs means one slot per host.
  Machine cpu;
  auto primary = detect_vertex(cpu.context({{"CLUSTER_SPEC", cluster_spec(R"({"type": "workerpool0", "index": 0})")}}));
  REQUIRE(primary);
  CHECK(primary->this_host == "primary");
  CHECK(primary->launches_here());
  CHECK(primary->hosts == std::vector<HostSpec>{{"primary", 1}, {"w0", 1}, {"w1", 1}});
  // A one-machine job: only workerpool0.
  auto single = detect_vertex(cpu.context(
      {{"CLUSTER_SPEC",
        R"({"cluster": {"workerpool0": ["[fd00::7]:2222"]}, "task": {"type": "workerpool0", "index": 0}})"}}));
  CHECK(single->hosts == std::vector<HostSpec>{{"fd00::7", 1}});
  // CLUSTER_SPEC wins over TF_CONFIG when both are set (Vertex sets both).
  auto both = detect_vertex(cpu.context(
      {{"CLUSTER_SPEC", cluster_spec(R"({"type": "workerpool1", "index": 0})")}, {"TF_CONFIG", "not read"}}));
  CHECK(both->this_host == "w0");
}

TEST_CASE("platform vertex: reduction servers and evaluators get no ranks", "[platform]") {
  Machine m;
  auto rs = detect_vertex(m.context({{"CLUSTER_SPEC", cluster_spec(R"({"type": "workerpool2", "index": 0})")}}));
  REQUIRE(rs);
  CHECK(rs->unranked);
  CHECK(rs->unranked_reason ==
        "this machine is a Vertex reduction server (or parameter server) (workerpool2 index 0): it gets no ranks of "
        "the hvdrun job");
  CHECK(rs->this_host == "rs0");
  CHECK(rs->hosts == std::vector<HostSpec>{{"primary", 1}, {"w0", 1}, {"w1", 1}});  // never given ranks
  CHECK_FALSE(rs->launches_here());
  auto ev = detect_vertex(m.context({{"CLUSTER_SPEC", cluster_spec(R"({"type": "workerpool3", "index": 0})")}}));
  CHECK(ev->unranked);
  CHECK(ev->unranked_reason ==
        "this machine is a Vertex evaluator (workerpool3 index 0): it gets no ranks of the hvdrun job");

  // hvdrun's decision: not a follower, no -np check against slots it does not use.
  Options o;
  o.num_proc = 64;
  o.command = {"true"};
  auto d = choose_host_source(o, m.context({{"CLUSTER_SPEC", cluster_spec(R"({"type": "workerpool2", "index": 0})")}}));
  REQUIRE(d.platform);
  CHECK(d.platform->unranked);
  CHECK_FALSE(d.follower);
  CHECK(render_platform(*d.platform).find("  this host: rs0 (this machine is a Vertex reduction server") !=
        std::string::npos);
}

TEST_CASE("platform vertex: TF_CONFIG with chief or master - ps and evaluator unranked", "[platform]") {
  Machine m(8);
  const std::string vertex_tf = R"({"cluster": {"chief": ["c:2222"], "worker": ["w0:2222", "w1:2222"],
      "ps": ["ps0:2222"]}, "task": {"type": "worker", "index": 0}, "environment": "cloud"})";
  auto p = detect_vertex(m.context({{"TF_CONFIG", vertex_tf}}));
  REQUIRE(p);
  CHECK(p->hosts == std::vector<HostSpec>{{"c", 8}, {"w0", 8}, {"w1", 8}});
  CHECK(p->leader == "c");
  CHECK(p->this_host == "w0");
  CHECK(p->evidence.front() == "TF_CONFIG (task worker index 0)");
  // AI Platform Training names the primary "master".
  const std::string ai_platform = R"({"cluster": {"master": ["m:2222"], "worker": ["w:2222"]},
      "task": {"type": "master", "index": 0, "cloud": "x"}, "environment": "cloud", "job": {"scale_tier": "CUSTOM"}})";
  auto master = detect_vertex(m.context({{"TF_CONFIG", ai_platform}}));
  CHECK(master->hosts == std::vector<HostSpec>{{"m", 8}, {"w", 8}});
  CHECK(master->launches_here());
  // TensorFlow leaves the evaluator out of 'cluster'.
  auto ev = detect_vertex(
      m.context({{"TF_CONFIG", R"({"cluster": {"chief": ["c:2222"]}, "task": {"type": "evaluator", "index": 0}})"}}));
  CHECK(ev->unranked);
  CHECK(ev->this_host.empty());
  auto ps = detect_vertex(m.context({{"TF_CONFIG", R"({"cluster": {"chief": ["c:1"], "ps": ["p:1"]},
                                                        "task": {"type": "ps", "index": 0}})"}}));
  CHECK(ps->unranked);
}

TEST_CASE("platform vertex: malformed descriptions are one line naming the variable and the field", "[platform]") {
  CHECK(vertex_error("CLUSTER_SPEC", "{\"cluster\": ").rfind("CLUSTER_SPEC: malformed JSON (", 0) == 0);
  CHECK(vertex_error("TF_CONFIG", "{'cluster': {}}").rfind("TF_CONFIG: malformed JSON (", 0) == 0);
  CHECK(vertex_error("CLUSTER_SPEC", "[]") == "CLUSTER_SPEC: expected a JSON object");
  CHECK(vertex_error("CLUSTER_SPEC", R"({"task": {"type": "workerpool0", "index": 0}})") ==
        "CLUSTER_SPEC: field 'cluster' is missing");
  CHECK(vertex_error("CLUSTER_SPEC", R"({"cluster": [], "task": {}})") ==
        "CLUSTER_SPEC: field 'cluster' is not an object");
  CHECK(vertex_error("CLUSTER_SPEC", R"({"cluster": {"workerpool0": ["a:1"]}})") ==
        "CLUSTER_SPEC: field 'task' is missing");
  CHECK(vertex_error("CLUSTER_SPEC", R"({"cluster": {"workerpool0": ["a:1"]}, "task": {"index": 0}})") ==
        "CLUSTER_SPEC: field 'task.type' is missing");
  CHECK(vertex_error("CLUSTER_SPEC", R"({"cluster": {"workerpool0": ["a:1"]}, "task": {"type": "workerpool0"}})") ==
        "CLUSTER_SPEC: field 'task.index' is missing");
  CHECK(vertex_error("CLUSTER_SPEC", cluster_spec(R"({"type": "workerpool1", "index": "1"})")) ==
        "CLUSTER_SPEC: field 'task.index' is not a whole number >= 0 (got \"1\")");
  CHECK(vertex_error("CLUSTER_SPEC", cluster_spec(R"({"type": "workerpool1", "index": 2})")) ==
        "CLUSTER_SPEC: field 'task.index': 2 is out of range (cluster.workerpool1 has 2 entries)");
  CHECK(vertex_error("CLUSTER_SPEC", cluster_spec(R"({"type": "workerpool0", "index": 1})")) ==
        "CLUSTER_SPEC: field 'task.index': 1 is out of range (cluster.workerpool0 has 1 entry)");
  CHECK(vertex_error("CLUSTER_SPEC", cluster_spec(R"({"type": "chief", "index": 0})")) ==
        "CLUSTER_SPEC: field 'task.type': unknown pool 'chief' (expected workerpool0, workerpool1, workerpool2, "
        "workerpool3)");
  CHECK(vertex_error("CLUSTER_SPEC",
                     R"({"cluster": {"workerpool0": ["a:1"]}, "task": {"type": "workerpool1", "index": 0}})") ==
        "CLUSTER_SPEC: field 'task.type': 'workerpool1' is not one of the pools in 'cluster'");
  CHECK(
      vertex_error(
          "CLUSTER_SPEC",
          R"({"cluster": {"workerpool0": ["a:1"], "workerpool1": []}, "task": {"type": "workerpool0", "index": 0}})") ==
      "CLUSTER_SPEC: field 'cluster.workerpool1': the pool is empty");
  CHECK(vertex_error("CLUSTER_SPEC",
                     R"({"cluster": {"workerpool1": ["a:1"]}, "task": {"type": "workerpool1", "index": 0}})") ==
        "CLUSTER_SPEC: field 'cluster.workerpool0' is missing (the primary replica's pool)");
  CHECK(vertex_error("CLUSTER_SPEC",
                     R"({"cluster": {"workerpool0": "a:1"}, "task": {"type": "workerpool0", "index": 0}})") ==
        "CLUSTER_SPEC: field 'cluster.workerpool0': expected a list of \"host:port\" addresses");
  CHECK(vertex_error("CLUSTER_SPEC",
                     R"({"cluster": {"workerpool0": [":2222"]}, "task": {"type": "workerpool0", "index": 0}})") ==
        "CLUSTER_SPEC: field 'cluster.workerpool0': an address is not a non-empty \"host:port\" string");
  CHECK(
      vertex_error(
          "CLUSTER_SPEC",
          R"({"cluster": {"workerpool0": ["a:1"], "workerpool7": ["b:1"]}, "task": {"type": "workerpool0", "index": 0}})") ==
      "CLUSTER_SPEC: field 'cluster.workerpool7': unknown pool (expected workerpool0, workerpool1, workerpool2, "
      "workerpool3)");
  CHECK(
      vertex_error(
          "CLUSTER_SPEC",
          R"({"cluster": {"workerpool0": ["a:1"], "workerpool1": ["a:2"]}, "task": {"type": "workerpool0", "index": 0}})") ==
      "CLUSTER_SPEC: field 'cluster.workerpool1': host 'a' is listed twice");
  CHECK(vertex_error("TF_CONFIG",
                     R"({"cluster": {"chief": ["a:1"], "master": ["b:1"]}, "task": {"type": "chief", "index": 0}})") ==
        "TF_CONFIG: both 'cluster.chief' and 'cluster.master' are given");
  CHECK(vertex_error("TF_CONFIG", R"({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 0}})") ==
        "TF_CONFIG: field 'cluster.chief' is missing (the primary replica's pool)");
}

TEST_CASE("platform vertex: --hosts-from auto finds it after sagemaker - --slots-per-host wins", "[platform]") {
  Machine m(4);
  Options o;
  o.num_proc = 3;
  o.command = {"true"};
  const Env env = {{"CLUSTER_SPEC", cluster_spec(R"({"type": "workerpool0", "index": 0})")},
                   {"LSB_JOBID", "7"},
                   {"LSB_MCPU_HOSTS", "x 1"}};
  auto d = choose_host_source(o, m.context(env));
  REQUIRE(d.platform);
  CHECK(d.platform->name == "vertex");  // before lsf
  CHECK(hvd_test::hosts_text(d) == "primary:4,w0:4,w1:4");
  o.elastic.slots_per_host = 1;
  auto one = choose_host_source(o, m.context(env));
  CHECK(hvd_test::hosts_text(one) == "primary:1,w0:1,w1:1");
  CHECK(one.info.back() == "--slots-per-host 1 wins over vertex's slots per host");
  o.num_proc = 4;
  CHECK(invalid_message([&] {
          choose_host_source(o, m.context(env));
        }).rfind("-np 4 but the vertex job offers only 3 slots (primary:1, w0:1, w1:1; from CLUSTER_SPEC", 0) == 0);
  // Without a platform --slots-per-host has nothing to apply to.
  o.num_proc = 1;
  CHECK(invalid_message([&] { choose_host_source(o, m.context()); }) ==
        "--slots-per-host needs --host-discovery-script or --min-np (elastic mode), or a platform's hosts "
        "(--hosts-from auto: no platform detected)");
  o.hosts_from = "none";
  CHECK(invalid_message([&] { choose_host_source(o, m.context(env)); }).find("(--hosts-from none: turned off)") !=
        std::string::npos);
  o.hosts_from = "vertex";
  CHECK(invalid_message([&] { choose_host_source(o, m.context()); }) ==
        "--hosts-from vertex: neither CLUSTER_SPEC nor a TF_CONFIG with a cluster is set (not inside a Vertex AI "
        "training job)");
  // Through the command line: accepted beside --hosts-from, refused with -H or none (elastic rule).
  CHECK(hvd_test::parse_ok({"-np", "2", "--slots-per-host", "2", "true"}).elastic.slots_per_host ==
        std::optional<int>(2));
  CHECK(hvd_test::parse({"-np", "2", "--slots-per-host", "2", "-H", "a:2", "true"}).message ==
        "hvdrun: error: --slots-per-host needs --host-discovery-script or --min-np (elastic mode)\n");
  CHECK(hvd_test::parse({"-np", "2", "--slots-per-host", "2", "--hosts-from", "none", "true"}).message ==
        "hvdrun: error: --slots-per-host needs --host-discovery-script or --min-np (elastic mode)\n");
}

TEST_CASE("platform lsf: LSB_MCPU_HOSTS pairs and their errors", "[platform]") {
  CHECK(parse_lsb_mcpu_hosts("hostA 4 hostB 4") == std::vector<HostSpec>{{"hostA", 4}, {"hostB", 4}});
  CHECK(parse_lsb_mcpu_hosts(" batch1 1  h41n01 42\th41n02 42 ") ==
        std::vector<HostSpec>{{"batch1", 1}, {"h41n01", 42}, {"h41n02", 42}});
  auto error = [](const std::string& text) { return invalid_message([&] { parse_lsb_mcpu_hosts(text); }); };
  CHECK(error("") == "LSB_MCPU_HOSTS is empty (expected 'hostA 4 hostB 4')");
  CHECK(
      error("hostA 4 hostB") ==
      "LSB_MCPU_HOSTS='hostA 4 hostB': 3 words, expected pairs of a host name and its slot count ('hostA 4 hostB 4')");
  CHECK(error("hostA four") ==
        "LSB_MCPU_HOSTS='hostA four': the slot count 'four' of host 'hostA' is not a whole number >= 1");
  CHECK(error("hostA 0") == "LSB_MCPU_HOSTS='hostA 0': the slot count '0' of host 'hostA' is not a whole number >= 1");
  CHECK(error("hostA -2") ==
        "LSB_MCPU_HOSTS='hostA -2': the slot count '-2' of host 'hostA' is not a whole number >= 1");
  CHECK(error("a 1 a 2") == "LSB_MCPU_HOSTS='a 1 a 2': host 'a' is listed twice");
}

TEST_CASE("platform lsf: the first host launches - a launch node without GPUs is not one of the hosts", "[platform]") {
  const Env env = {{"LSB_JOBID", "1234"}, {"LSB_MCPU_HOSTS", "batch1 1 h41n01 4 h41n02 4"}};
  Machine no_gpus;
  CHECK_FALSE(detect_lsf(no_gpus.context({{"LSB_MCPU_HOSTS", "a 1"}})).has_value());
  // On the launch node (the first entry, no GPUs): launches onto the compute hosts.
  auto launch = detect_lsf(no_gpus.context(env, "batch1.cluster.example"));
  REQUIRE(launch);
  CHECK(launch->name == "lsf");
  CHECK(launch->hosts == std::vector<HostSpec>{{"h41n01", 4}, {"h41n02", 4}});
  CHECK(launch->this_host.empty());
  CHECK(launch->leader == "batch1");
  CHECK(launch->launches_here());
  CHECK(launch->evidence == Strings{"LSB_JOBID=1234", "LSB_MCPU_HOSTS=batch1 1 h41n01 4 h41n02 4",
                                    "host name batch1.cluster.example", "/proc/driver/nvidia/gpus (0 GPUs)"});
  CHECK(render_platform(*launch).find("  this host: - (not one of the hosts: launches the job from here)") !=
        std::string::npos);
  // The first host with GPUs is a compute host too, and the leader.
  Machine gpus(4);
  auto first = detect_lsf(gpus.context(env, "batch1"));
  CHECK(first->hosts == std::vector<HostSpec>{{"batch1", 1}, {"h41n01", 4}, {"h41n02", 4}});
  CHECK(first->this_host == "batch1");
  CHECK(first->launches_here());
  // Another host: a follower of the first (it cannot count the first one's GPUs, so keeps it listed).
  auto other = detect_lsf(gpus.context(env, "h41n02"));
  CHECK(other->this_host == "h41n02");
  CHECK(other->leader == "batch1");
  CHECK_FALSE(other->launches_here());
  CHECK(other->evidence.size() == 3);  // no GPU count read there
  // A one-host job: that host is the leader whatever its GPUs.
  auto single = detect_lsf(no_gpus.context({{"LSB_JOBID", "1"}, {"LSB_MCPU_HOSTS", "node7 8"}}, "node7"));
  CHECK(single->hosts == std::vector<HostSpec>{{"node7", 8}});
  CHECK(single->this_host == "node7");
  // HVDRUN_HOSTNAME names this machine when its host name is not LSF's name for it.
  const Environment named{
      "", {{"LSB_JOBID", "1"}, {"LSB_MCPU_HOSTS", "a 1 b 2"}, {"HVDRUN_HOSTNAME", "b"}}, std::nullopt};
  auto by_variable = detect_lsf(named);
  CHECK(by_variable->this_host == "b");
  CHECK(by_variable->evidence == Strings{"LSB_JOBID=1", "LSB_MCPU_HOSTS=a 1 b 2", "HVDRUN_HOSTNAME=b"});
  CHECK(Environment{"", {}, std::nullopt}.host_name() == [] {
    char buf[256] = {};
    gethostname(buf, sizeof(buf) - 1);
    return std::string(buf);
  }());
  // Not listed: launches from outside, like Slurm's submission host.
  CHECK(detect_lsf(gpus.context(env, "login1"))->this_host.empty());
  // Errors name the variable.
  CHECK(invalid_message([&] {
          detect_lsf(no_gpus.context({{"LSB_JOBID", "1"}}));
        }) == "LSB_JOBID is set but LSB_MCPU_HOSTS is not: not inside an LSF job?");
  CHECK(invalid_message([&] {
          detect_lsf(no_gpus.context({{"LSB_JOBID", "1"}, {"LSB_MCPU_HOSTS", "a 1 b"}}));
        }).rfind("LSB_MCPU_HOSTS='a 1 b': 3 words", 0) == 0);
  Options o;
  o.hosts_from = "lsf";
  o.num_proc = 1;
  CHECK(invalid_message([&] { choose_host_source(o, no_gpus.context()); }) ==
        "--hosts-from lsf: LSB_JOBID is not set (not inside an LSF job)");
}

TEST_CASE("platform sagemaker custom MPI options: split as the SageMaker training toolkit", "[platform]") {
  auto a = parse_custom_mpi_options("-verbose --NCCL_DEBUG=INFO");
  CHECK(a.nccl_debug == std::optional<std::string>("INFO"));
  CHECK(a.mpirun_rest == Strings{"-verbose"});
  CHECK(a.not_mapped == Strings{"-verbose"});
  CHECK(a.env_exports.empty());
  CHECK(a.mpirun_args() == "-x NCCL_DEBUG=INFO -verbose");

  auto b = parse_custom_mpi_options("  --NCCL_DEBUG WARN -x FI_PROVIDER=efa -mca btl ^openib -x LD_LIBRARY_PATH  ");
  CHECK(b.nccl_debug == std::optional<std::string>("WARN"));
  CHECK(b.env_exports == Strings{"FI_PROVIDER=efa", "LD_LIBRARY_PATH"});
  CHECK(b.not_mapped == Strings{"-mca", "btl", "^openib"});
  CHECK(b.mpirun_args() == "-x NCCL_DEBUG=WARN -x FI_PROVIDER=efa -mca btl ^openib -x LD_LIBRARY_PATH");

  // argparse's abbreviations and the last value win; nothing given, nothing added.
  CHECK(parse_custom_mpi_options("--NCCL_DEB=TRACE --NCCL WARN").nccl_debug == std::optional<std::string>("WARN"));
  auto none = parse_custom_mpi_options("-bind-to socket");
  CHECK_FALSE(none.nccl_debug);
  CHECK(none.mpirun_args() == "-bind-to socket");
  CHECK(parse_custom_mpi_options("").mpirun_args().empty());
  CHECK(parse_custom_mpi_options("-x =1").not_mapped == Strings{"-x", "=1"});
  CHECK(invalid_message([] { parse_custom_mpi_options("--NCCL_DEBUG"); }) ==
        "sagemaker_mpi_custom_mpi_options '--NCCL_DEBUG': --NCCL_DEBUG expects a value (e.g. --NCCL_DEBUG WARN)");
  CHECK(invalid_message([] {
          parse_custom_mpi_options("--NCCL_DEBUG -verbose");
        }).rfind("sagemaker_mpi_custom_mpi_options '--NCCL_DEBUG -verbose': --NCCL_DEBUG expects a value", 0) == 0);
}

TEST_CASE("platform sagemaker custom MPI options: mapped without --mpi - the user's -x wins - toolkit args with --mpi",
          "[platform]") {
  hvd_test::TempDir root;
  root.write("opt/ml/input/config/resourceconfig.json", R"({"current_host": "algo-1", "hosts": ["algo-1"]})");
  root.write("opt/ml/input/config/hyperparameters.json",
             R"({"sagemaker_mpi_custom_mpi_options": "\"--NCCL_DEBUG WARN -x A=1 -verbose -mca pml ob1\""})");
  const Environment ctx{root.path(), {}, std::nullopt};
  Options o;
  o.num_proc = 1;
  o.command = {"true"};
  o.env_exports = {"A=2"};
  auto d = choose_host_source(o, ctx);
  CHECK(d.options.env_exports == Strings{"NCCL_DEBUG=WARN", "A=1", "A=2"});  // the user's A=2 is last: it wins
  CHECK(d.info.back() == "sagemaker's custom MPI options give every worker -x NCCL_DEBUG=WARN -x A=1");
  REQUIRE(d.warnings.size() == 1);
  CHECK(d.warnings.front() ==
        "sagemaker's custom MPI options '-verbose -mca pml ob1' (sagemaker_mpi_custom_mpi_options) are ignored: mpirun "
        "options have no effect when hvdrun starts the job itself (give --mpi to pass them to mpirun)");
  o.engine = Engine::Mpi;
  auto m = choose_host_source(o, ctx);
  CHECK(m.options.mpi_args == std::optional<std::string>("-x NCCL_DEBUG=WARN -x A=1 -verbose -mca pml ob1"));
  CHECK(m.options.env_exports == Strings{"A=2"});
  CHECK(m.warnings.empty());
  CHECK(m.info.back() ==
        "sagemaker's custom MPI options '--NCCL_DEBUG WARN -x A=1 -verbose -mca pml ob1' become --mpi-args '-x "
        "NCCL_DEBUG=WARN -x A=1 -verbose -mca pml ob1'");
}

TEST_CASE("platform vertex: each machine's ranks get a CLUSTER_SPEC naming that machine's task", "[platform]") {
  // Ranks on w1 must not see the primary's task (issue 33 item 1).
  Machine cpu;
  auto p = detect_vertex(cpu.context({{"CLUSTER_SPEC", cluster_spec(R"({"type": "workerpool0", "index": 0})")}}));
  REQUIRE(p);
  REQUIRE(p->host_env.size() == 3);
  auto task_of = [&](const std::string& host) {
    const auto spec = nlohmann::json::parse(p->host_env.at(host).at("CLUSTER_SPEC"));
    return spec.at("task").at("type").get<std::string>() + "/" + std::to_string(spec.at("task").at("index").get<int>());
  };
  CHECK(task_of("primary") == "workerpool0/0");
  CHECK(task_of("w0") == "workerpool1/0");
  CHECK(task_of("w1") == "workerpool1/1");
  // The cluster itself is the same everywhere.
  CHECK(nlohmann::json::parse(p->host_env.at("w1").at("CLUSTER_SPEC")).at("cluster") ==
        nlohmann::json::parse(cluster_spec(R"({"type": "workerpool0", "index": 0})")).at("cluster"));
}
