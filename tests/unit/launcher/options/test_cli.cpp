#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "options_test_util.h"

#include <spdlog/spdlog.h>

using namespace hvd::launcher;
using hvd_test::DiscoveryScript;
using hvd_test::parse;
using hvd_test::parse_ok;
using hvd_test::TempFile;
using hvd_test::usage_error;

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
  TempFile key("not really a key");
  auto o2 = parse_ok({"-np=3", "--hosts=a:3", "-p22", "-i", key.path(), "cmd"});
  CHECK(*o2.num_proc == 3);
  CHECK(o2.hosts == "a:3");
  CHECK(o2.ssh_port == std::optional<int>(22));
  CHECK(o2.ssh_identity_file == std::optional<std::string>(key.path()));
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

TEST_CASE("cli: without -np parsing leaves the platform question to choose_host_source", "[cli]") {
  // Parsing does not look for a platform (it never reads the machine): the
  // host-source layer asks the Environment, and without a platform -np is
  // required there.
  const Options o = hvd_test::parse_ok({"python", "x.py"});
  CHECK_FALSE(o.num_proc);
  CHECK(hvd_test::invalid_message([&] { choose_host_source(o, Environment{}); }) ==
        "-np/--num-proc is required (e.g. hvdrun -np 4 python train.py)");
  const Environment slurm{"", {{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "n[1-2]"}}, "n1"};
  CHECK(*choose_host_source(o, slurm).options.num_proc == 2);
}

TEST_CASE("cli: usage errors are one line and exit 2", "[cli]") {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  std::vector<Case> cases = {
      // Without -np and with hosts given (or --hosts-from none) no platform can
      // give the slots: an error while parsing. Otherwise choose_host_source
      // decides (below): parsing never reads the machine.
      {{"-H", "a:1", "python", "x.py"}, "-np/--num-proc is required (e.g. hvdrun -np 4 python train.py)"},
      {{"--hosts-from", "none", "python", "x.py"}, "-np/--num-proc is required (e.g. hvdrun -np 4 python train.py)"},
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
      {{"-np", "2", "--cycle-time-ms", "nan", "cmd"}, "--cycle-time-ms must be >= 0, not nan"},
      {{"-np", "2", "--autotune-gaussian-process-noise", "nan", "cmd"},
       "--autotune-gaussian-process-noise must be in [0, 1], not nan"},
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

TEST_CASE("cli: --help: the usage line names the program as invoked", "[cli]") {
  std::vector<std::string> args = {"/usr/local/bin/horovodrun", "--help"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const auto out = parse_command_line(static_cast<int>(args.size()), argv.data());
  CHECK(out.exit_code == 0);
  CHECK(out.message.find("Usage: horovodrun -np N ") != std::string::npos);
  CHECK(parse({"--help"}).message.find("Usage: hvdrun -np N ") != std::string::npos);
}

TEST_CASE("cli: a missing or unusable -i/--ssh-identity-file is a usage error even with local hosts", "[cli][ssh]") {
  CHECK(usage_error({"-np", "1", "-i", "/nonexistent/id_rsa", "cmd"}) ==
        "-i/--ssh-identity-file '/nonexistent/id_rsa': No such file or directory");
  CHECK(usage_error({"-np", "1", "-H", "localhost:1", "--ssh-identity-file=/nonexistent/k", "cmd"}) ==
        "-i/--ssh-identity-file '/nonexistent/k': No such file or directory");
  CHECK(usage_error({"-np", "1", "-i", "/tmp", "cmd"}) ==
        "-i/--ssh-identity-file '/tmp' is a directory, not a key file");
  // Checked before the mode is chosen: --check-build and --dry-run too.
  CHECK(usage_error({"-cb", "-i", "/nonexistent/k"}) ==
        "-i/--ssh-identity-file '/nonexistent/k': No such file or directory");
  CHECK(usage_error({"-np", "1", "--dry-run", "-i", "/nonexistent/k", "cmd"}) ==
        "-i/--ssh-identity-file '/nonexistent/k': No such file or directory");
  TempFile key("-----BEGIN OPENSSH PRIVATE KEY-----\n");
  CHECK(parse_ok({"-np", "1", "-i", key.path(), "cmd"}).ssh_identity_file == std::optional<std::string>(key.path()));
  if (::geteuid() != 0) {  // root reads any file
    REQUIRE(::chmod(key.path().c_str(), 0) == 0);
    CHECK(usage_error({"-np", "1", "-i", key.path(), "cmd"}) ==
          "-i/--ssh-identity-file '" + key.path() + "' is not readable: Permission denied");
  }
}

TEST_CASE("cli: flags of later features parse and are refused with exit 4", "[cli]") {
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  std::vector<Case> cases = {
      {{"--jsrun", "-np", "1", "cmd"}, "--jsrun is not supported yet (jsrun/LSF mode)"},
  };
  for (const auto& c : cases) {
    auto out = parse(c.args);
    INFO(c.args.front());
    CHECK_FALSE(out.options);
    CHECK(out.exit_code == exit_code::kNotSupported);
    CHECK(out.message == "hvdrun: error: " + c.message + "\n");
  }
  // The refusal wins over "-np is required".
  CHECK(parse({"--jsrun", "python"}).exit_code == exit_code::kNotSupported);
}

TEST_CASE("cli: elastic flags fill ElasticOptions", "[cli][elastic]") {
  DiscoveryScript script;
  auto o = parse_ok({"--host-discovery-script",
                     script.path(),
                     "--min-np",
                     "2",
                     "--max-np",
                     "8",
                     "-np",
                     "4",
                     "--slots-per-host",
                     "2",
                     "--elastic-timeout",
                     "30",
                     "--reset-limit",
                     "5",
                     "--blacklist-cooldown-range",
                     "10",
                     "100",
                     "--discovery-interval",
                     "0.25",
                     "--discovery-timeout",
                     "3",
                     "--blacklist-failures",
                     "2",
                     "--blacklist-window",
                     "30.5",
                     "--elastic-drain-timeout",
                     "120",
                     "python",
                     "train.py",
                     "--min-np",
                     "9"});
  const ElasticOptions& e = o.elastic;
  CHECK(e.host_discovery_script == std::optional<std::string>(script.path()));
  CHECK(e.min_np == std::optional<int>(2));
  CHECK(e.max_np == std::optional<int>(8));
  CHECK(o.num_proc == std::optional<int>(4));
  CHECK(e.slots_per_host == std::optional<int>(2));
  CHECK(e.elastic_timeout == std::chrono::seconds(30));
  CHECK(e.reset_limit == std::optional<int>(5));
  CHECK(e.blacklist_cooldown_range == std::optional<std::pair<int, int>>(std::make_pair(10, 100)));
  CHECK(e.discovery_interval == std::chrono::milliseconds(250));
  CHECK(e.discovery_timeout == std::chrono::milliseconds(3000));
  CHECK(e.blacklist_failures == 2);
  CHECK(e.blacklist_window == std::chrono::milliseconds(30500));
  CHECK(e.drain_timeout == std::chrono::milliseconds(120000));
  // The worker's own flags are untouched.
  CHECK(o.command == std::vector<std::string>{"python", "train.py", "--min-np", "9"});
  // horovodrun's long aliases.
  auto a = parse_ok(
      {"--host-discovery-script", script.path(), "--min-num-proc", "1", "--max-num-proc", "3", "-np", "2", "cmd"});
  CHECK(a.elastic.min_np == std::optional<int>(1));
  CHECK(a.elastic.max_np == std::optional<int>(3));
}

TEST_CASE("cli: elastic defaults, -np defaults to --min-np", "[cli][elastic]") {
  unsetenv("HOROVOD_ELASTIC_TIMEOUT");
  DiscoveryScript script;
  auto o = parse_ok({"--host-discovery-script", script.path(), "-np", "2", "cmd"});
  const ElasticOptions& e = o.elastic;
  CHECK_FALSE(e.min_np);
  CHECK_FALSE(e.max_np);
  CHECK_FALSE(e.slots_per_host);
  CHECK_FALSE(e.reset_limit);
  CHECK_FALSE(e.blacklist_cooldown_range);
  CHECK(e.elastic_timeout == std::chrono::seconds(600));
  CHECK(e.discovery_interval == std::chrono::milliseconds(1000));
  CHECK(e.discovery_timeout == std::chrono::milliseconds(10000));
  CHECK(e.blacklist_failures == 3);
  CHECK(e.blacklist_window == std::chrono::milliseconds(60000));
  CHECK(e.drain_timeout == std::chrono::milliseconds(60000));
  // 0 is allowed (stop at once); fractions and negatives are not.
  CHECK(parse_ok({"--host-discovery-script", script.path(), "--elastic-drain-timeout", "0", "-np", "2", "cmd"})
            .elastic.drain_timeout == std::chrono::milliseconds(0));
  CHECK(parse({"--host-discovery-script", script.path(), "--elastic-drain-timeout", "-1", "-np", "2", "cmd"})
            .exit_code == exit_code::kUsage);
  CHECK(parse({"--host-discovery-script", script.path(), "--elastic-drain-timeout", "1.5", "-np", "2", "cmd"})
            .exit_code == exit_code::kUsage);
  auto m = parse_ok({"--host-discovery-script", script.path(), "--min-np", "3", "cmd"});
  CHECK(m.num_proc == std::optional<int>(3));
  // A shell command (with spaces) is not checked for existence; a command
  // in PATH is accepted as one word.
  CHECK(parse_ok({"--host-discovery-script", "echo localhost:2", "-np", "1", "cmd"}).elastic.host_discovery_script ==
        std::optional<std::string>("echo localhost:2"));
  CHECK(parse_ok({"--host-discovery-script", "true", "-np", "1", "cmd"}).elastic.host_discovery_script ==
        std::optional<std::string>("true"));
  // Not elastic: no script, nothing set.
  auto plain = parse_ok({"-np", "1", "cmd"});
  CHECK_FALSE(plain.elastic.host_discovery_script);
}

TEST_CASE("cli: --elastic-timeout defaults to 600 then HOROVOD_ELASTIC_TIMEOUT then the flag", "[cli][elastic]") {
  DiscoveryScript script;
  const std::vector<std::string> base = {"--host-discovery-script", script.path(), "-np", "1"};
  auto with = [&](std::vector<std::string> extra) {
    auto args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back("cmd");
    return args;
  };
  setenv("HOROVOD_ELASTIC_TIMEOUT", "45", 1);
  CHECK(parse_ok(with({})).elastic.elastic_timeout == std::chrono::seconds(45));
  CHECK(parse_ok(with({"--elastic-timeout", "7"})).elastic.elastic_timeout == std::chrono::seconds(7));
  setenv("HOROVOD_ELASTIC_TIMEOUT", "soon", 1);
  auto bad = parse(with({}));
  CHECK(bad.exit_code == exit_code::kUsage);
  CHECK(bad.message == "hvdrun: error: HOROVOD_ELASTIC_TIMEOUT='soon' is not a positive number of seconds\n");
  // Not read at all outside elastic mode.
  CHECK(parse({"-np", "1", "cmd"}).options.has_value());
  setenv("HOROVOD_ELASTIC_TIMEOUT", "0", 1);  // workers would refuse 0: refuse it here
  CHECK(parse(with({})).exit_code == exit_code::kUsage);
  unsetenv("HOROVOD_ELASTIC_TIMEOUT");
  CHECK(parse(with({"--elastic-timeout", "0"})).exit_code == exit_code::kUsage);
  CHECK(parse_ok(with({})).elastic.elastic_timeout == std::chrono::seconds(600));
}

TEST_CASE("cli: elastic flags without --host-discovery-script or --min-np are usage errors", "[cli][elastic]") {
  std::vector<std::vector<std::string>> flags = {
      {"--max-np", "4"},
      {"--slots-per-host", "2"},
      {"--elastic-timeout", "60"},
      {"--reset-limit", "3"},
      {"--blacklist-cooldown-range", "10", "100"},
      {"--discovery-interval", "2"},
      {"--discovery-timeout", "5"},
      {"--blacklist-failures", "2"},
      {"--blacklist-window", "30"},
      {"--elastic-drain-timeout", "30"},
  };
  for (const auto& f : flags) {
    std::vector<std::string> args = f;
    // --hosts-from none: --slots-per-host also applies to a platform's hosts (docs/platforms.md).
    args.insert(args.end(), {"--hosts-from", "none", "-np", "2", "cmd"});
    auto out = parse(args);
    INFO(f.front() << " -> " << out.message);
    CHECK_FALSE(out.options);
    CHECK(out.exit_code == exit_code::kUsage);
    CHECK(out.message == "hvdrun: error: " + f.front() + " needs --host-discovery-script or --min-np (elastic mode)\n");
  }
  // The alias is reported under the main name.
  CHECK(parse({"--max-num-proc", "2", "-np", "2", "cmd"}).message ==
        "hvdrun: error: --max-np needs --host-discovery-script or --min-np (elastic mode)\n");
}

TEST_CASE("cli: --min-np without a script is elastic mode on fixed hosts (horovodrun's rule)", "[cli][elastic]") {
  const Options o = parse_ok({"--min-num-proc", "1", "-np", "2", "-H", "localhost:2", "--max-np", "2", "cmd"});
  CHECK(o.elastic.enabled);
  CHECK_FALSE(o.elastic.host_discovery_script);
  CHECK(o.elastic.min_np == 1);
  CHECK(o.elastic.max_np == 2);
  CHECK(o.hosts == "localhost:2");
  // Without -np the job starts at --min-np, as with a script.
  CHECK(parse_ok({"--min-np", "2", "--hostfile", "hosts", "cmd"}).num_proc == 2);
  // A static job stays static.
  CHECK_FALSE(parse_ok({"-np", "2", "cmd"}).elastic.enabled);
  auto usage = [](std::vector<std::string> args) {
    auto out = parse(args);
    CHECK(out.exit_code == exit_code::kUsage);
    return out.message;
  };
  CHECK(usage({"--min-np", "1", "-np", "2", "--slots-per-host", "2", "cmd"}) ==
        "hvdrun: error: --slots-per-host applies to --host-discovery-script output; with fixed hosts give the "
        "slots in -H (host:N) or the hostfile\n");
  CHECK(usage({"--min-np", "1", "-np", "2", "--mpi", "cmd"}) ==
        "hvdrun: error: --min-np (elastic mode) cannot be used with --mpi: elastic jobs use hvdrun's own "
        "controller\n");
}

TEST_CASE("cli: elastic usage errors are one line and exit 2", "[cli][elastic]") {
  DiscoveryScript script;
  const std::string& s = script.path();
  TempFile not_executable("#!/bin/sh\n", ".sh");
  struct Case {
    std::vector<std::string> args;
    std::string message;
  };
  std::vector<Case> cases = {
      {{"--host-discovery-script", s, "-H", "a:2", "-np", "2", "cmd"},
       "--host-discovery-script and -H/--hosts cannot be used together: in elastic mode the discovery script "
       "lists the hosts"},
      {{"--host-discovery-script", s, "--hostfile", "hf", "-np", "2", "cmd"},
       "--host-discovery-script and --hostfile cannot be used together: in elastic mode the discovery script "
       "lists the hosts"},
      {{"--host-discovery-script", s, "--mpi", "-np", "2", "cmd"},
       "--host-discovery-script (elastic mode) cannot be used with --mpi: elastic jobs use hvdrun's own "
       "controller"},
      {{"--host-discovery-script", s, "cmd"},
       "-np or --min-np is required in elastic mode (e.g. hvdrun --min-np 2 --host-discovery-script "
       "./discover.sh python train.py)"},
      {{"--host-discovery-script", s, "--min-np", "4", "-np", "2", "cmd"}, "--min-np 4 is greater than -np 2"},
      {{"--host-discovery-script", s, "--max-np", "4", "-np", "8", "cmd"}, "-np 8 is greater than --max-np 4"},
      {{"--host-discovery-script", s, "--min-np", "4", "--max-np", "2", "cmd"},
       "--min-np 4 is greater than --max-np 2"},
      {{"--host-discovery-script", s, "--blacklist-cooldown-range", "10", "5", "-np", "1", "cmd"},
       "--blacklist-cooldown-range: MIN 10 is greater than MAX 5"},
      {{"--host-discovery-script", s, "--blacklist-cooldown-range", "-1", "5", "-np", "1", "cmd"},
       "--blacklist-cooldown-range: '-1' is not a number of seconds >= 0"},
      {{"--host-discovery-script", s, "--min-np", "-1", "cmd"}, "--min-np must be at least 1, not -1"},
      {{"--host-discovery-script", s, "--max-np", "0", "-np", "1", "cmd"}, "--max-np must be at least 1, not 0"},
      {{"--host-discovery-script", s, "--slots-per-host", "0", "-np", "1", "cmd"},
       "--slots-per-host must be at least 1, not 0"},
      {{"--host-discovery-script", s, "--elastic-timeout", "-5", "-np", "1", "cmd"},
       "--elastic-timeout must be at least 1, not -5"},
      {{"--host-discovery-script", s, "--reset-limit", "-1", "-np", "1", "cmd"},
       "--reset-limit must be at least 0, not -1"},
      {{"--host-discovery-script", s, "--discovery-interval", "0", "-np", "1", "cmd"},
       "--discovery-interval must be a number of seconds > 0, not 0"},
      {{"--host-discovery-script", s, "--discovery-timeout", "soon", "-np", "1", "cmd"},
       "--discovery-timeout 'soon' is not a number of seconds"},
      {{"--host-discovery-script", s, "--blacklist-failures", "0", "-np", "1", "cmd"},
       "--blacklist-failures must be at least 1, not 0"},
      {{"--host-discovery-script", s, "--blacklist-window", "-3", "-np", "1", "cmd"},
       "--blacklist-window must be a number of seconds > 0, not -3"},
      {{"--host-discovery-script", "/nonexistent/discover.sh", "-np", "1", "cmd"},
       "--host-discovery-script '/nonexistent/discover.sh': No such file or directory"},
      {{"--host-discovery-script", "/tmp", "-np", "1", "cmd"}, "--host-discovery-script '/tmp' is a directory"},
      {{"--host-discovery-script", not_executable.path(), "-np", "1", "cmd"},
       "--host-discovery-script '" + not_executable.path() + "' is not executable (chmod +x " + not_executable.path() +
           ")"},
      {{"--host-discovery-script", "no-such-discovery-command", "-np", "1", "cmd"},
       "--host-discovery-script 'no-such-discovery-command': no such file or command"},
      {{"--host-discovery-script", "", "-np", "1", "cmd"},
       "--host-discovery-script: empty script (expected e.g. --host-discovery-script ./discover.sh)"},
  };
  for (const auto& c : cases) {
    auto out = parse(c.args);
    INFO(c.args[1] << " " << c.args[2] << " -> " << out.message);
    CHECK_FALSE(out.options);
    CHECK(out.exit_code == exit_code::kUsage);
    CHECK(out.message == "hvdrun: error: " + c.message + "\n");
  }
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
  // HOROVOD_MPI_ARGS is the default; the flag wins over it.
  setenv("HOROVOD_MPI_ARGS", "-mca btl_tcp_if_include eth0", 1);
  CHECK(parse_ok({"--mpi", "-np", "2", "cmd"}).mpi_args == std::optional<std::string>("-mca btl_tcp_if_include eth0"));
  CHECK(parse_ok({"--mpi", "--mpi-args", "-v", "-np", "2", "cmd"}).mpi_args == std::optional<std::string>("-v"));
  unsetenv("HOROVOD_MPI_ARGS");
  CHECK_FALSE(parse_ok({"--mpi", "-np", "2", "cmd"}).mpi_args);
}

TEST_CASE("cli: --mpi-threads-disable becomes HOROVOD_MPI_THREADS_DISABLE", "[cli]") {
  CHECK(parse_ok({"--mpi-threads-disable", "-np", "1", "cmd"}).tuning.mpi_threads_disable == std::optional<bool>(true));
  CHECK(parse_ok({"--no-mpi-threads-disable", "-np", "1", "cmd"}).tuning.mpi_threads_disable ==
        std::optional<bool>(false));
  CHECK_FALSE(parse_ok({"-np", "1", "cmd"}).tuning.mpi_threads_disable);
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
                     "--ssh-keepalive",
                     "2",
                     "--events-file",
                     "/tmp/ev.jsonl",
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
  CHECK(o.ssh_keepalive == std::chrono::seconds(2));
  CHECK(o.events_file == std::optional<std::string>("/tmp/ev.jsonl"));
  CHECK(parse({"-np", "1", "--events-file", "", "cmd"}).exit_code == exit_code::kUsage);
  CHECK(parse_ok({"-np", "1", "cmd"}).ssh_keepalive == std::chrono::seconds(5));
  CHECK(parse({"-np", "1", "--ssh-keepalive", "0", "cmd"}).exit_code == exit_code::kUsage);
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

TEST_CASE("cli: the launcher is quiet by default - --log-level, HVDRUN_LOG_LEVEL and --verbose govern it", "[cli]") {
  unsetenv("HOROVOD_LOG_LEVEL");
  unsetenv("HVDRUN_LOG_LEVEL");
  auto level_after = [](std::vector<std::string> args) {
    parse_ok(std::move(args));
    return spdlog::default_logger()->level();
  };
  // horovodrun's default: nothing of the launcher's own on a successful job.
  CHECK(level_after({"-np", "2", "true"}) == spdlog::level::warn);
  CHECK(level_after({"-np", "2", "--log-level", "INFO", "true"}) == spdlog::level::info);
  CHECK(level_after({"-np", "2", "--log-level", "error", "true"}) == spdlog::level::err);
  CHECK(level_after({"-np", "2", "--verbose", "--log-level", "ERROR", "true"}) == spdlog::level::debug);
  setenv("HOROVOD_LOG_LEVEL", "info", 1);
  CHECK(level_after({"-np", "2", "true"}) == spdlog::level::info);
  CHECK(level_after({"-np", "2", "--log-level", "WARNING", "true"}) == spdlog::level::warn);  // the flag wins
  setenv("HVDRUN_LOG_LEVEL", "debug", 1);  // the launcher's own level wins over the job's
  CHECK(level_after({"-np", "2", "--log-level", "WARNING", "true"}) == spdlog::level::debug);
  setenv("HVDRUN_LOG_LEVEL", "loud", 1);  // not a level: named in a warning, the next source decides
  CHECK(level_after({"-np", "2", "true"}) == spdlog::level::info);
  unsetenv("HVDRUN_LOG_LEVEL");
  unsetenv("HOROVOD_LOG_LEVEL");
  CHECK(level_after({"-np", "2", "true"}) == spdlog::level::warn);
}
