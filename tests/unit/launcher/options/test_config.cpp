#include <sys/stat.h>

#include "../test_util.h"
#include "hvd/launcher/options/config_file.h"

using namespace hvd::launcher;
using hvd_test::invalid_message;
using hvd_test::parse;
using hvd_test::parse_ok;
using hvd_test::TempFile;

namespace {

const char* kFullConfig = R"(# horovodrun layout
controller: gloo
params:
  fusion_threshold_mb: 32
  cycle_time_ms: 10
  cache_capacity: 2048
  hierarchical_allreduce: true
  hierarchical_allgather: false
autotune:
  enabled: true
  log_file: /tmp/autotune.csv
  warmup_samples: 5
  steps_per_sample: 20
  bayes_opt_max_samples: 50
  gaussian_process_noise: 0.9
timeline:
  filename: /tmp/timeline.json
  mark_cycles: true
stall_check:
  enabled: false
  warning_time_seconds: 120
  shutdown_time_seconds: 600
library_options:
  num_nccl_streams: 2
  thread_affinity: 1
  gloo_timeout_seconds: 60
logging:
  level: warning
  with_timestamp: false
)";

}  // namespace

TEST_CASE("config: horovodrun's layout fills every tuning field", "[config]") {
  auto v = parse_config_text(kFullConfig, "c.yaml");
  const auto& t = v.options.tuning;
  CHECK(v.sets(*find_flag("--gloo")));
  CHECK(v.options.engine == Engine::Gloo);
  CHECK(t.fusion_threshold_mb == std::optional<double>(32));
  CHECK(t.cycle_time_ms == std::optional<double>(10));
  CHECK(t.cache_capacity == std::optional<long>(2048));
  CHECK(t.hierarchical_allreduce == std::optional<bool>(true));
  CHECK(t.hierarchical_allgather == std::optional<bool>(false));
  CHECK(t.autotune == std::optional<bool>(true));
  CHECK(t.autotune_log_file == std::optional<std::string>("/tmp/autotune.csv"));
  CHECK(t.autotune_warmup_samples == std::optional<long>(5));
  CHECK(t.autotune_steps_per_sample == std::optional<long>(20));
  CHECK(t.autotune_bayes_opt_max_samples == std::optional<long>(50));
  CHECK(t.autotune_gaussian_process_noise == std::optional<double>(0.9));
  CHECK(t.timeline_filename == std::optional<std::string>("/tmp/timeline.json"));
  CHECK(t.timeline_mark_cycles == std::optional<bool>(true));
  CHECK(t.no_stall_check == std::optional<bool>(true));
  CHECK(t.stall_check_warning_time_seconds == std::optional<long>(120));
  CHECK(t.stall_check_shutdown_time_seconds == std::optional<long>(600));
  CHECK(t.num_nccl_streams == std::optional<long>(2));
  CHECK(t.thread_affinity == std::optional<long>(1));
  CHECK(t.gloo_timeout_seconds == std::optional<long>(60));
  CHECK(t.log_level == std::optional<std::string>("WARNING"));
  CHECK(t.log_hide_timestamp == std::optional<bool>(true));
  CHECK_FALSE(v.elastic_given());
}

TEST_CASE("config: wrong types name file line and key", "[config]") {
  auto msg = [](const std::string& text) { return invalid_message([&] { parse_config_text(text, "config.yaml"); }); };
  CHECK(msg("params:\n  fusion_threshold_mb: lots\n") ==
        "config.yaml:2: params.fusion_threshold_mb: expected a number, got 'lots'");
  CHECK(msg("# c\n\nautotune:\n  enabled: true\n  warmup_samples: 1.5\n") ==
        "config.yaml:5: autotune.warmup_samples: expected an integer, got '1.5'");
  CHECK(msg("params:\n  hierarchical_allreduce: maybe\n") ==
        "config.yaml:2: params.hierarchical_allreduce: expected true or false, got 'maybe'");
  CHECK(msg("params:\n  cache_capacity: -3\n") ==
        "config.yaml:2: params.cache_capacity: expected an integer >= 0, got '-3'");
  CHECK(msg("autotune:\n  gaussian_process_noise: 3\n") ==
        "config.yaml:2: autotune.gaussian_process_noise: expected a number in [0, 1], got '3'");
  CHECK(msg("timeline:\n  filename: [a, b]\n") == "config.yaml:2: timeline.filename: expected a string, got a list");
  CHECK(msg("logging:\n  level: loud\n") ==
        "config.yaml:2: logging.level: expected one of TRACE, DEBUG, INFO, WARNING, ERROR, FATAL, got 'loud'");
  CHECK(msg("params: 3\n") == "config.yaml:1: params: expected a mapping of settings");
  CHECK(msg("controller: nccl\n") == "config.yaml:1: controller: expected gloo or mpi, got 'nccl'");
  CHECK(msg("params:\n  a: [1,\n").rfind("config.yaml:", 0) == 0);
  CHECK(msg("- 1\n- 2\n") == "config.yaml:1: expected a mapping of sections (params:, autotune:, ...)");
}

TEST_CASE("config: unknown keys are ignored (with a warning) empty files are fine", "[config]") {
  auto v = parse_config_text("params:\n  fusion_threshold_mb: 1\n  fusion_treshold: 2\nextra: 1\n", "c.yaml");
  CHECK(v.options.tuning.fusion_threshold_mb == std::optional<double>(1));
  auto empty = parse_config_text("", "c.yaml");
  CHECK_FALSE(empty.options.tuning.fusion_threshold_mb);
  CHECK(empty.given.empty());
  auto null_section = parse_config_text("params:\nautotune:\n", "c.yaml");
  CHECK_FALSE(null_section.options.tuning.autotune);
}

TEST_CASE("config: the command line overrides the file - the file fills the rest", "[config]") {
  TempFile f(kFullConfig, ".yaml");
  auto o = parse_ok({"-np", "1", "--config-file", f.path(), "--fusion-threshold-mb", "64",
                     "--no-hierarchical-allreduce", "--stall-check", "cmd"});
  CHECK(o.tuning.fusion_threshold_mb == std::optional<double>(64));
  CHECK(o.tuning.hierarchical_allreduce == std::optional<bool>(false));
  CHECK(o.tuning.no_stall_check == std::optional<bool>(false));
  CHECK(o.tuning.cycle_time_ms == std::optional<double>(10));
  CHECK(o.tuning.log_level == std::optional<std::string>("WARNING"));
  // Order on the command line does not matter (horovodrun's order rule is
  // surprising; hvdrun's is simply "flags win").
  auto o2 = parse_ok({"-np", "1", "--fusion-threshold-mb", "64", "--config-file", f.path(), "cmd"});
  CHECK(o2.tuning.fusion_threshold_mb == std::optional<double>(64));
}

TEST_CASE("config: bad or missing files are usage errors - controller mpi is read", "[config]") {
  auto missing = parse({"-np", "1", "--config-file", "/nonexistent/c.yaml", "cmd"});
  CHECK(missing.exit_code == exit_code::kUsage);
  CHECK(missing.message == "hvdrun: error: cannot read config file '/nonexistent/c.yaml': No such file or directory\n");
  TempFile bad("params:\n  cycle_time_ms: soon\n", ".yaml");
  auto out = parse({"-np", "1", "--config-file", bad.path(), "cmd"});
  CHECK(out.exit_code == exit_code::kUsage);
  CHECK(out.message == "hvdrun: error: " + bad.path() + ":2: params.cycle_time_ms: expected a number, got 'soon'\n");
  TempFile mpi("controller: mpi\n", ".yaml");
  auto m = parse({"-np", "1", "--config-file", mpi.path(), "cmd"});
  REQUIRE(m.options.has_value());
  CHECK(m.options->engine == Engine::Mpi);
  // --gloo on the command line beats the file's controller.
  CHECK(parse({"--gloo", "-np", "1", "--config-file", mpi.path(), "cmd"}).options.has_value());
}

TEST_CASE("config: the elastic section, with flag names or horovodrun's dest names", "[config][elastic]") {
  auto v = parse_config_text(
      "elastic:\n  min_np: 2\n  max_np: 8\n  slots_per_host: 4\n  host_discovery_script: ./d.sh\n"
      "  elastic_timeout: 120\n  reset_limit: 3\n  blacklist_cooldown_range: [5, 50]\n"
      "  discovery_interval: 0.5\n  discovery_timeout: 4\n  blacklist_failures: 5\n  blacklist_window: 90\n"
      "  drain_timeout: 15\n",
      "c.yaml");
  const ElasticOptions& e = v.options.elastic;
  CHECK(v.elastic_given());
  CHECK(e.min_np == std::optional<int>(2));
  CHECK(e.max_np == std::optional<int>(8));
  CHECK(e.slots_per_host == std::optional<int>(4));
  CHECK(e.host_discovery_script == std::optional<std::string>("./d.sh"));
  CHECK(e.elastic_timeout == std::chrono::seconds(120));
  CHECK(e.reset_limit == std::optional<int>(3));
  CHECK(e.blacklist_cooldown_range == std::optional<std::pair<int, int>>(std::make_pair(5, 50)));
  CHECK(e.discovery_interval == std::chrono::milliseconds(500));
  CHECK(e.discovery_timeout == std::chrono::milliseconds(4000));
  CHECK(e.blacklist_failures == 5);
  CHECK(e.blacklist_window == std::chrono::milliseconds(90000));
  CHECK(e.drain_timeout == std::chrono::milliseconds(15000));
  auto d = parse_config_text("elastic:\n  min_num_proc: 1\n  max_num_proc: 3\n  slots: 2\n  cooldown_range: [1, 2]\n",
                             "c.yaml");
  CHECK(d.options.elastic.min_np == std::optional<int>(1));
  CHECK(d.options.elastic.max_np == std::optional<int>(3));
  CHECK(d.options.elastic.slots_per_host == std::optional<int>(2));
  CHECK(d.options.elastic.blacklist_cooldown_range == std::optional<std::pair<int, int>>(std::make_pair(1, 2)));
  CHECK_FALSE(d.options.elastic.host_discovery_script);
}

TEST_CASE("config: bad elastic values name file line and key", "[config][elastic]") {
  auto msg = [](const std::string& text) { return invalid_message([&] { parse_config_text(text, "c.yaml"); }); };
  CHECK(msg("elastic:\n  min_np: 0\n") == "c.yaml:2: elastic.min_np: expected an integer >= 1, got '0'");
  CHECK(msg("elastic:\n  slots_per_host: -2\n") ==
        "c.yaml:2: elastic.slots_per_host: expected an integer >= 1, got '-2'");
  CHECK(msg("elastic:\n  reset_limit: many\n") == "c.yaml:2: elastic.reset_limit: expected an integer, got 'many'");
  CHECK(msg("elastic:\n  blacklist_cooldown_range: [5, 1]\n") ==
        "c.yaml:2: elastic.blacklist_cooldown_range: expected a list [MIN, MAX] with MIN <= MAX, got a list");
  CHECK(msg("elastic:\n  cooldown_range: 5\n") ==
        "c.yaml:2: elastic.cooldown_range: expected a list [MIN, MAX] of seconds, got '5'");
  CHECK(msg("elastic:\n  discovery_interval: 0\n") ==
        "c.yaml:2: elastic.discovery_interval: expected a number of seconds > 0, got '0'");
  CHECK(msg("elastic:\n  host_discovery_script: ''\n") ==
        "c.yaml:2: elastic.host_discovery_script: expected a script path or command, got ''");
  CHECK(msg("elastic: 3\n") == "c.yaml:1: elastic: expected a mapping of settings");
}

TEST_CASE("config: elastic settings merge under the command line", "[config][elastic]") {
  unsetenv("HOROVOD_ELASTIC_TIMEOUT");
  TempFile script("#!/bin/sh\necho localhost:2\n", ".sh");
  REQUIRE(::chmod(script.path().c_str(), 0755) == 0);
  TempFile f("elastic:\n  min_np: 2\n  max_np: 8\n  elastic_timeout: 120\n  host_discovery_script: " + script.path() +
                 "\n  discovery_interval: 0.5\n  blacklist_failures: 5\n",
             ".yaml");
  // The file alone turns elastic mode on; -np defaults to its min_np.
  auto o = parse_ok({"--config-file", f.path(), "cmd"});
  CHECK(o.elastic.host_discovery_script == std::optional<std::string>(script.path()));
  CHECK(o.num_proc == std::optional<int>(2));
  CHECK(o.elastic.max_np == std::optional<int>(8));
  CHECK(o.elastic.elastic_timeout == std::chrono::seconds(120));
  CHECK(o.elastic.discovery_interval == std::chrono::milliseconds(500));
  CHECK(o.elastic.blacklist_failures == 5);
  CHECK(o.elastic.discovery_timeout == std::chrono::milliseconds(10000));  // default
  // Flags win, field by field.
  auto c = parse_ok({"--config-file", f.path(), "--max-np", "4", "--elastic-timeout", "9", "--blacklist-failures", "1",
                     "-np", "3", "cmd"});
  CHECK(c.elastic.max_np == std::optional<int>(4));
  CHECK(c.elastic.min_np == std::optional<int>(2));
  CHECK(c.elastic.elastic_timeout == std::chrono::seconds(9));
  CHECK(c.elastic.blacklist_failures == 1);
  CHECK(c.num_proc == std::optional<int>(3));
  // The file's timeout beats HOROVOD_ELASTIC_TIMEOUT.
  setenv("HOROVOD_ELASTIC_TIMEOUT", "33", 1);
  CHECK(parse_ok({"--config-file", f.path(), "cmd"}).elastic.elastic_timeout == std::chrono::seconds(120));
  unsetenv("HOROVOD_ELASTIC_TIMEOUT");
  // Checks across fields see the merged values.
  auto over = parse({"--config-file", f.path(), "-np", "9", "cmd"});
  CHECK(over.exit_code == exit_code::kUsage);
  CHECK(over.message == "hvdrun: error: -np 9 is greater than --max-np 8\n");
  // A script in the file and -H on the command line contradict each other.
  auto h = parse({"--config-file", f.path(), "-H", "a:2", "cmd"});
  CHECK(h.exit_code == exit_code::kUsage);
  CHECK(h.message == "hvdrun: error: elastic.host_discovery_script in " + f.path() +
                         " and -H/--hosts cannot be used together: in elastic mode the discovery script lists "
                         "the hosts\n");
  // The file's script must exist too.
  TempFile missing("elastic:\n  host_discovery_script: /nonexistent/d.sh\n", ".yaml");
  CHECK(parse({"--config-file", missing.path(), "-np", "1", "cmd"}).message ==
        "hvdrun: error: --host-discovery-script '/nonexistent/d.sh': No such file or directory\n");
}

TEST_CASE("config: elastic settings without a script or min_np are ignored (elastic mode off)", "[config][elastic]") {
  TempFile off("elastic:\n  max_np: 4\n  reset_limit: 2\n", ".yaml");
  auto o = parse_ok({"-np", "1", "--config-file", off.path(), "cmd"});
  CHECK_FALSE(o.elastic.enabled);
  CHECK_FALSE(o.elastic.max_np);
  CHECK_FALSE(o.elastic.reset_limit);
  // min_np alone turns elastic mode on over the fixed hosts, as --min-np does.
  TempFile f("elastic:\n  min_np: 2\n  max_np: 4\n", ".yaml");
  auto fixed = parse_ok({"-np", "2", "-H", "localhost:4", "--config-file", f.path(), "cmd"});
  CHECK(fixed.elastic.enabled);
  CHECK_FALSE(fixed.elastic.host_discovery_script);
  CHECK(fixed.elastic.min_np == std::optional<int>(2));
  CHECK(fixed.elastic.max_np == std::optional<int>(4));
  // With a script on the command line the file's settings apply.
  TempFile script("#!/bin/sh\n", ".sh");
  REQUIRE(::chmod(script.path().c_str(), 0755) == 0);
  auto e = parse_ok({"--host-discovery-script", script.path(), "--config-file", f.path(), "cmd"});
  CHECK(e.elastic.min_np == std::optional<int>(2));
  CHECK(e.num_proc == std::optional<int>(2));
  CHECK(e.elastic.max_np == std::optional<int>(4));
}

TEST_CASE("config: the shipped example conf/hvdrun.example.yaml is valid", "[config]") {
  auto v = load_config_file(std::string(HVD_SOURCE_DIR) + "/conf/hvdrun.example.yaml");
  CHECK(v.options.tuning.fusion_threshold_mb == std::optional<double>(64));
  CHECK(v.options.tuning.autotune == std::optional<bool>(false));
  CHECK(v.options.tuning.log_level == std::optional<std::string>("WARNING"));
  CHECK_FALSE(v.elastic_given());
}

TEST_CASE("config: library_options.mpi_threads_disable is kept for MPI mode", "[config]") {
  auto v = parse_config_text("library_options:\n  mpi_threads_disable: true\n", "c.yaml");
  CHECK(v.options.tuning.mpi_threads_disable == std::optional<bool>(true));
}

TEST_CASE("config: a blank host_discovery_script is refused like the flag (it used to start a job that found no hosts)",
          "[config][elastic]") {
  auto msg = [](const std::string& text) { return invalid_message([&] { parse_config_text(text, "c.yaml"); }); };
  CHECK(msg("elastic:\n  host_discovery_script: '  '\n") ==
        "c.yaml:2: elastic.host_discovery_script: expected a script path or command, got '  '");
}

TEST_CASE("config: numbers are checked like the flags' (NaN and infinity refused)", "[config]") {
  auto msg = [](const std::string& text) { return invalid_message([&] { parse_config_text(text, "c.yaml"); }); };
  CHECK(msg("params:\n  fusion_threshold_mb: .nan\n") ==
        "c.yaml:2: params.fusion_threshold_mb: expected a number >= 0, got '.nan'");
  CHECK(msg("params:\n  cycle_time_ms: .inf\n") ==
        "c.yaml:2: params.cycle_time_ms: expected a number >= 0, got '.inf'");
  CHECK(msg("autotune:\n  gaussian_process_noise: .nan\n") ==
        "c.yaml:2: autotune.gaussian_process_noise: expected a number in [0, 1], got '.nan'");
  CHECK(msg("controller: [gloo]\n") == "c.yaml:1: controller: expected gloo or mpi, got a list");
}

TEST_CASE("config: logging.hide_timestamp (Horovod's example spelling) is honoured - unknown keys get a suggestion",
          "[config]") {
  auto hide = parse_config_text("logging:\n  hide_timestamp: true\n", "c.yaml");
  CHECK(hide.options.tuning.log_hide_timestamp == std::optional<bool>(true));
  auto show = parse_config_text("logging:\n  hide_timestamp: false\n", "c.yaml");
  CHECK(show.options.tuning.log_hide_timestamp == std::optional<bool>(false));
  // with_timestamp given too: the documented key wins, whatever the order.
  auto both = parse_config_text("logging:\n  with_timestamp: true\n  hide_timestamp: true\n", "c.yaml");
  CHECK(both.options.tuning.log_hide_timestamp == std::optional<bool>(false));
}
