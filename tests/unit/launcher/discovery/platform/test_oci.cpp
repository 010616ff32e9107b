// OCI Data Science's variables (discovery/platform/oci.h) and the flags they
// become beneath the command line (options/cli.h PlatformFlags).
#include <catch2/catch.hpp>

#include "../../fakes/oci_env.h"
#include "../../test_util.h"
#include "hvd/launcher/discovery/platform/oci.h"

using namespace hvd::launcher;
using namespace hvd::launcher::platform;
using Env = std::map<std::string, std::string>;
using Strings = std::vector<std::string>;

namespace {

/// The compose file's MAIN (conf/oci/docker-compose.yaml).
Env compose(const std::string& mode = "MAIN") { return hvd::launcher::fakes::oci_compose_env(mode); }

OciConfig parsed(const Env& env, const std::string& root = "/nonexistent-root") {
  auto c = parse_oci_env(Environment{root, env});
  REQUIRE(c);
  return *c;
}

std::string refusal(const Env& env) {
  try {
    parse_oci_env(Environment{"/nonexistent-root", env});
  } catch (const hvd::InvalidArgument& e) {
    return e.what();
  }
  return "";
}

Env with(Env env, const std::string& name, const std::string& value) {
  env[name] = value;
  return env;
}

Env without(Env env, const std::string& name) {
  env.erase(name);
  return env;
}

/// parse_command_line with `args` and the OCI variables' flags beneath.
ParseOutcome parse_oci(const Env& env, Strings args) {
  const PlatformFlags flags = oci_flags(parsed(env));
  args.insert(args.begin(), "hvdrun");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  return parse_command_line(static_cast<int>(args.size()), argv.data(), flags);
}

}  // namespace

TEST_CASE("oci: absent without OCI__MODE", "[platform][oci]") {
  CHECK_FALSE(parse_oci_env(Environment{"", without(compose(), "OCI__MODE")}));
}

TEST_CASE("oci: the compose file's MAIN", "[platform][oci]") {
  const OciConfig c = parsed(compose());
  CHECK(c.mode == OciConfig::Mode::Main);
  CHECK(c.worker_count == 1);
  CHECK(c.min_np == 2);
  CHECK(c.max_np == 2);
  CHECK(c.slots == 1);
  CHECK(c.worker_port == 12345);
  CHECK(c.start_timeout == std::chrono::seconds(600));
  CHECK(c.horovod_args_words == Strings{"--verbose"});
  CHECK_FALSE(c.timeline_file);
  CHECK(c.entry_command == Strings{"python3", "/code/train.py"});
  CHECK(c.job_id == "Undefined");
  CHECK(c.job_dir() == "/work/Undefined/hvdrun");
  CHECK(c.ignored.empty());
  CHECK(c.notes.empty());
  CHECK(c.evidence.front() == "OCI__MODE=MAIN");
}

TEST_CASE("oci: JOB_OCID names the job's directory, JOB_RUN_OCID the run", "[platform][oci]") {
  Env env = compose();
  env["JOB_OCID"] = "ocid1.datasciencejob.oc1.x";
  env["JOB_RUN_OCID"] = "ocid1.datasciencejobrun.oc1.y";
  env["OCI__WORK_DIR"] = "/mnt/shared/";
  const OciConfig c = parsed(env);
  CHECK(c.job_dir() == "/mnt/shared/ocid1.datasciencejob.oc1.x/hvdrun");
  CHECK(c.run_id == "ocid1.datasciencejobrun.oc1.y");
}

TEST_CASE("oci: defaults follow ADS (MIN_NP from the workers and SLOTS, MAX_NP = MIN_NP, 600 s)", "[platform][oci]") {
  Env env = {{"OCI__MODE", "MAIN"}, {"OCI__WORK_DIR", "/work"}, {"OCI__WORKER_COUNT", "3"}, {"SLOTS", "2"}};
  const OciConfig c = parsed(env);
  CHECK(c.min_np == 8);
  CHECK(c.max_np == 8);
  CHECK(c.start_timeout == std::chrono::seconds(600));
  CHECK_FALSE(c.worker_port);
  CHECK(c.entry_command.empty());
  CHECK(parsed(without(env, "OCI__WORKER_COUNT")).min_np == 2);
}

TEST_CASE("oci: SLOTS defaults to the shape's GPUs (/dev/nvidiaN)", "[platform][oci]") {
  hvd_test::TempDir root;
  root.write("dev/nvidia0", "");
  root.write("dev/nvidia1", "");
  root.write("dev/nvidiactl", "");
  const OciConfig c = parsed(without(without(without(compose(), "SLOTS"), "MIN_NP"), "MAX_NP"), root.path());
  CHECK(c.slots == 2);
  CHECK(c.min_np == 4);  // (1 worker + the MAIN) * 2
  CHECK(std::find(c.evidence.begin(), c.evidence.end(), "2 /dev/nvidiaN devices") != c.evidence.end());
  CHECK(parsed(compose(), root.path()).slots == 1);  // SLOTS wins
}

TEST_CASE("oci: entry script and its arguments", "[platform][oci]") {
  CHECK(parsed(with(compose(), "OCI__ENTRY_SCRIPT_ARGS", "--epochs 2 'a b'")).entry_command ==
        Strings{"python3", "/code/train.py", "--epochs", "2", "a b"});
  CHECK(parsed(with(compose(), "OCI__ENTRY_SCRIPT", "/code/run.sh")).entry_command == Strings{"/code/run.sh"});
  const OciConfig c = parsed(with(without(compose(), "OCI__ENTRY_SCRIPT"), "OCI__ENTRY_SCRIPT_ARGS", "x"));
  CHECK(c.entry_command.empty());
  CHECK(c.ignored == Strings{"OCI__ENTRY_SCRIPT_ARGS ignored: OCI__ENTRY_SCRIPT is not set"});
}

TEST_CASE("oci: ADS's start arguments and keyword arguments are ignored with one line each", "[platform][oci]") {
  Env env = compose();
  env["OCI__START_ARGS"] = "";  // ADS's default: nothing to say
  CHECK(parsed(env).ignored.empty());
  env["OCI__START_ARGS"] = "--x";
  env["OCI__ENTRY_SCRIPT_KWARGS"] = "a=1";
  const OciConfig c = parsed(env);
  REQUIRE(c.ignored.size() == 2);
  CHECK(c.ignored[0].rfind("OCI__START_ARGS='--x' ignored: hvdrun takes its flags from HOROVOD_ARGS", 0) == 0);
  CHECK(c.ignored[1].rfind("OCI__ENTRY_SCRIPT_KWARGS='a=1' ignored", 0) == 0);
}

TEST_CASE("oci: ENABLE_TIMELINE=1 puts the timeline under OCI__SYNC_DIR, else the job's directory", "[platform][oci]") {
  CHECK(parsed(with(compose(), "ENABLE_TIMELINE", "1")).timeline_file == std::string("/work/sync/timeline.json"));
  CHECK(parsed(with(without(compose(), "OCI__SYNC_DIR"), "ENABLE_TIMELINE", "1")).timeline_file ==
        std::string("/work/Undefined/hvdrun/timeline.json"));
}

TEST_CASE("oci: a WORKER says once what the MAIN's variables do there", "[platform][oci]") {
  const OciConfig c = parsed(compose("WORKER"));
  CHECK(c.mode == OciConfig::Mode::Worker);
  REQUIRE(c.notes.size() == 1);
  CHECK(c.notes[0].find("the MAIN's to use") != std::string::npos);
  CHECK(parsed({{"OCI__MODE", "WORKER"}, {"OCI__WORK_DIR", "/w"}}).notes.empty());
}

TEST_CASE("oci: malformed variables are one line naming the variable", "[platform][oci]") {
  CHECK(refusal(with(compose(), "OCI__MODE", "PS")).rfind("OCI__MODE='PS' is not MAIN or WORKER", 0) == 0);
  CHECK(refusal(with(compose(), "MIN_NP", "two")) == "MIN_NP='two' is not a whole number in [1, 65536]");
  CHECK(refusal(with(compose(), "MAX_NP", "0")) == "MAX_NP='0' is not a whole number in [1, 65536]");
  CHECK(refusal(with(compose(), "MIN_NP", "3")) == "MIN_NP=3 is greater than MAX_NP=2");
  CHECK(refusal(with(compose(), "SLOTS", "-1")) == "SLOTS='-1' is not a whole number in [1, 65536]");
  CHECK(refusal(with(compose(), "WORKER_PORT", "70000")) == "WORKER_PORT='70000' is not a whole number in [1, 65535]");
  CHECK(refusal(with(compose(), "START_TIMEOUT", "10m")) ==
        "START_TIMEOUT='10m' is not a whole number in [1, 1000000]");
  CHECK(refusal(with(compose(), "OCI__WORKER_COUNT", "x")).rfind("OCI__WORKER_COUNT='x'", 0) == 0);
  CHECK(refusal(with(compose(), "ENABLE_TIMELINE", "yes")) == "ENABLE_TIMELINE='yes' is not 0 or 1");
  CHECK(refusal(with(compose(), "HOROVOD_ARGS", "--verbose 'x")).find("HOROVOD_ARGS") != std::string::npos);
  CHECK(refusal(with(compose(), "OCI__ENTRY_SCRIPT_ARGS", "\"x")).find("OCI__ENTRY_SCRIPT_ARGS") != std::string::npos);
  CHECK(refusal(without(compose(), "OCI__WORK_DIR")).rfind("OCI__WORK_DIR is not set", 0) == 0);
  CHECK(refusal(with(compose(), "OCI__WORK_DIR", "oci://bucket@ns/prefix"))
            .rfind("OCI__WORK_DIR='oci://bucket@ns/prefix' is a URI", 0) == 0);
  CHECK(refusal(with(compose(), "OCI__WORK_DIR", "work")) == "OCI__WORK_DIR='work' is not an absolute path");
  CHECK(refusal(with(compose(), "JOB_OCID", "a/b")) == "JOB_OCID='a/b' cannot name a directory");
}

TEST_CASE("oci: the variables become flags beneath the command line", "[platform][oci]") {
  ParseOutcome out = parse_oci(compose(), {});
  INFO(out.message);
  REQUIRE(out.options);
  const Options& o = *out.options;
  CHECK(o.elastic.enabled);
  CHECK(o.elastic.min_np == 2);
  CHECK(o.elastic.max_np == 2);
  CHECK(o.num_proc == 2);
  CHECK(o.ssh_port == 12345);
  CHECK(o.start_timeout == std::chrono::seconds(600));
  CHECK(o.elastic.elastic_timeout == std::chrono::seconds(600));
  CHECK(o.verbose);  // HOROVOD_ARGS
  CHECK(o.command == Strings{"python3", "/code/train.py"});
  CHECK_FALSE(o.tuning.timeline_filename);
}

TEST_CASE("oci: the command line wins over HOROVOD_ARGS, which wins over the variables", "[platform][oci]") {
  Env env = with(compose(), "HOROVOD_ARGS", "--verbose --start-timeout 7 -p 2200 --max-np 4");
  ParseOutcome out = parse_oci(env, {"--start-timeout", "9", "python3", "mine.py"});
  INFO(out.message);
  REQUIRE(out.options);
  CHECK(out.options->start_timeout == std::chrono::seconds(9));  // command line
  CHECK(out.options->ssh_port == 2200);  // HOROVOD_ARGS over WORKER_PORT
  CHECK(out.options->elastic.max_np == 4);  // HOROVOD_ARGS over MAX_NP
  CHECK(out.options->elastic.elastic_timeout == std::chrono::seconds(600));  // START_TIMEOUT
  CHECK(out.options->command == Strings{"python3", "mine.py"});  // the command line's command wins
}

TEST_CASE("oci: ENABLE_TIMELINE=1 becomes --timeline-filename", "[platform][oci]") {
  ParseOutcome out = parse_oci(with(compose(), "ENABLE_TIMELINE", "1"), {});
  REQUIRE(out.options);
  CHECK(out.options->tuning.timeline_filename == std::string("/work/sync/timeline.json"));
}

TEST_CASE("oci: HOROVOD_ARGS with a command or a wrong flag is refused naming it", "[platform][oci]") {
  ParseOutcome out = parse_oci(with(compose(), "HOROVOD_ARGS", "--verbose python x.py"), {});
  CHECK_FALSE(out.options);
  CHECK(out.exit_code == 2);
  CHECK(out.message.find("HOROVOD_ARGS: 'python' is not an hvdrun flag") != std::string::npos);
  out = parse_oci(with(compose(), "HOROVOD_ARGS", "--no-such-flag"), {});
  CHECK(out.exit_code == 2);
  CHECK(out.message.find("HOROVOD_ARGS: ") != std::string::npos);
  out = parse_oci(with(compose(), "HOROVOD_ARGS", "--start-timeout soon"), {});
  CHECK(out.exit_code == 2);
  CHECK(out.message.find("HOROVOD_ARGS: ") != std::string::npos);
}

TEST_CASE("oci: without an entry script or a command the run is refused", "[platform][oci]") {
  ParseOutcome out = parse_oci(without(compose(), "OCI__ENTRY_SCRIPT"), {});
  CHECK_FALSE(out.options);
  CHECK(out.message.find("no command given") != std::string::npos);
}

TEST_CASE("oci: a WORKER needs no entry script", "[platform][oci]") {
  ParseOutcome out = parse_oci(without(compose("WORKER"), "OCI__ENTRY_SCRIPT"), {});
  INFO(out.message);
  REQUIRE(out.options);
  CHECK(out.options->command == Strings{kWorkerPlaceholder});
}

TEST_CASE("oci: render_oci names the role, the directory and the entry script", "[platform][oci]") {
  const std::string text = render_oci(parsed(compose()), "10.0.0.2");
  CHECK(text.find("platform: oci\n") == 0);
  CHECK(text.find("MAIN: runs the elastic job), address 10.0.0.2, 1 slot") != std::string::npos);
  CHECK(text.find("shared directory: /work/Undefined/hvdrun") != std::string::npos);
  CHECK(text.find("np 2..2, start timeout 600 s, sshd port 12345") != std::string::npos);
  CHECK(text.find("entry script: python3 /code/train.py") != std::string::npos);
  CHECK(render_oci(parsed(compose("WORKER")), "10.0.0.3").find("WORKER: registers") != std::string::npos);
}
