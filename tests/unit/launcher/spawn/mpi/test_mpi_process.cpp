// The process half of hvdrun --mpi against fake `mpirun` scripts: the probe
// (missing, unsupported, hanging), exit codes, the secret's path and signal
// forwarding. No MPI needed.
#include "hvd/common/error.h"
#include "hvd/launcher/job/modes.h"
#include "hvd/launcher/spawn/mpi/mpi_launch.h"

#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>

using namespace hvd::launcher;

namespace {

/// A temporary directory holding a fake `mpirun`, put first on PATH for the
/// life of the object.
class FakeMpirun {
 public:
  explicit FakeMpirun(const std::string& body) {
    char tmpl[] = "/tmp/hvd_fake_mpirun_XXXXXX";
    dir_ = mkdtemp(tmpl);
    std::ofstream(dir_ + "/mpirun") << "#!/bin/sh\n" << body << "\n";
    chmod((dir_ + "/mpirun").c_str(), 0755);
    old_path_ = std::getenv("PATH") ? std::getenv("PATH") : "";
    setenv("PATH", (dir_ + ":" + old_path_).c_str(), 1);
  }
  ~FakeMpirun() {
    setenv("PATH", old_path_.c_str(), 1);
    std::string cmd = "rm -rf '" + dir_ + "'";
    if (std::system(cmd.c_str()) != 0) {
    }
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string read(const std::string& name) const {
    std::ifstream in(path(name));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }

 private:
  std::string dir_, old_path_;
};

const char* kVersion = "if [ \"$1\" = --version ]; then echo 'mpirun (Open MPI) 4.1.4'; exit 0; fi\n";

JobPlan one_host_plan(int np) {
  JobPlan plan;
  plan.hosts.push_back({"localhost", np});
  for (int r = 0; r < np; ++r) {
    WorkerSpec w;
    w.slot.hostname = "localhost";
    w.slot.rank = r;
    plan.workers.push_back(w);
  }
  return plan;
}

Options options() {
  Options o;
  o.engine = Engine::Mpi;
  o.command = {"true"};
  o.kill_grace = std::chrono::milliseconds(200);
  return o;
}

/// Runs run_mpi_job in a forked child (it blocks signals and waits), so the
/// test can signal it; returns the child's pid.
pid_t fork_job(const Options& o, const JobPlan& plan) {
  const pid_t test = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    // The job ("hvdrun") dies with the test process: a test that fails or
    // times out (ctest kills the test, not its children) must not leave it
    // and its mpirun running; its group guard then takes mpirun along.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != test) _exit(125);
    int code = run_mpi_job(o, plan, {{"JOB_WIDE", "yes"}});
    _exit(code);
  }
  return pid;
}

int wait_code(pid_t pid, std::chrono::seconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  int st = 0;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > until) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/// Gone, or a zombie waiting for its new parent to reap it.
bool process_gone(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  auto paren = all.rfind(')');
  return paren != std::string::npos && all.size() > paren + 2 && all[paren + 2] == 'Z';
}

bool wait_for_file(const std::string& path, std::chrono::seconds limit) {
  auto until = std::chrono::steady_clock::now() + limit;
  while (access(path.c_str(), F_OK) != 0) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace

TEST_CASE("mpi: probe: missing mpirun is a clear error", "[mpi][process]") {
  try {
    probe_mpirun("/nonexistent/dir/mpirun");
    FAIL("expected InvalidArgument");
  } catch (const hvd::InvalidArgument& e) {
    CHECK(std::string(e.what()).find("not found") != std::string::npos);
  }
  const std::string old = std::getenv("PATH");
  setenv("PATH", "/nonexistent", 1);
  try {
    probe_mpirun();
    FAIL("expected InvalidArgument");
  } catch (const hvd::InvalidArgument& e) {
    CHECK(std::string(e.what()) == "mpirun not found on PATH; install Open MPI or drop --mpi");
  }
  setenv("PATH", old.c_str(), 1);
}

TEST_CASE("mpi: probe: Open MPI, unsupported, failing and hanging mpiruns", "[mpi][process]") {
  {
    FakeMpirun fake(kVersion);
    MpiInfo info = probe_mpirun();
    CHECK(info.impl == MpiImpl::OpenMpi);
    CHECK(info.version_line == "mpirun (Open MPI) 4.1.4");
  }
  {
    FakeMpirun fake("echo 'mpirun (IBM Spectrum MPI) 10.3'");
    CHECK_THROWS_WITH(probe_mpirun(), Catch::Contains("unsupported MPI implementation"));
  }
  {
    FakeMpirun fake("echo broken >&2; exit 3");
    CHECK_THROWS_WITH(probe_mpirun(), Catch::Contains("failed with status 3"));
  }
  {
    FakeMpirun fake("exec sleep 30");
    auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_AS(probe_mpirun("mpirun", hvd::Deadline::after(std::chrono::milliseconds(300))), hvd::TimeoutError);
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  }
}

TEST_CASE("mpi: run: mpirun's exit code becomes hvdrun's, secret only in the environment", "[mpi][process]") {
  FakeMpirun fake(std::string(kVersion) +
                  "echo \"$@\" > \"$(dirname \"$0\")/argv\"\n"
                  "env > \"$(dirname \"$0\")/env\"\nexit 7");
  Options o = options();
  pid_t pid = fork_job(o, one_host_plan(2));
  CHECK(wait_code(pid, std::chrono::seconds(20)) == 7);
  std::string argv = fake.read("argv");
  std::string env = fake.read("env");
  CHECK(argv.find("-np 2 -H localhost:2") != std::string::npos);
  CHECK(argv.find("-x HVDRUN_SECRET") != std::string::npos);
  CHECK(argv.find("-x JOB_WIDE") != std::string::npos);
  CHECK(argv.find("-x HOROVOD_GLOO_RENDEZVOUS_PORT") != std::string::npos);
  CHECK(env.find("JOB_WIDE=yes") != std::string::npos);
  auto pos = env.find("HVDRUN_SECRET=");
  REQUIRE(pos != std::string::npos);
  std::string secret = env.substr(pos + 14, env.find('\n', pos) - pos - 14);
  CHECK(secret.size() >= 32);
  CHECK(argv.find(secret) == std::string::npos);
  CHECK(env.find("HOROVOD_GLOO_RENDEZVOUS_ADDR=127.0.0.1") != std::string::npos);
}

TEST_CASE("mpi: run: mpirun killed by a signal gives 128+signal", "[mpi][process]") {
  FakeMpirun fake(std::string(kVersion) + "kill -KILL $$");
  CHECK(wait_code(fork_job(options(), one_host_plan(1)), std::chrono::seconds(20)) == 128 + SIGKILL);
}

TEST_CASE("mpi: run: SIGTERM is forwarded to mpirun and gives 143", "[mpi][process]") {
  FakeMpirun fake(std::string(kVersion) +
                  "d=$(dirname \"$0\")\n"
                  "trap 'echo got > \"$d/term\"; exit 1' TERM\ntouch \"$d/started\"\n"
                  "while :; do sleep 0.05; done");
  pid_t pid = fork_job(options(), one_host_plan(1));
  REQUIRE(wait_for_file(fake.path("started"), std::chrono::seconds(10)));
  kill(pid, SIGTERM);
  CHECK(wait_code(pid, std::chrono::seconds(20)) == 143);
  CHECK(fake.read("term") == "got\n");
}

TEST_CASE("mpi: run: an mpirun that ignores signals is killed, a second signal kills at once", "[mpi][process]") {
  FakeMpirun fake(std::string(kVersion) +
                  "d=$(dirname \"$0\")\ntrap '' INT TERM\n"
                  "sh -c 'trap \"\" INT TERM; while :; do sleep 0.05; done' &\necho $! > \"$d/child\"\n"
                  "touch \"$d/started\"\nwhile :; do sleep 0.05; done");
  pid_t pid = fork_job(options(), one_host_plan(1));
  REQUIRE(wait_for_file(fake.path("started"), std::chrono::seconds(10)));
  pid_t grandchild = std::stoi(fake.read("child"));
  kill(pid, SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  kill(pid, SIGINT);
  auto t0 = std::chrono::steady_clock::now();
  CHECK(wait_code(pid, std::chrono::seconds(20)) == 130);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(3));
  // mpirun's whole process group went with it.
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = process_gone(grandchild);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(gone);
}

namespace {

/// A fake mpirun that starts one "rank" in a process group (and session) of
/// its own, as Open MPI 4.1 does, and records its pid.
std::string rank_in_own_group(const std::string& then) {
  return std::string(kVersion) +
         "d=$(dirname \"$0\")\n"
         "setsid sh -c 'trap \"\" HUP; while :; do sleep 0.05; done' &\necho $! > \"$d/rank\"\n"
         "touch \"$d/started\"\n" +
         then;
}

bool gone_within(pid_t pid, std::chrono::seconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!process_gone(pid)) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

}  // namespace

TEST_CASE("mpi: run: a rank mpirun left in a process group of its own goes when mpirun exits", "[mpi][process]") {
  FakeMpirun fake(rank_in_own_group("sleep 0.3; exit 4"));
  pid_t pid = fork_job(options(), one_host_plan(1));
  CHECK(wait_code(pid, std::chrono::seconds(20)) == 4);
  pid_t rank = std::stoi(fake.read("rank"));
  REQUIRE(rank > 1);
  CHECK(gone_within(rank, std::chrono::seconds(3)));
}

TEST_CASE("mpi: run: kill -9 of hvdrun takes mpirun and its ranks in other process groups along", "[mpi][process]") {
  // The forked job is "hvdrun"; mpirun ignores SIGTERM (its parent-death
  // signal), so the guard's SIGKILL after the grace (200 ms) must end it,
  // and the rank is found by the job's secret in its environment.
  FakeMpirun fake(rank_in_own_group("echo $$ > \"$d/mpirun\"\ntrap '' TERM\nwhile :; do sleep 0.05; done"));
  pid_t pid = fork_job(options(), one_host_plan(1));
  REQUIRE(wait_for_file(fake.path("started"), std::chrono::seconds(10)));
  REQUIRE(wait_for_file(fake.path("mpirun"), std::chrono::seconds(10)));
  pid_t rank = std::stoi(fake.read("rank"));
  pid_t mpirun = std::stoi(fake.read("mpirun"));
  kill(pid, SIGKILL);
  CHECK(wait_code(pid, std::chrono::seconds(5)) == 128 + SIGKILL);
  CHECK(gone_within(rank, std::chrono::seconds(5)));
  CHECK(gone_within(mpirun, std::chrono::seconds(5)));
}
