#include <cstdlib>

#include "test_util.h"

using namespace hvd::launcher;
using hvd_test::parse;
using hvd_test::parse_ok;

TEST_CASE("cli: -np -H and the worker command pass through untouched", "[cli]") {
  auto o = parse_ok({"-np", "2", "-H", "a:1,b:1", "python", "train.py", "--lr", "0.1", "-np", "3", "-H", "x"});
  REQUIRE(o.num_proc);
  CHECK(*o.num_proc == 2);
  CHECK(o.hosts == "a:1,b:1");
  CHECK(o.command == std::vector<std::string>{"python", "train.py", "--lr", "0.1", "-np", "3", "-H", "x"});
}

TEST_CASE("cli: long and legacy spellings", "[cli]") {
  auto o = parse_ok({"--num-proc=4", "-hostfile", "hf", "-prefix-timestamp", "--verbose", "cmd"});
  CHECK(*o.num_proc == 4);
  CHECK(o.hostfile == std::optional<std::string>("hf"));
  CHECK(o.prefix_output_with_timestamp);
  CHECK(o.verbose);
  auto cb = parse_ok({"-cb"});
  CHECK(cb.check_build);
  auto o2 = parse_ok({"-np=3", "--hosts=a:3", "-p22", "-i", "/k", "cmd"});
  CHECK(*o2.num_proc == 3);
  CHECK(o2.hosts == "a:3");
  CHECK(o2.ssh_port == std::optional<int>(22));
  CHECK(o2.ssh_identity_file == std::optional<std::string>("/k"));
}

TEST_CASE("cli: -- ends hvdrun's options", "[cli]") {
  auto o = parse_ok({"-np", "1", "--", "--weird-program", "-x"});
  CHECK(o.command == std::vector<std::string>{"--weird-program", "-x"});
}

TEST_CASE("cli: the -H a:2 b:2 typo is refused with a hint", "[cli]") {
  auto out = parse({"-np", "4", "-H", "a:2", "b:2", "python", "x.py"});
  CHECK_FALSE(out.options);
  CHECK(out.exit_code == exit_code::kUsage);
  CHECK(out.message == "hvdrun: error: 'b:2' looks like a host; join hosts with commas: -H a:2,b:2\n");
  auto out2 = parse({"-np", "4", "a:4", "python"});
  CHECK(out2.exit_code == exit_code::kUsage);
  CHECK(out2.message == "hvdrun: error: 'a:4' looks like a host, not a command; give hosts with -H a:4\n");
}

TEST_CASE("cli: usage errors are one line and exit 2", "[cli]") {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  std::vector<Case> cases = {
      {{"python", "x.py"}, "-np/--num-proc is required (e.g. hvdrun -np 4 python train.py)"},
      {{"-np", "2"}, "no command given (e.g. hvdrun -np 2 python train.py)"},
      {{"-np", "abc", "cmd"}, "-np 'abc' is not an integer"},
      {{"-np", "0", "cmd"}, "-np must be at least 1, not 0"},
      {{"-np", "2", "-H", "a:2", "--hostfile", "f", "cmd"},
       "-H/--hosts and --hostfile cannot be used together; give hosts one way"},
      {{"-np", "2", "--start-timeout", "x", "cmd"}, "--start-timeout 'x' is not an integer"},
      {{"-np", "2", "--fusion-threshold-mb", "-1", "cmd"}, "--fusion-threshold-mb must be >= 0, not -1"},
      {{"-np", "2", "--autotune-gaussian-process-noise", "2", "cmd"},
       "--autotune-gaussian-process-noise must be in [0, 1], not 2"},
      {{"-np", "2", "--log-level", "loud", "cmd"},
       "--log-level: log level 'loud' is not one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL"},
      {{"-np", "2", "--dry-run=yaml", "cmd"}, "--dry-run=yaml: expected --dry-run, --dry-run=text or --dry-run=json"},
      {{"-np", "2", "-x", "=v", "cmd"}, "-x '=v': expected -x NAME or -x NAME=VALUE"},
      {{"-np", "2", "-p", "70000", "cmd"}, "-p/--ssh-port 70000 is not a port number"},
  };
  for (const auto& c : cases) {
    auto out = parse(c.args);
    INFO(c.args.front() << " ... -> " << out.message);
    CHECK_FALSE(out.options);
    CHECK(out.exit_code == exit_code::kUsage);
    CHECK(out.message == "hvdrun: error: " + c.message + "\n");
    CHECK_FALSE(out.message_to_stdout);
  }
}

TEST_CASE("cli: unknown hvdrun options are usage errors naming the option", "[cli]") {
  auto out = parse({"-np", "2", "--no-such-flag", "python"});
  CHECK(out.exit_code == exit_code::kUsage);
  CHECK(out.message.find("--no-such-flag") != std::string::npos);
  CHECK(out.message.rfind("hvdrun: error: ", 0) == 0);
  CHECK(std::count(out.message.begin(), out.message.end(), '\n') == 1);
}

TEST_CASE("cli: --help and --version go to stdout with exit 0", "[cli]") {
  auto help = parse({"--help"});
  CHECK(help.exit_code == 0);
  CHECK(help.message_to_stdout);
  CHECK(help.message.find("--num-proc") != std::string::npos);
  CHECK(help.message.find("--dry-run") != std::string::npos);
  auto version = parse({"-v"});
  CHECK(version.exit_code == 0);
  CHECK(version.message_to_stdout);
  CHECK(version.message.rfind("hvdrun ", 0) == 0);
  CHECK(parse({"--version"}).message == version.message);
}

TEST_CASE("cli: flags of later issues parse and are refused with exit 4", "[cli]") {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  std::vector<Case> cases = {
      {{"--min-np", "2", "-np", "2", "cmd"}, "--min-np is not supported yet (elastic mode, issue 5)"},
      {{"--max-np", "4", "-np", "2", "cmd"}, "--max-np is not supported yet (elastic mode, issue 5)"},
      {{"--slots-per-host", "2", "cmd"}, "--slots-per-host is not supported yet (elastic mode, issue 5)"},
      {{"--host-discovery-script", "d.sh", "cmd"},
       "--host-discovery-script is not supported yet (elastic mode, issue 5)"},
      {{"--elastic-timeout", "60", "-np", "1", "cmd"},
       "--elastic-timeout is not supported yet (elastic mode, issue 5)"},
      {{"--reset-limit", "3", "-np", "1", "cmd"}, "--reset-limit is not supported yet (elastic mode, issue 5)"},
      {{"--blacklist-cooldown-range", "10", "100", "-np", "1", "cmd"},
       "--blacklist-cooldown-range is not supported yet (elastic mode, issue 5)"},
      {{"--jsrun", "-np", "1", "cmd"}, "--jsrun is not supported yet (jsrun/LSF mode)"},
      {{"--mpi-threads-disable", "-np", "1", "cmd"}, "--mpi-threads-disable is not supported yet (MPI mode, issue 4)"},
  };
  for (const auto& c : cases) {
    auto out = parse(c.args);
    INFO(c.args.front());
    CHECK_FALSE(out.options);
    CHECK(out.exit_code == exit_code::kNotSupported);
    CHECK(out.message == "hvdrun: error: " + c.message + "\n");
  }
  // The refusal wins over "-np is required" and the cooldown range takes
  // exactly two values (the command is not swallowed).
  CHECK(parse({"--min-np", "2", "python"}).exit_code == exit_code::kNotSupported);
}

TEST_CASE("cli: --gloo is accepted", "[cli]") {
  auto o = parse_ok({"--gloo", "-np", "1", "cmd"});
  CHECK(o.engine == Engine::Gloo);
  CHECK(parse_ok({"-np", "1", "cmd"}).engine == Engine::Native);
  CHECK(parse({"--gloo", "--mpi", "-np", "1", "cmd"}).exit_code != 0);
}

TEST_CASE("cli: --mpi and --mpi-args select the mpirun engine", "[cli]") {
  auto o = parse_ok({"--mpi", "--mpi-args=--map-by ppr:6:node", "-np", "2", "cmd"});
  CHECK(o.engine == Engine::Mpi);
  CHECK(o.mpi_args == std::optional<std::string>("--map-by ppr:6:node"));
}

TEST_CASE("cli: tuning flags fill TuningOptions", "[cli]") {
  auto o = parse_ok({"-np",
                     "1",
                     "--fusion-threshold-mb",
                     "32",
                     "--cycle-time-ms",
                     "2.5",
                     "--cache-capacity",
                     "0",
                     "--hierarchical-allreduce",
                     "--no-hierarchical-allgather",
                     "--autotune",
                     "--autotune-log-file",
                     "at.csv",
                     "--autotune-warmup-samples",
                     "5",
                     "--autotune-steps-per-sample",
                     "20",
                     "--autotune-bayes-opt-max-samples",
                     "30",
                     "--autotune-gaussian-process-noise",
                     "0.5",
                     "--timeline-filename",
                     "tl.json",
                     "--timeline-mark-cycles",
                     "--no-stall-check",
                     "--stall-check-warning-time-seconds",
                     "120",
                     "--stall-check-shutdown-time-seconds",
                     "240",
                     "--log-level",
                     "debug",
                     "--log-without-timestamp",
                     "--num-nccl-streams",
                     "2",
                     "--thread-affinity",
                     "3",
                     "--gloo-timeout-seconds",
                     "45",
                     "--tcp",
                     "cmd"});
  const auto& t = o.tuning;
  CHECK(t.fusion_threshold_mb == std::optional<double>(32));
  CHECK(t.cycle_time_ms == std::optional<double>(2.5));
  CHECK(t.cache_capacity == std::optional<long>(0));
  CHECK(t.hierarchical_allreduce == std::optional<bool>(true));
  CHECK(t.hierarchical_allgather == std::optional<bool>(false));
  CHECK(t.autotune == std::optional<bool>(true));
  CHECK(t.autotune_log_file == std::optional<std::string>("at.csv"));
  CHECK(t.autotune_warmup_samples == std::optional<long>(5));
  CHECK(t.autotune_steps_per_sample == std::optional<long>(20));
  CHECK(t.autotune_bayes_opt_max_samples == std::optional<long>(30));
  CHECK(t.autotune_gaussian_process_noise == std::optional<double>(0.5));
  CHECK(t.timeline_filename == std::optional<std::string>("tl.json"));
  CHECK(t.timeline_mark_cycles == std::optional<bool>(true));
  CHECK(t.no_stall_check == std::optional<bool>(true));
  CHECK(t.stall_check_warning_time_seconds == std::optional<long>(120));
  CHECK(t.stall_check_shutdown_time_seconds == std::optional<long>(240));
  CHECK(t.log_level == std::optional<std::string>("DEBUG"));
  CHECK(t.log_hide_timestamp == std::optional<bool>(true));
  CHECK(t.num_nccl_streams == std::optional<long>(2));
  CHECK(t.thread_affinity == std::optional<long>(3));
  CHECK(t.gloo_timeout_seconds == std::optional<long>(45));
  CHECK(o.tcp_flag);
  // Unset flags stay unset (no variable for workers).
  auto plain = parse_ok({"-np", "1", "cmd"});
  CHECK_FALSE(plain.tuning.fusion_threshold_mb);
  CHECK_FALSE(plain.tuning.autotune);
}

TEST_CASE("cli: a flag and its --no- form together are refused", "[cli]") {
  auto out = parse({"-np", "1", "--hierarchical-allreduce", "--no-hierarchical-allreduce", "cmd"});
  CHECK(out.exit_code == exit_code::kUsage);
  CHECK(out.message ==
        "hvdrun: error: --hierarchical-allreduce and --no-hierarchical-allreduce contradict each other\n");
  CHECK(parse({"-np", "1", "--log-hide-timestamp", "--log-with-timestamp", "cmd"}).exit_code == exit_code::kUsage);
}

TEST_CASE("cli: hvdrun additions", "[cli]") {
  auto o = parse_ok({"-np",
                     "2",
                     "--dry-run",
                     "-x",
                     "FOO",
                     "-x",
                     "BAR=1=2",
                     "-xBAZ=3",
                     "--forward-loader-env",
                     "--insecure-store",
                     "--kill-grace-ms",
                     "500",
                     "--ssh-strict-host-key-checking",
                     "--network-interface",
                     "eth0,eth1",
                     "--network-interfaces",
                     "eth1",
                     "--network-interface",
                     "ib0",
                     "cmd",
                     "arg"});
  CHECK(o.dry_run == DryRunFormat::Text);
  CHECK(o.env_exports == std::vector<std::string>{"FOO", "BAR=1=2", "BAZ=3"});
  CHECK(o.forward_loader_env);
  CHECK(o.insecure_store);
  CHECK(o.kill_grace == std::chrono::milliseconds(500));
  CHECK(o.ssh_strict_host_key_checking);
  CHECK(o.network_interfaces == std::vector<std::string>{"eth0", "eth1", "ib0"});
  CHECK(o.command == std::vector<std::string>{"cmd", "arg"});
  // --dry-run never takes the command as its value.
  auto j = parse_ok({"-np", "1", "--dry-run=json", "cmd"});
  CHECK(j.dry_run == DryRunFormat::Json);
  auto t = parse_ok({"-np", "1", "--dry-run", "json"});
  CHECK(t.dry_run == DryRunFormat::Text);
  CHECK(t.command == std::vector<std::string>{"json"});
}

TEST_CASE("cli: --start-timeout defaults to 30 then HOROVOD_START_TIMEOUT then the flag", "[cli]") {
  unsetenv("HOROVOD_START_TIMEOUT");
  CHECK(parse_ok({"-np", "1", "cmd"}).start_timeout == std::chrono::seconds(30));
  setenv("HOROVOD_START_TIMEOUT", "45", 1);
  CHECK(parse_ok({"-np", "1", "cmd"}).start_timeout == std::chrono::seconds(45));
  CHECK(parse_ok({"-np", "1", "--start-timeout", "7", "cmd"}).start_timeout == std::chrono::seconds(7));
  setenv("HOROVOD_START_TIMEOUT", "soon", 1);
  auto bad = parse({"-np", "1", "cmd"});
  CHECK(bad.exit_code == exit_code::kUsage);
  CHECK(bad.message == "hvdrun: error: HOROVOD_START_TIMEOUT='soon' is not a positive number of seconds\n");
  unsetenv("HOROVOD_START_TIMEOUT");
}
