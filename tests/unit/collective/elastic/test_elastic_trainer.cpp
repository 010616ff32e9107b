// The example trainer (apps/examples/elastic_trainer) as real processes
// under a fake driver: grow 1 -> 2, kill -9 a worker mid-training, shrink
// to 1, regrow with a replacement; the final checksum must equal an
// undisturbed run's. Exercises hvd::init()'s elastic path from the
// environment hvdrun sets.
#include "elastic_fixture.h"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

using namespace hvd;
using namespace std::chrono_literals;
namespace fs = std::filesystem;

namespace {

#ifdef HVD_ELASTIC_TRAINER
constexpr const char* kTrainer = HVD_ELASTIC_TRAINER;
#else
constexpr const char* kTrainer = "";
#endif

/// Long enough (at 20 ms a step) for the replacement worker to be admitted
/// before the survivor finishes, even on a loaded machine.
constexpr int kSteps = 150;

/// A trainer process with its stdout/stderr in files; killed and reaped
/// by the destructor if still running.
class Trainer {
 public:
  Trainer(const fs::path& dir, const std::string& name, const std::map<std::string, std::string>& extra_env,
          int step_ms = 20)
      : out_(dir / (name + ".out")), err_(dir / (name + ".err")) {
    std::vector<std::string> env;
    for (char** e = environ; *e; ++e) {
      std::string kv = *e;
      if (kv.rfind("HOROVOD_", 0) == 0 || kv.rfind("HVDRUN_", 0) == 0 || kv.rfind("HVD_TRAINER_", 0) == 0) continue;
      env.push_back(kv);
    }
    env.push_back("HVD_TRAINER_STEPS=" + std::to_string(kSteps));
    env.push_back("HVD_TRAINER_STEP_MS=" + std::to_string(step_ms));
    for (const auto& [k, v] : extra_env) env.push_back(k + "=" + v);
    std::vector<char*> envp;
    for (auto& s : env) envp.push_back(s.data());
    envp.push_back(nullptr);
    std::string path = kTrainer;
    char* argv[] = {path.data(), nullptr};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int rc = posix_spawn(&pid_, path.c_str(), &fa, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0) pid_ = -1;
  }
  ~Trainer() {
    if (pid_ > 0 && !reaped_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool started() const { return pid_ > 0; }
  void kill9() {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    reaped_ = true;
  }
  /// Exit status, or -1 if still running after `limit`.
  int wait_exit(std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (::waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(10ms);
    }
    return -1;
  }
  std::string output() const { return slurp(out_); }
  std::string errors() const { return slurp(err_); }
  /// Waits until stdout contains `text`.
  bool wait_for_output(const std::string& text, std::chrono::milliseconds limit = 15s) const {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (output().find(text) != std::string::npos) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
  /// The "final checksum ..." line, or "".
  std::string final_line() const {
    std::istringstream in(output());
    std::string line, last;
    while (std::getline(in, line)) {
      if (line.rfind("final checksum", 0) == 0) last = line;
    }
    return last;
  }

 private:
  static std::string slurp(const fs::path& p) {
    std::ifstream f(p);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
  }
  fs::path out_, err_;
  pid_t pid_ = -1;
  bool reaped_ = false;
};

bool wait_ready(elastic::testing::FakeDriver& d, const std::string& id) {
  const auto end = std::chrono::steady_clock::now() + 15s;
  while (std::chrono::steady_clock::now() < end) {
    if (d.store().try_get(store::elastic::ready_key(id))) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

}  // namespace

TEST_CASE("elastic trainer: grow, kill -9, shrink and regrow end with the undisturbed checksum",
          "[elastic][trainer][process]") {
  if (std::string(kTrainer).empty()) {
    WARN("elastic_trainer was not built; skipping");
    return;
  }
  char tmpl[] = "/tmp/hvd-elastic-trainer-XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const fs::path dir = tmpl;

  std::string reference;
  {
    Trainer plain(dir, "plain", {}, 0);
    REQUIRE(plain.started());
    REQUIRE(plain.wait_exit(20s) == 0);
    reference = plain.final_line();
  }
  REQUIRE(reference.find("steps " + std::to_string(kSteps)) != std::string::npos);

  {
    elastic::testing::FakeDriver driver;
    auto env_for = [&](const std::string& id) {
      return std::map<std::string, std::string>{{"HOROVOD_ELASTIC", "1"},
                                                {"HVDRUN_WORKER_ID", id},
                                                {"HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1"},
                                                {"HOROVOD_GLOO_RENDEZVOUS_PORT", std::to_string(driver.port())},
                                                {"HVDRUN_SECRET", elastic::testing::kSecret},
                                                {"HOROVOD_ELASTIC_TIMEOUT", "20"},
                                                {"HOROVOD_HOSTNAME", "localhost"}};
    };
    Trainer w1(dir, "w1", env_for("w1"));
    REQUIRE(w1.started());
    REQUIRE(wait_ready(driver, "w1"));
    driver.publish(1, {"w1"});
    REQUIRE(w1.wait_for_output("step 10 size 1"));

    Trainer w2(dir, "w2", env_for("w2"));
    REQUIRE(wait_ready(driver, "w2"));
    driver.publish(2, {"w1", "w2"});
    INFO("w2 stderr: " << w2.errors());
    REQUIRE(w2.wait_for_output("size 2 rank 1 version 2"));
    std::this_thread::sleep_for(100ms);  // a few steps at size 2, then mid-training

    w2.kill9();
    driver.publish(3, {"w1"}, false, "worker w2 failed");
    REQUIRE(w1.wait_for_output("size 1 rank 0 version 3"));

    Trainer w3(dir, "w3", env_for("w3"));
    REQUIRE(wait_ready(driver, "w3"));
    driver.publish(4, {"w1", "w3"});
    INFO("w1 stderr: " << w1.errors());
    INFO("w3 stderr: " << w3.errors());
    CHECK(w1.wait_exit(30s) == 0);
    CHECK(w3.wait_exit(30s) == 0);
    CHECK(w3.output().find("size 2 rank 1 version 4") != std::string::npos);
    CHECK(w1.final_line() == reference);
    CHECK(w3.final_line() == reference);
  }
  fs::remove_all(dir);
}
