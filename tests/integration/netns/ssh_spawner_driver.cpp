// Drives make_ssh_spawner directly, without the supervisor, so the netns
// tests can check spawner-level behaviour (keepalive-based loss detection,
// exactly one exit per rank, control bytes) with settings hvdrun does not
// expose (a 1 s keepalive).
//
//   ssh_spawner_driver --host H --identity KEY [--port P] [--keepalive S]
//       [--ranks N] [--timeout S] [--agent HVDRUN_AGENT] [--signal-after-ms MS]
//       [--signal-after-lines N] [--signal TERM|INT|HUP|KILL] -- CMD ARGS...
//
// --signal-after-lines waits (up to 20 s) until N output lines arrived
// before the delay of --signal-after-ms starts, so a test can signal
// workers only once they are known to run (and to have set their traps).
//
// Prints "out <rank> <stdout|stderr> <line>" per output line and
// "exit <rank> status=S signal=N lost=<reason>" per exit; exits 0 once every
// rank exited, 3 with the LaunchError message on a failed launch.
#include "hvd/common/logging.h"
#include "hvd/launcher/spawn/ssh/ssh_spawner.h"

#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using hvd::launcher::EventSink;
using hvd::launcher::Stream;
using hvd::launcher::WorkerExit;

class PrintingSink : public EventSink {
 public:
  void on_output(int rank, Stream stream, const char* data, std::size_t len) override {
    std::lock_guard<std::mutex> lock(mu_);
    std::string& buf = partial_[{rank, stream == Stream::Stdout ? 0 : 1}];
    buf.append(data, len);
    std::size_t pos;
    while ((pos = buf.find('\n')) != std::string::npos) {
      std::printf("out %d %s %s\n", rank, stream == Stream::Stdout ? "stdout" : "stderr", buf.substr(0, pos).c_str());
      buf.erase(0, pos + 1);
      ++lines_;
    }
    std::fflush(stdout);
    cv_.notify_all();
  }
  void on_exit(const WorkerExit& e) override {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [key, buf] : partial_) {
      if (key.first == e.rank && !buf.empty()) {
        std::printf("out %d %s %s\n", e.rank, key.second == 0 ? "stdout" : "stderr", buf.c_str());
        buf.clear();
      }
    }
    std::printf("exit %d status=%d signal=%d lost=%s\n", e.rank, e.status, e.signal, e.lost_reason.c_str());
    std::fflush(stdout);
    ++exits_;
    cv_.notify_all();
  }
  bool wait_lines(int n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return lines_ >= n; });
  }
  bool wait_exits(int n, std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return exits_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<int, int>, std::string> partial_;
  int exits_ = 0;
  int lines_ = 0;
};

int signal_by_name(const std::string& name) {
  if (name == "TERM") return SIGTERM;
  if (name == "INT") return SIGINT;
  if (name == "HUP") return SIGHUP;
  if (name == "KILL") return SIGKILL;
  return 0;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "ssh_spawner_driver: %s\n", why);
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  hvd::init_logging("driver", std::getenv("HVD_DRIVER_DEBUG") ? spdlog::level::debug : spdlog::level::info);
  hvd::launcher::SshSpawnerOptions options;
  std::string host;
  int ranks = 1;
  int timeout_s = 10;
  int signal_after_ms = -1;
  int signal_after_lines = 0;
  int sig = 0;
  std::string agent;
  std::vector<std::string> command;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + a).c_str());
      return argv[++i];
    };
    if (a == "--host")
      host = next();
    else if (a == "--identity")
      options.identity_file = next();
    else if (a == "--port")
      options.port = std::stoi(next());
    else if (a == "--keepalive")
      options.keepalive = std::chrono::seconds(std::stoi(next()));
    else if (a == "--ranks")
      ranks = std::stoi(next());
    else if (a == "--timeout")
      timeout_s = std::stoi(next());
    else if (a == "--agent")
      agent = next();
    else if (a == "--signal-after-ms")
      signal_after_ms = std::stoi(next());
    else if (a == "--signal-after-lines")
      signal_after_lines = std::stoi(next());
    else if (a == "--signal")
      sig = signal_by_name(next());
    else if (a == "--") {
      command.assign(argv + i + 1, argv + argc);
      break;
    } else
      usage(("unknown argument " + a).c_str());
  }
  if (host.empty() || command.empty()) usage("--host and a command are required");
  if (!agent.empty()) options.agent_command = {agent};

  std::vector<hvd::launcher::WorkerSpec> workers;
  for (int r = 0; r < ranks; ++r) {
    hvd::launcher::WorkerSpec w;
    w.slot.hostname = host;
    w.slot.rank = r;
    w.slot.local_rank = r;
    w.slot.local_size = ranks;
    w.argv = command;
    w.env = {{"PATH", "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"},
             {"HOROVOD_RANK", std::to_string(r)},
             {"HOROVOD_SIZE", std::to_string(ranks)},
             {"HVDRUN_SECRET", "driver-secret-never-logged"}};
    w.cwd = "/";
    workers.push_back(std::move(w));
  }

  PrintingSink sink;
  auto spawner = hvd::launcher::make_ssh_spawner(options);
  try {
    spawner->launch(workers, sink, hvd::Deadline::after(std::chrono::seconds(timeout_s)));
  } catch (const hvd::launcher::LaunchError& e) {
    std::fprintf(stderr, "launch failed: %s\n", e.what());
    return 3;
  }
  if (signal_after_lines > 0 && !sink.wait_lines(signal_after_lines, std::chrono::seconds(20))) {
    std::fprintf(stderr, "ssh_spawner_driver: fewer than %d output lines within 20 s\n", signal_after_lines);
  }
  if (signal_after_ms >= 0 && sig != 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(signal_after_ms));
    for (int r = 0; r < ranks; ++r) spawner->signal(r, sig);
  }
  bool all = sink.wait_exits(ranks, std::chrono::seconds(60));
  spawner->shutdown();
  return all ? 0 : 1;
}
