// The job modes without a process: which row a command line on a given
// machine picks (resolve_job over a fake machine and a fake mpirun probe),
// the table itself, the store's move to a late-chosen address
// (JobServices::rebind_store), the one error path (JobServices::run), and
// whether an OCI run is a MAIN, a WORKER or not OCI at all (decide_oci).
#include "hvd/common/error.h"
#include "hvd/launcher/job/job_services.h"
#include "hvd/launcher/job/modes.h"
#include "hvd/launcher/job/oci_job.h"
#include "hvd/launcher/process/report.h"
#include "hvd/store/http_store.h"

#include <catch2/catch.hpp>

#include <fstream>
#include <set>
#include <sstream>

#include "../fakes/fake_machine.h"
#include "../fakes/fake_mpirun_probe.h"
#include "../fakes/log_capture.h"
#include "../fakes/oci_env.h"
#include "../test_util.h"

using namespace hvd::launcher;
using hvd::launcher::fakes::FakeMachine;
using hvd::launcher::fakes::LogCapture;
using hvd_test::parse_ok;

namespace {

using hvd::launcher::fakes::FakeProbe;

JobDecision resolve(std::vector<std::string> args, const Environment& env, FakeProbe& probe) {
  return resolve_job(parse_ok(std::move(args)), env, probe.fn());
}

JobDecision resolve(std::vector<std::string> args, const Environment& env = Environment{}) {
  FakeProbe probe;
  return resolve(std::move(args), env, probe);
}

/// A command line as main() gets it.
struct Argv {
  explicit Argv(std::vector<std::string> args) : words(std::move(args)) {
    words.insert(words.begin(), "hvdrun");
    for (auto& w : words) pointers.push_back(w.data());
    pointers.push_back(nullptr);
  }
  int argc() const { return static_cast<int>(words.size()); }
  char** argv() { return pointers.data(); }
  std::vector<std::string> words;
  std::vector<char*> pointers;
};

std::map<std::string, std::string> oci_env(const std::string& mode) { return fakes::oci_compose_env(mode); }

}  // namespace

TEST_CASE("modes: the table has one row per mode, in order, with distinct names", "[modes]") {
  const std::vector<JobMode> all = {JobMode::CheckBuild, JobMode::DryRun, JobMode::Unranked, JobMode::Follower,
                                    JobMode::Elastic,    JobMode::Mpirun, JobMode::Static};
  REQUIRE(job_modes().size() == all.size());
  std::set<std::string> names;
  for (std::size_t i = 0; i < all.size(); ++i) {
    CHECK(job_modes()[i].mode == all[i]);
    CHECK(&job_mode(all[i]) == &job_modes()[i]);
    CHECK(job_modes()[i].run != nullptr);
    names.insert(job_modes()[i].name);
  }
  CHECK(names.size() == all.size());
  std::vector<std::string> early;
  for (const auto& row : early_modes()) early.push_back(row.name);
  CHECK(early == std::vector<std::string>{"follower-attach", "follower-status", "kubernetes-pod-hosts", "oci"});
}

TEST_CASE("modes: a plain job is static, its hosts from the one host source", "[modes]") {
  LogCapture log;
  JobDecision d = resolve({"-np", "2", "-H", "a:1,b:1", "python", "train.py"});
  CHECK(d.mode == JobMode::Static);
  CHECK(d.launch == LaunchMode::Own);
  REQUIRE(d.source);
  CHECK(d.source->discover().hosts == std::vector<HostSpec>{{"a", 1}, {"b", 1}});
  CHECK_FALSE(d.platform);
  CHECK(d.options.command == std::vector<std::string>{"python", "train.py"});
}

TEST_CASE("modes: --dry-run, --elastic, --mpi and --check-build each pick their row", "[modes]") {
  LogCapture log;
  CHECK(resolve({"-np", "2", "--dry-run", "true"}).mode == JobMode::DryRun);
  CHECK(resolve({"-np", "2", "--dry-run=json", "true"}).mode == JobMode::DryRun);
  CHECK(resolve({"-np", "2", "--min-np", "1", "--host-discovery-script", "/bin/true", "true"}).mode ==
        JobMode::Elastic);
  // An elastic dry run is the dry-run row (one look at the source).
  CHECK(resolve({"-np", "2", "--min-np", "1", "--host-discovery-script", "/bin/true", "--dry-run", "true"}).mode ==
        JobMode::DryRun);
  JobDecision mpi = resolve({"-np", "2", "--mpi", "true"});
  CHECK(mpi.mode == JobMode::Mpirun);
  CHECK(mpi.launch == LaunchMode::Mpirun);
  JobDecision check = resolve({"--check-build"});
  CHECK(check.mode == JobMode::CheckBuild);
  CHECK_FALSE(check.source);  // nothing else was read
}

TEST_CASE("modes: --mpi-args picks mpirun only when one is installed, probing once", "[modes]") {
  LogCapture log;
  FakeProbe installed;
  JobDecision d = resolve({"-np", "2", "--mpi-args=--bind-to none", "true"}, Environment{}, installed);
  CHECK(d.mode == JobMode::Mpirun);
  CHECK(installed.calls == 1);
  REQUIRE(d.mpirun);
  CHECK(d.mpirun->impl == MpiImpl::OpenMpi);
  FakeProbe missing;
  missing.installed = false;
  CHECK(resolve({"-np", "2", "--mpi-args=--bind-to none", "true"}, Environment{}, missing).mode == JobMode::Static);
  CHECK(missing.calls == 1);
  FakeProbe unused;
  CHECK(resolve({"-np", "2", "true"}, Environment{}, unused).mode == JobMode::Static);
  CHECK(unused.calls == 0);
}

TEST_CASE("modes: a platform's follower machine follows, its leader leads a static job, a dry run shows either",
          "[modes]") {
  LogCapture log;
  const std::map<std::string, std::string> slurm = {{"SLURM_JOB_ID", "1"}, {"SLURM_JOB_NODELIST", "n[1-2]"}};
  auto on = [&slurm](const std::string& node) {
    auto env = slurm;
    env["SLURMD_NODENAME"] = node;
    return env;
  };
  FakeMachine leader_machine, follower_machine;
  JobDecision leader = resolve({"true"}, leader_machine.context(on("n1"), "n1"));
  CHECK(leader.mode == JobMode::Static);
  REQUIRE(leader.platform);
  CHECK(leader.platform->name == "slurm");
  CHECK(*leader.options.num_proc == 2);  // the platform's slots
  JobDecision follower = resolve({"true"}, follower_machine.context(on("n2"), "n2"));
  CHECK(follower.mode == JobMode::Follower);
  CHECK(resolve({"--dry-run", "true"}, follower_machine.context(on("n2"), "n2")).mode == JobMode::DryRun);
}

TEST_CASE("modes: a Vertex reduction server gets no ranks - unranked, or a dry run of the platform alone", "[modes]") {
  LogCapture log;
  FakeMachine m;
  const std::map<std::string, std::string> vertex = {
      {"CLUSTER_SPEC", R"({"cluster": {"workerpool0": ["primary:2222"], "workerpool1": ["w0:2222", "w1:2222"],
                          "workerpool2": ["rs0:2222"]}, "task": {"type": "workerpool2", "index": 0}})"}};
  JobDecision d = resolve({"python", "train.py"}, m.context(vertex));
  CHECK(d.mode == JobMode::Unranked);
  REQUIRE(d.platform);
  CHECK(d.platform->unranked);
  CHECK(resolve({"--dry-run", "python", "train.py"}, m.context(vertex)).mode == JobMode::DryRun);
}

TEST_CASE("modes: usage errors of the decision are InvalidArgument, before anything starts", "[modes]") {
  LogCapture log;
  CHECK(hvd_test::invalid_message([] {
          resolve({"python", "x.py"});
        }) == "-np/--num-proc is required (e.g. hvdrun -np 4 python train.py)");
  CHECK_THROWS_AS(resolve({"-np", "2", "-H", "a:x", "true"}), hvd::InvalidArgument);
}

TEST_CASE("job services: the store moves from 127.0.0.1 to the address chosen late, same secret and port",
          "[job_services]") {
  JobServicesOptions o;
  JobServices job(o);
  job.start_store("127.0.0.1");
  const uint16_t port = job.store_port();
  const std::string secret = job.secret();
  hvd::store::InMemoryStore* first = &job.store().store();
  // 127.0.0.1 is where it listens already: nothing changes.
  JobServices::ServedStore same = job.rebind_store("127.0.0.1");
  CHECK(same.store == first);
  CHECK(same.port == port);
  // Another address (any 127/8 address is this machine's loopback).
  JobServices::ServedStore moved = job.rebind_store("127.0.0.2");
  CHECK(moved.store != first);
  CHECK(moved.store == &job.store().store());
  CHECK(moved.port == job.store_port());
  CHECK(moved.port == port);  // free there: the same port
  CHECK(job.secret() == secret);
  const EnvMap env = job.rendezvous_env("127.0.0.2");
  CHECK(env.at("HOROVOD_GLOO_RENDEZVOUS_ADDR") == "127.0.0.2");
  CHECK(env.at("HOROVOD_GLOO_RENDEZVOUS_PORT") == std::to_string(port));
  // Workers reach the moved store with the job's secret.
  moved.store->set_string("k", "v");
  hvd::store::ClientOptions co;
  co.host = "127.0.0.2";
  co.port = moved.port;
  co.secret = secret;
  hvd::store::HttpStoreClient client(co);
  CHECK(client.get_string("k", std::chrono::seconds(5)) == "v");
  CHECK(job.finish(0) == 0);
}

TEST_CASE("job services: a set-up error is reported once and ends the job with its code", "[job_services]") {
  hvd_test::TempDir dir;
  JobServicesOptions o;
  o.events_file = dir.path() + "/events.jsonl";
  JobServices job(o);
  int after = 0;
  const int code = job.run([&]() -> int {
    job.open_events();
    throw JobError(exit_code::kLaunch, "no route to the hosts");
    ++after;
    return 0;
  });
  CHECK(code == exit_code::kLaunch);
  CHECK(after == 0);
  std::ifstream events(*o.events_file);
  std::stringstream text;
  text << events.rdbuf();
  CHECK(text.str().find("\"job_end\"") != std::string::npos);
  CHECK(text.str().find("\"code\":3") != std::string::npos);
  // A usage error of a set-up step is a JobError with exit code 2.
  JobServicesOptions bad;
  bad.events_file = dir.path() + "/no/such/dir/events.jsonl";
  JobServices other(bad);
  try {
    other.open_events();
    FAIL("an events file in a missing directory was opened");
  } catch (const JobError& e) {
    CHECK(e.code() == exit_code::kUsage);
  }
}

TEST_CASE("oci: MAIN and WORKER runs are decided from the variables, without starting anything", "[oci]") {
  LogCapture log;
  FakeMachine m;
  Argv main_args({"--dry-run"});
  auto main = decide_oci(main_args.argc(), main_args.argv(), m.context(oci_env("MAIN")));
  REQUIRE(main);
  CHECK_FALSE(main->exit_code);
  REQUIRE(main->config);
  CHECK(main->config->mode == platform::OciConfig::Mode::Main);
  REQUIRE(main->options);
  CHECK(main->options->elastic.enabled);  // a MAIN runs an elastic job over the shared directory
  CHECK(main->options->verbose);  // HOROVOD_ARGS
  Argv worker_args({});
  auto worker = decide_oci(worker_args.argc(), worker_args.argv(), m.context(oci_env("WORKER")));
  REQUIRE(worker);
  REQUIRE(worker->config);
  CHECK(worker->config->mode == platform::OciConfig::Mode::Worker);
  CHECK(worker->options->ssh_port == 12345);  // WORKER_PORT: where the MAIN reaches this WORKER's sshd
}

TEST_CASE("oci: not OCI without OCI__MODE, with -H, --hosts-from none or --check-build - a contradiction is exit 2",
          "[oci]") {
  LogCapture log;
  FakeMachine m;
  Argv plain({"-np", "2", "true"});
  CHECK_FALSE(decide_oci(plain.argc(), plain.argv(), m.context()));
  Argv hosts({"-np", "2", "-H", "a:2", "true"});
  CHECK_FALSE(decide_oci(hosts.argc(), hosts.argv(), m.context(oci_env("MAIN"))));
  Argv none({"--hosts-from", "none", "-np", "2", "true"});
  CHECK_FALSE(decide_oci(none.argc(), none.argv(), m.context(oci_env("MAIN"))));
  Argv check({"--check-build"});
  CHECK_FALSE(decide_oci(check.argc(), check.argv(), m.context(oci_env("MAIN"))));
  Argv both({"--hosts-from", "oci", "-H", "a:2", "-np", "2", "true"});
  try {
    decide_oci(both.argc(), both.argv(), m.context(oci_env("MAIN")));
    FAIL("--hosts-from oci with -H was accepted");
  } catch (const JobError& e) {
    CHECK(e.code() == exit_code::kUsage);
    CHECK(std::string(e.what()) ==
          "--hosts-from oci and -H/--hosts cannot be used together: give one source of hosts (or --hosts-from none)");
  }
}
