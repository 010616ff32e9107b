#include "../test_util.h"
#include "hvd/launcher/plan/worker_env.h"

using namespace hvd::launcher;
using hvd_test::parse_ok;

namespace {

SlotAssignment slot(int rank) {
  SlotAssignment s;
  s.hostname = "node7";
  s.rank = rank;
  s.local_rank = 1;
  s.local_size = 2;
  s.cross_rank = 3;
  s.cross_size = 4;
  return s;
}

}  // namespace

TEST_CASE("worker env: host-local shell and session variables are dropped", "[env]") {
  EnvMap launcher = {{"HOSTNAME", "driver"},
                     {"SSH_AUTH_SOCK", "/tmp/agent"},
                     {"SSH_CONNECTION", "1 2 3 4"},
                     {"DISPLAY", ":0"},
                     {"SHLVL", "2"},
                     {"PWD", "/x"},
                     {"OLDPWD", "/y"},
                     {"_", "/usr/bin/hvdrun"},
                     {"BASH_FUNC_module%%", "() { eval x; }"},
                     {"BASH_FUNC_ml()", "() { y; }"},
                     {"LD_PRELOAD", "/lib/inject.so"},
                     {"LD_AUDIT", "/lib/audit.so"},
                     {"HVDRUN_SECRET", "parent-job-secret"},
                     {"LD_LIBRARY_PATH", "/opt/lib"},
                     {"PATH", "/usr/bin"},
                     {"HOME", "/root"},
                     {"my.dotted.name", "v"},
                     {"MULTI", "line1\nline2\n"},
                     {"EMPTY", ""}};
  Options o;
  EnvMap env = build_common_env(launcher, o);
  for (const char* dropped : {"HOSTNAME", "SSH_AUTH_SOCK", "SSH_CONNECTION", "DISPLAY", "SHLVL", "PWD", "OLDPWD", "_",
                              "BASH_FUNC_module%%", "BASH_FUNC_ml()", "LD_PRELOAD", "LD_AUDIT", "HVDRUN_SECRET"}) {
    INFO(dropped);
    CHECK(env.count(dropped) == 0);
  }
  CHECK(env.at("LD_LIBRARY_PATH") == "/opt/lib");
  CHECK(env.at("PATH") == "/usr/bin");
  CHECK(env.at("HOME") == "/root");
  CHECK(env.at("my.dotted.name") == "v");
  CHECK(env.at("MULTI") == "line1\nline2\n");
  CHECK(env.at("EMPTY").empty());

  o.forward_loader_env = true;
  EnvMap with_loader = build_common_env(launcher, o);
  CHECK(with_loader.at("LD_PRELOAD") == "/lib/inject.so");
  CHECK(with_loader.at("LD_AUDIT") == "/lib/audit.so");
  CHECK(with_loader.count("BASH_FUNC_module%%") == 0);
}

TEST_CASE("worker env: hvdrun's variables and the rank's place", "[env]") {
  Options o;
  o.start_timeout = std::chrono::seconds(42);
  o.network_interfaces = {"eth1", "ib0"};
  EnvMap env = build_worker_env({{"PYTHONUNBUFFERED", "0"}, {"HOROVOD_RANK", "99"}}, slot(5), o, 8);
  CHECK(env.at("PYTHONUNBUFFERED") == "1");
  CHECK(env.at("HOROVOD_START_TIMEOUT") == "42");
  CHECK(env.at("HOROVOD_CONTROLLER") == "gloo");
  CHECK(env.at("HOROVOD_CPU_OPERATIONS") == "gloo");
  CHECK(env.at("HOROVOD_GLOO_IFACE") == "eth1");
  CHECK(env.at("NCCL_SOCKET_IFNAME") == "eth1,ib0");
  CHECK(env.at("HOROVOD_RANK") == "5");
  CHECK(env.at("HOROVOD_SIZE") == "8");
  CHECK(env.at("HOROVOD_LOCAL_RANK") == "1");
  CHECK(env.at("HOROVOD_LOCAL_SIZE") == "2");
  CHECK(env.at("HOROVOD_CROSS_RANK") == "3");
  CHECK(env.at("HOROVOD_CROSS_SIZE") == "4");
  CHECK(env.at("HOROVOD_HOSTNAME") == "node7");
  CHECK(env.count("HOROVOD_GLOO_RENDEZVOUS_ADDR") == 0);
  CHECK(env.count("HVDRUN_SECRET") == 0);
  Options no_nic;
  CHECK(build_common_env({}, no_nic).count("HOROVOD_GLOO_IFACE") == 0);
}

TEST_CASE("worker env: tuning flags become horovodrun's variables", "[env]") {
  auto o = parse_ok({"-np",
                     "1",
                     "--fusion-threshold-mb",
                     "32",
                     "--cycle-time-ms",
                     "5",
                     "--cache-capacity",
                     "0",
                     "--hierarchical-allreduce",
                     "--no-hierarchical-allgather",
                     "--timeline-filename",
                     "t.json",
                     "--timeline-mark-cycles",
                     "--no-stall-check",
                     "--stall-check-warning-time-seconds",
                     "9",
                     "--stall-check-shutdown-time-seconds",
                     "19",
                     "--log-level",
                     "info",
                     "--log-without-timestamp",
                     "--num-nccl-streams",
                     "2",
                     "--thread-affinity",
                     "4",
                     "--gloo-timeout-seconds",
                     "50",
                     "--tcp",
                     "cmd"});
  EnvMap t = tuning_env(o);
  CHECK(t == EnvMap{{"HOROVOD_FUSION_THRESHOLD", "33554432"},
                    {"HOROVOD_CYCLE_TIME", "5.0"},
                    {"HOROVOD_CACHE_CAPACITY", "0"},
                    {"HOROVOD_HIERARCHICAL_ALLREDUCE", "1"},
                    {"HOROVOD_HIERARCHICAL_ALLGATHER", "0"},
                    {"HOROVOD_TIMELINE", "t.json"},
                    {"HOROVOD_TIMELINE_MARK_CYCLES", "1"},
                    {"HOROVOD_STALL_CHECK_DISABLE", "1"},
                    {"HOROVOD_STALL_CHECK_TIME_SECONDS", "9"},
                    {"HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "19"},
                    {"HOROVOD_LOG_LEVEL", "INFO"},
                    {"HOROVOD_LOG_HIDE_TIME", "1"},
                    {"HOROVOD_NUM_NCCL_STREAMS", "2"},
                    {"HOROVOD_THREAD_AFFINITY", "4"},
                    {"HOROVOD_GLOO_TIMEOUT_SECONDS", "50"},
                    {"NCCL_IB_DISABLE", "1"}});
  // Autotune knobs only with --autotune, as horovodrun.
  auto off = parse_ok({"-np", "1", "--autotune-warmup-samples", "3", "cmd"});
  CHECK(tuning_env(off).empty());
  auto on = parse_ok({"-np", "1", "--autotune", "--autotune-warmup-samples", "3", "--autotune-log-file", "a.csv",
                      "--autotune-steps-per-sample", "7", "--autotune-bayes-opt-max-samples", "11",
                      "--autotune-gaussian-process-noise", "0.25", "cmd"});
  CHECK(tuning_env(on) == EnvMap{{"HOROVOD_AUTOTUNE", "1"},
                                 {"HOROVOD_AUTOTUNE_LOG", "a.csv"},
                                 {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", "3"},
                                 {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", "7"},
                                 {"HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES", "11"},
                                 {"HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.25"}});
  auto fractional = parse_ok({"-np", "1", "--fusion-threshold-mb", "0.5", "--cycle-time-ms", "0.1", "cmd"});
  CHECK(tuning_env(fractional).at("HOROVOD_FUSION_THRESHOLD") == "524288");
  CHECK(tuning_env(fractional).at("HOROVOD_CYCLE_TIME") == "0.1");
  // The timeline mark needs a timeline file.
  CHECK(tuning_env(parse_ok({"-np", "1", "--timeline-mark-cycles", "cmd"})).empty());
}

TEST_CASE("worker env: -x forwards or sets variables after everything else", "[env]") {
  Options o;
  o.env_exports = {"FOO", "SSH_AUTH_SOCK", "BAR=x=y", "EMPTY=", "HOROVOD_CONTROLLER=custom", "MISSING"};
  EnvMap env = build_common_env({{"FOO", "foo"}, {"SSH_AUTH_SOCK", "/agent"}}, o);
  CHECK(env.at("FOO") == "foo");
  CHECK(env.at("SSH_AUTH_SOCK") == "/agent");  // explicit -x beats the filter
  CHECK(env.at("BAR") == "x=y");
  CHECK(env.at("EMPTY").empty());
  CHECK(env.at("HOROVOD_CONTROLLER") == "custom");
  CHECK(env.count("MISSING") == 0);  // warned, not an error
}

TEST_CASE("worker env: rendezvous variables are added at run time", "[env]") {
  JobPlan plan;
  plan.workers.resize(2);
  add_rendezvous_env(plan, "10.0.0.1", 4242, "s3cr3t");
  for (const auto& w : plan.workers) {
    CHECK(w.env.at("HOROVOD_GLOO_RENDEZVOUS_ADDR") == "10.0.0.1");
    CHECK(w.env.at("HOROVOD_GLOO_RENDEZVOUS_PORT") == "4242");
    CHECK(w.env.at("HVDRUN_SECRET") == "s3cr3t");
  }
}

TEST_CASE("worker env: secret-looking names", "[env]") {
  CHECK(is_secret_name("HVDRUN_SECRET"));
  CHECK(is_secret_name("AWS_SECRET_ACCESS_KEY"));
  CHECK(is_secret_name("GITHUB_TOKEN"));
  CHECK(is_secret_name("db_password"));
  CHECK_FALSE(is_secret_name("HOROVOD_RANK"));
  CHECK_FALSE(is_secret_name("PATH"));
}

TEST_CASE("worker env: --torus-allreduce and --verbose reach the workers", "[env]") {
  CHECK(tuning_env(parse_ok({"-np", "1", "--torus-allreduce", "cmd"})) == EnvMap{{"HOROVOD_TORUS_ALLREDUCE", "1"}});
  CHECK(tuning_env(parse_ok({"-np", "1", "--no-torus-allreduce", "cmd"})) == EnvMap{{"HOROVOD_TORUS_ALLREDUCE", "0"}});
  CHECK(build_common_env({}, parse_ok({"-np", "1", "--verbose", "cmd"})).at("HVDRUN_VERBOSE") == "1");
  CHECK(build_common_env({}, parse_ok({"-np", "1", "cmd"})).count("HVDRUN_VERBOSE") == 0);
}

TEST_CASE("ineffective settings: one line per missing feature, naming the flag and its config key", "[env][warn]") {
  using V = std::vector<std::string>;
  CHECK(ineffective_setting_warnings(parse_ok({"-np", "1", "cmd"}), {}).empty());
  // Settings the library has, or that ask for nothing, warn about nothing.
  CHECK(ineffective_setting_warnings(parse_ok({"-np", "1", "--no-autotune", "--no-hierarchical-allreduce",
                                               "--no-torus-allreduce", "--num-nccl-streams", "1", "--thread-affinity",
                                               "0", "--gloo-timeout-seconds", "9", "--log-without-timestamp", "cmd"}),
                                     {})
            .empty());
  auto lines = ineffective_setting_warnings(
      parse_ok({"-np", "1", "--autotune", "--autotune-log-file", "a.csv", "--timeline-filename", "t.json",
                "--timeline-mark-cycles", "--hierarchical-allreduce", "--hierarchical-allgather", "--torus-allreduce",
                "--num-nccl-streams", "2", "cmd"}),
      {});
  // --autotune and its log, the timeline and the hierarchical switches act
  // (docs/collective.md).
  CHECK(lines == V{
                   "--torus-allreduce (params.torus_allreduce) has no effect yet: the collective library has no torus "
                   "allreduce; ignored",
                   "--num-nccl-streams (library_options.num_nccl_streams) has no effect yet: the collective library's "
                   "NCCL path uses one stream; ignored"});
  // Knobs without their switch do nothing either (not even exported).
  auto knobs = ineffective_setting_warnings(
      parse_ok({"-np", "1", "--autotune-warmup-samples", "3", "--timeline-mark-cycles", "cmd"}), {});
  REQUIRE(knobs.size() == 2);
  CHECK(knobs[0] ==
        "--autotune-warmup-samples (autotune.warmup_samples) has no effect yet: autotune is off (--autotune turns it "
        "on); ignored");
  CHECK(knobs[1] ==
        "--timeline-mark-cycles (timeline.mark_cycles) has no effect yet: cycle marks need "
        "--timeline-filename; ignored");
}

TEST_CASE("ineffective settings: HOROVOD_* variables the user sets for workers warn too", "[env][warn]") {
  // From hvdrun's own environment (forwarded to every worker).
  auto lines = ineffective_setting_warnings(parse_ok({"-np", "1", "cmd"}), {{"HOROVOD_AUTOTUNE", "1"},
                                                                            {"HOROVOD_TIMELINE", "/tmp/t.json"},
                                                                            {"HOROVOD_HIERARCHICAL_ALLGATHER", "0"},
                                                                            {"HOROVOD_NUM_NCCL_STREAMS", "1"},
                                                                            {"HOROVOD_TORUS_ALLREDUCE", "yes"}});
  // HOROVOD_AUTOTUNE and HOROVOD_TIMELINE act; so do the hierarchical switches.
  CHECK(lines.empty());
  // With autotune on only the Gaussian-process noise is ignored; the knobs act.
  auto tune = ineffective_setting_warnings(parse_ok({"-np", "1", "--autotune", "--autotune-warmup-samples", "2",
                                                     "--autotune-gaussian-process-noise", "0.5", "cmd"}),
                                           {});
  CHECK(tune == std::vector<std::string>{
                    "--autotune-gaussian-process-noise (autotune.gaussian_process_noise) has no effect yet: the "
                    "collective library's autotune searches a grid of settings, with no Gaussian process; ignored"});
  // -x NAME=VALUE wins over the environment; -x NAME forwards it.
  auto x =
      ineffective_setting_warnings(parse_ok({"-np", "1", "-x", "HOROVOD_AUTOTUNE=0", "-x", "HOROVOD_TORUS_ALLREDUCE=1",
                                             "-x", "HOROVOD_NUM_NCCL_STREAMS", "cmd"}),
                                   {{"HOROVOD_AUTOTUNE", "1"}, {"HOROVOD_NUM_NCCL_STREAMS", "4"}});
  CHECK(x == std::vector<std::string>{
                 "HOROVOD_TORUS_ALLREDUCE=1 has no effect yet: the collective library has no torus allreduce; ignored",
                 "HOROVOD_NUM_NCCL_STREAMS=4 has no effect yet: the collective library's NCCL path uses one stream; "
                 "ignored"});
  // Horovod switches no flag sets: from the environment or -x. The
  // controller and CPU operations are hvdrun's to set (gloo): a value in the
  // environment never reaches the workers (no line), one given by -x does.
  auto sw = ineffective_setting_warnings(
      parse_ok({"-np", "1", "-x", "HOROVOD_ENABLE_XLA_OPS=1", "-x", "HOROVOD_BATCH_D2D_MEMCOPIES=0", "cmd"}),
      {{"HOROVOD_DISABLE_GROUP_FUSION", "1"}, {"HOROVOD_CPU_OPERATIONS", "mpi"}, {"HOROVOD_CONTROLLER", "mpi"},
       {"HOROVOD_ENABLE_ASYNC_COMPLETION", "0"}});
  REQUIRE(sw.size() == 3);
  CHECK(sw[0].rfind("HOROVOD_DISABLE_GROUP_FUSION=1 has no effect yet: a grouped op is one op per tensor", 0) == 0);
  CHECK(sw[1].rfind("HOROVOD_BATCH_D2D_MEMCOPIES=0 has no effect yet: ", 0) == 0);
  CHECK(sw[2] == "HOROVOD_ENABLE_XLA_OPS=1 has no effect yet: there is no TensorFlow binding, so there are no XLA "
                 "ops; ignored");
  auto x_controller = ineffective_setting_warnings(
      parse_ok({"-np", "1", "-x", "HOROVOD_CONTROLLER=mpi", "-x", "HOROVOD_CPU_OPERATIONS", "cmd"}),
      {{"HOROVOD_CPU_OPERATIONS", "ccl"}});
  REQUIRE(x_controller.size() == 2);
  CHECK(x_controller[0].rfind("HOROVOD_CONTROLLER=mpi has no effect yet: ", 0) == 0);
  // -x NAME forwards hvdrun's own value of NAME, in place of gloo.
  CHECK(x_controller[1].rfind("HOROVOD_CPU_OPERATIONS=ccl has no effect yet: ", 0) == 0);
  // A flag names itself even when the variable is set as well.
  auto both = ineffective_setting_warnings(parse_ok({"-np", "1", "--torus-allreduce", "cmd"}),
                                           {{"HOROVOD_TORUS_ALLREDUCE", "1"}});
  REQUIRE(both.size() == 1);
  CHECK(both[0].rfind("--torus-allreduce (params.torus_allreduce) has no effect yet", 0) == 0);
}
