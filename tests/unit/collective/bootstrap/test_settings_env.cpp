// The library settings horovodrun's flags set through the environment and
// the library now acts on (issue 19): HOROVOD_GLOO_TIMEOUT_SECONDS as the
// rendezvous timeout, HOROVOD_THREAD_AFFINITY pinning the background
// thread, HOROVOD_LOG_HIDE_TIME and HVDRUN_VERBOSE for the library's log,
// and the settings line rank 0 logs.
#include "hvd/collective/context.h"
#include "hvd/collective/init_env.h"
#include "hvd/common/error.h"

#include <catch2/catch.hpp>

#include <dirent.h>
#include <sched.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

using namespace hvd::collective;

namespace {

/// Sets variables for one test and restores what was there.
class EnvScope {
 public:
  void set(const char* name, const char* value) {
    remember(name);
    setenv(name, value, 1);
  }
  void unset(const char* name) {
    remember(name);
    unsetenv(name);
  }
  ~EnvScope() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->had) {
        setenv(it->name.c_str(), it->value.c_str(), 1);
      } else {
        unsetenv(it->name.c_str());
      }
    }
  }

 private:
  struct Saved {
    std::string name, value;
    bool had;
  };
  void remember(const char* name) {
    const char* v = std::getenv(name);
    saved_.push_back({name, v ? v : "", v != nullptr});
  }
  std::vector<Saved> saved_;
};

/// Cpus_allowed_list of every thread of this process named hvd-background.
std::vector<std::string> background_cpu_lists() {
  std::vector<std::string> out;
  DIR* tasks = opendir("/proc/self/task");
  REQUIRE(tasks != nullptr);
  while (dirent* e = readdir(tasks)) {
    const std::string dir = std::string("/proc/self/task/") + e->d_name;
    std::ifstream comm(dir + "/comm");
    std::string name;
    if (!std::getline(comm, name) || name != "hvd-background") continue;
    std::ifstream status(dir + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("Cpus_allowed_list:", 0) == 0) out.push_back(line.substr(line.find_first_not_of(" \t", 18)));
    }
  }
  closedir(tasks);
  return out;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  REQUIRE(sched_getaffinity(0, sizeof set, &set) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("settings_from_env: HOROVOD_TIMELINE and HOROVOD_TIMELINE_MARK_CYCLES", "[settings]") {
  EnvScope env;
  env.unset("HOROVOD_TIMELINE");
  env.unset("HOROVOD_TIMELINE_MARK_CYCLES");
  CHECK(settings_from_env().timeline_path.empty());
  CHECK_FALSE(settings_from_env().timeline_mark_cycles);
  env.set("HOROVOD_TIMELINE", "/tmp/t.json");
  env.set("HOROVOD_TIMELINE_MARK_CYCLES", "1");
  CHECK(settings_from_env().timeline_path == "/tmp/t.json");
  CHECK(settings_from_env().timeline_mark_cycles);
  env.set("HOROVOD_TIMELINE_MARK_CYCLES", "0");
  CHECK_FALSE(settings_from_env().timeline_mark_cycles);
  // Horovod's DYNAMIC: no file at init (start_timeline later).
  env.set("HOROVOD_TIMELINE", "DYNAMIC");
  CHECK(settings_from_env().timeline_path.empty());
  CHECK(contains(describe_settings(settings_from_env(), LogSettings{}),
                 "timeline=off (HOROVOD_TIMELINE=DYNAMIC: until start_timeline)"));
}

TEST_CASE("settings_from_env: HOROVOD_GLOO_TIMEOUT_SECONDS is the rendezvous timeout when set", "[settings]") {
  EnvScope env;
  env.unset("HOROVOD_GLOO_TIMEOUT_SECONDS");
  env.set("HOROVOD_START_TIMEOUT", "30");
  CHECK(settings_from_env().start_timeout == std::chrono::milliseconds(30000));
  env.set("HOROVOD_GLOO_TIMEOUT_SECONDS", "2");
  CHECK(settings_from_env().start_timeout == std::chrono::milliseconds(2000));
  env.set("HOROVOD_GLOO_TIMEOUT_SECONDS", "0.5");
  CHECK(settings_from_env().start_timeout == std::chrono::milliseconds(500));
  env.set("HOROVOD_GLOO_TIMEOUT_SECONDS", "soon");
  CHECK_THROWS_WITH(settings_from_env(), Catch::Contains("HOROVOD_GLOO_TIMEOUT_SECONDS"));
}

TEST_CASE("settings_from_env: HOROVOD_THREAD_AFFINITY lists core ids", "[settings]") {
  EnvScope env;
  env.unset("HOROVOD_THREAD_AFFINITY");
  CHECK(settings_from_env().thread_affinity.empty());
  env.set("HOROVOD_THREAD_AFFINITY", "3");
  CHECK(settings_from_env().thread_affinity == std::vector<int>{3});
  env.set("HOROVOD_THREAD_AFFINITY", "2,0,7");
  CHECK(settings_from_env().thread_affinity == std::vector<int>{2, 0, 7});
  env.set("HOROVOD_THREAD_AFFINITY", "1,x");
  CHECK_THROWS_WITH(settings_from_env(), Catch::Contains("HOROVOD_THREAD_AFFINITY='1,x': 'x' is not a core id"));
  env.set("HOROVOD_THREAD_AFFINITY", "-1");
  CHECK_THROWS_AS(settings_from_env(), hvd::InvalidArgument);
}

TEST_CASE("thread affinity: the background thread runs only on its local rank's core", "[settings][affinity]") {
  const std::vector<int> cpus = allowed_cpus();
  const int core = cpus.back();
  {
    Settings s;
    s.thread_affinity = {core};
    Context ctx(s, nullptr);
    CHECK(background_cpu_lists() == std::vector<std::string>{std::to_string(core)});
    ctx.barrier();  // the pinned thread still works
  }
  {
    // Local rank 1 of 2 takes the second id.
    Settings s;
    s.local_rank = 1;
    s.local_size = 2;
    s.thread_affinity = {cpus.front() == core ? core + 1 : cpus.front(), core};
    Context ctx(s, nullptr);
    CHECK(background_cpu_lists() == std::vector<std::string>{std::to_string(core)});
  }
  if (cpus.size() > 1) {
    // Unset, or fewer ids than local ranks (Horovod pins nothing then):
    // the thread keeps the process's CPUs.
    Settings none;
    Context a(none, nullptr);
    const auto unpinned = background_cpu_lists();
    REQUIRE(unpinned.size() == 1);
    CHECK(unpinned[0] != std::to_string(core));
    a.shutdown();
    Settings short_list;
    short_list.local_size = 2;
    short_list.thread_affinity = {core};
    Context b(short_list, nullptr);
    CHECK(background_cpu_lists() == unpinned);
  }
}

TEST_CASE("thread affinity: a core this process may not use is refused", "[settings][affinity]") {
  Settings s;
  s.thread_affinity = {CPU_SETSIZE - 1};
  CHECK_THROWS_WITH(Context(s, nullptr), Catch::Contains("is not one this process may run on"));
}

TEST_CASE("log settings: HOROVOD_LOG_LEVEL, HOROVOD_LOG_HIDE_TIME, HVDRUN_VERBOSE", "[settings][log]") {
  EnvScope env;
  env.unset("HOROVOD_LOG_LEVEL");
  env.unset("HOROVOD_LOG_HIDE_TIME");
  env.unset("HVDRUN_VERBOSE");
  LogSettings d = log_settings_from_env();
  CHECK(d.level == spdlog::level::warn);
  CHECK_FALSE(d.hide_time);
  CHECK_FALSE(d.verbose);
  env.set("HVDRUN_VERBOSE", "1");
  env.set("HOROVOD_LOG_HIDE_TIME", "1");
  LogSettings v = log_settings_from_env();
  CHECK(v.verbose);
  CHECK(v.level == spdlog::level::info);  // --verbose shows the settings line
  CHECK(v.hide_time);
  env.set("HOROVOD_LOG_LEVEL", "ERROR");
  CHECK(log_settings_from_env().level == spdlog::level::err);  // an explicit level wins
}

TEST_CASE("describe_settings names what took effect and what is ignored", "[settings][log]") {
  EnvScope env;
  for (const char* v :
       {"HOROVOD_GLOO_TIMEOUT_SECONDS", "HOROVOD_AUTOTUNE", "HOROVOD_TIMELINE", "HOROVOD_HIERARCHICAL_ALLREDUCE",
        "HOROVOD_HIERARCHICAL_ALLGATHER", "HOROVOD_TORUS_ALLREDUCE", "HOROVOD_NUM_NCCL_STREAMS"}) {
    env.unset(v);
  }
  env.set("HOROVOD_START_TIMEOUT", "30");
  Settings s;
  s.fusion_threshold = 1 << 20;
  s.cycle_time = std::chrono::microseconds(2500);
  s.cache_capacity = 0;
  s.start_timeout = std::chrono::seconds(30);
  s.local_size = 2;
  s.local_rank = 0;
  s.thread_affinity = {4, 5};
  LogSettings log;
  log.hide_time = true;
  std::string line = describe_settings(s, log);
  CHECK(line.rfind("settings: fusion_threshold=1048576 bytes, cycle_time=2.5 ms, cache_capacity=0, ", 0) == 0);
  CHECK(contains(line, "rendezvous_timeout=30 s (HOROVOD_START_TIMEOUT)"));
  CHECK(contains(line, "thread_affinity=4,5 (this rank: core 4)"));
  CHECK(contains(line, "log_timestamps=off"));
  CHECK(contains(line,
                 "hierarchical_allreduce=off, hierarchical_allgather=off, torus_allreduce=off, autotune=off, "
                 "timeline=off, nccl_streams=1"));
  CHECK_FALSE(contains(line, "ignored"));

  env.set("HOROVOD_GLOO_TIMEOUT_SECONDS", "5");
  env.set("HOROVOD_AUTOTUNE", "1");
  env.set("HOROVOD_TIMELINE", "/tmp/t.json");
  env.set("HOROVOD_HIERARCHICAL_ALLREDUCE", "1");
  env.set("HOROVOD_HIERARCHICAL_ALLGATHER", "0");
  env.set("HOROVOD_TORUS_ALLREDUCE", "1");
  env.set("HOROVOD_NUM_NCCL_STREAMS", "4");
  s.start_timeout = std::chrono::seconds(5);
  s.thread_affinity = {4};
  s.timeline_path = "/tmp/t.json";  // settings_from_env's HOROVOD_TIMELINE
  s.timeline_mark_cycles = true;
  s.hierarchical_allreduce = true;  // as settings_from_env reads HOROVOD_HIERARCHICAL_ALLREDUCE=1
  s.autotune = true;  // ... and HOROVOD_AUTOTUNE=1
  s.autotune_log = "/tmp/a.csv";
  line = describe_settings(s, LogSettings{});
  CHECK(contains(line, "rendezvous_timeout=5 s (HOROVOD_GLOO_TIMEOUT_SECONDS)"));
  CHECK(contains(line, "thread_affinity=none (HOROVOD_THREAD_AFFINITY=4 lists fewer cores than the 2 local ranks)"));
  CHECK(contains(line, "log_timestamps=on"));
  CHECK(contains(line, "hierarchical_allreduce=on, hierarchical_allgather=off,"));
  CHECK_FALSE(contains(line, "HOROVOD_HIERARCHICAL_ALLREDUCE=1 ignored"));
  CHECK(contains(line, "torus_allreduce=off (HOROVOD_TORUS_ALLREDUCE=1 ignored"));
  CHECK(contains(line, "autotune=on (warmup 3 samples of 10 steps, at most 20 samples, log /tmp/a.csv)"));
  CHECK(contains(line, "timeline=/tmp/t.json (rank 0 writes it, cycle marks),"));
  CHECK_FALSE(contains(line, "HOROVOD_TIMELINE"));
  CHECK(contains(line, "nccl_streams=1 (HOROVOD_NUM_NCCL_STREAMS=4 ignored: one stream)"));
}

TEST_CASE("ignored_settings_warnings: one line per variable set but not honoured", "[settings][log]") {
  EnvScope env;
  for (const char* v :
       {"HOROVOD_AUTOTUNE", "HOROVOD_AUTOTUNE_LOG", "HOROVOD_TIMELINE", "HOROVOD_HIERARCHICAL_ALLREDUCE",
        "HOROVOD_HIERARCHICAL_ALLGATHER", "HOROVOD_TORUS_ALLREDUCE", "HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE",
        "HOROVOD_CONTROLLER", "HOROVOD_CPU_OPERATIONS", "HOROVOD_CCL_CACHE", "HOROVOD_ADASUM_MPI_CHUNK_SIZE",
        "HOROVOD_DISABLE_GROUP_FUSION", "HOROVOD_BATCH_D2D_MEMCOPIES", "HOROVOD_ENABLE_ASYNC_COMPLETION",
        "HOROVOD_ENABLE_XLA_OPS"}) {
    env.unset(v);
  }
  CHECK(ignored_settings_warnings().empty());
  env.set("HOROVOD_HIERARCHICAL_ALLGATHER", "0");  // off: nothing to ignore
  env.set("HOROVOD_AUTOTUNE_LOG", "/tmp/a.csv");  // only read with autotune on
  CHECK(ignored_settings_warnings().empty());

  env.set("HOROVOD_AUTOTUNE", "1");
  env.set("HOROVOD_TIMELINE", "/tmp/t.json");
  env.set("HOROVOD_HIERARCHICAL_ALLREDUCE", "1");
  env.set("HOROVOD_HIERARCHICAL_ALLGATHER", "1");
  env.set("HOROVOD_TORUS_ALLREDUCE", "1");
  env.set("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE", "0.5");
  const auto lines = ignored_settings_warnings();
  // The timeline, the hierarchical settings and autotune are honoured
  // (docs/collective.md): no line; autotune's Gaussian-process noise is not.
  REQUIRE(lines.size() == 2);
  CHECK(lines[0].rfind("HOROVOD_TORUS_ALLREDUCE=1 is ignored: ", 0) == 0);
  CHECK(lines[1].rfind("HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE=0.5 is ignored: ", 0) == 0);
  for (const auto& l : lines) {
    CHECK(contains(l, "(issue 20)"));
    CHECK(l.find('\n') == std::string::npos);
  }
}

TEST_CASE("ignored_settings_warnings: Horovod switches the library does not act on", "[settings][log]") {
  EnvScope env;
  const std::vector<const char*> names = {
      "HOROVOD_TORUS_ALLREDUCE",       "HOROVOD_AUTOTUNE",           "HOROVOD_CONTROLLER",
      "HOROVOD_CPU_OPERATIONS",        "HOROVOD_CCL_CACHE",          "HOROVOD_ADASUM_MPI_CHUNK_SIZE",
      "HOROVOD_DISABLE_GROUP_FUSION",  "HOROVOD_BATCH_D2D_MEMCOPIES", "HOROVOD_ENABLE_ASYNC_COMPLETION",
      "HOROVOD_ENABLE_XLA_OPS",        "HOROVOD_DISABLE_NVTX_RANGES", "HOROVOD_MPI_THREADS_DISABLE"};
  for (const char* v : names) env.unset(v);
  // Set to what Horovod does anyway (or what holds here): no line.
  env.set("HOROVOD_CONTROLLER", "gloo");
  env.set("HOROVOD_CPU_OPERATIONS", "GLOO");  // Horovod compares without case
  env.set("HOROVOD_CCL_CACHE", "0");
  env.set("HOROVOD_DISABLE_GROUP_FUSION", "0");
  env.set("HOROVOD_BATCH_D2D_MEMCOPIES", "1");  // Horovod's default: batched copies
  env.set("HOROVOD_ENABLE_ASYNC_COMPLETION", "false");  // strtol: 0, off
  env.set("HOROVOD_ENABLE_XLA_OPS", "0");
  env.set("HOROVOD_DISABLE_NVTX_RANGES", "1");  // no NVTX ranges are emitted: it holds
  env.set("HOROVOD_MPI_THREADS_DISABLE", "1");  // no MPI threads are started: it holds
  CHECK(ignored_settings_warnings().empty());

  env.set("HOROVOD_CONTROLLER", "mpi");
  env.set("HOROVOD_CPU_OPERATIONS", "ccl");
  env.set("HOROVOD_CCL_CACHE", "1");
  env.set("HOROVOD_ADASUM_MPI_CHUNK_SIZE", "1048576");
  env.set("HOROVOD_DISABLE_GROUP_FUSION", "1");
  env.set("HOROVOD_BATCH_D2D_MEMCOPIES", "0");
  env.set("HOROVOD_ENABLE_ASYNC_COMPLETION", "1");
  env.set("HOROVOD_ENABLE_XLA_OPS", "2");
  const auto lines = ignored_settings_warnings();
  REQUIRE(lines.size() == 8);
  const std::vector<std::string> starts = {
      "HOROVOD_CONTROLLER=mpi is ignored: ",           "HOROVOD_CPU_OPERATIONS=ccl is ignored: ",
      "HOROVOD_CCL_CACHE=1 is ignored: ",              "HOROVOD_ADASUM_MPI_CHUNK_SIZE=1048576 is ignored: ",
      "HOROVOD_DISABLE_GROUP_FUSION=1 is ignored: ",   "HOROVOD_BATCH_D2D_MEMCOPIES=0 is ignored: ",
      "HOROVOD_ENABLE_ASYNC_COMPLETION=1 is ignored: ", "HOROVOD_ENABLE_XLA_OPS=2 is ignored: "};
  for (std::size_t i = 0; i < starts.size(); ++i) {
    CHECK(lines[i].rfind(starts[i], 0) == 0);
    CHECK(lines[i].find('\n') == std::string::npos);
  }
  CHECK(contains(lines[5], "batched-copy kernels"));
  CHECK(contains(lines[7], "no TensorFlow binding"));
}
