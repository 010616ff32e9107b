// A minimal stand-in for hvdrun, so the library's multi-process behaviour is
// tested independently of the launcher: runs an HttpStoreServer on
// 127.0.0.1, forks N workers with the HOROVOD_* environment hvdrun would set
// (one host), waits for all of them and prints one line per rank:
//   "launch: rank R exit C" or "launch: rank R signal S".
// Exit status: 0 when every rank exited 0, else 1. Each worker gets its own
// process group; if the launcher is interrupted, SIGKILLs them all.
//   collective_launch NP /path/to/program [args...]
#include "hvd/common/secret.h"
#include "hvd/store/http_store.h"

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace {

std::vector<pid_t> g_children;

void kill_children(int) {
  for (pid_t p : g_children) kill(-p, SIGKILL);
  _exit(130);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: collective_launch NP program [args...]\n");
    return 2;
  }
  const int np = std::atoi(argv[1]);
  if (np < 1 || np > 64) {
    std::fprintf(stderr, "collective_launch: NP must be in [1, 64]\n");
    return 2;
  }
  const std::string secret = hvd::random_secret(16);
  hvd::store::ServerOptions options;
  options.bind_address = "127.0.0.1";
  options.secret = secret;
  hvd::store::HttpStoreServer server(options);
  server.start();

  std::signal(SIGINT, kill_children);
  std::signal(SIGTERM, kill_children);
  // Everything the children need is built before fork(): the store server's
  // threads may hold the allocator's lock at that moment, so a child only
  // calls async-signal-safe functions (setpgid, execve, _exit).
  std::vector<std::vector<std::string>> envs(np);
  std::vector<std::vector<char*>> envps(np);
  for (int r = 0; r < np; ++r) {
    std::vector<std::string>& e = envs[r];
    for (char** p = environ; *p != nullptr; ++p) {
      if (std::strncmp(*p, "HOROVOD_", 8) != 0 && std::strncmp(*p, "HVDRUN_", 7) != 0) e.emplace_back(*p);
    }
    auto set = [&](const char* k, const std::string& v) { e.push_back(std::string(k) + "=" + v); };
    set("HOROVOD_RANK", std::to_string(r));
    set("HOROVOD_SIZE", std::to_string(np));
    set("HOROVOD_LOCAL_RANK", std::to_string(r));
    set("HOROVOD_LOCAL_SIZE", std::to_string(np));
    set("HOROVOD_CROSS_RANK", "0");
    set("HOROVOD_CROSS_SIZE", "1");
    set("HOROVOD_HOSTNAME", "localhost");
    set("HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1");
    set("HOROVOD_GLOO_RENDEZVOUS_PORT", std::to_string(server.port()));
    set("HOROVOD_CONTROLLER", "gloo");
    set("HOROVOD_CPU_OPERATIONS", "gloo");
    set("HOROVOD_START_TIMEOUT", "20");
    if (const char* level = std::getenv("HOROVOD_LOG_LEVEL")) set("HOROVOD_LOG_LEVEL", level);
    set(hvd::kSecretEnv, secret);
    for (auto& kv : e) envps[r].push_back(kv.data());
    envps[r].push_back(nullptr);
  }
  g_children.reserve(np);  // the signal handler reads it: never reallocate
  for (int r = 0; r < np; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      kill_children(0);
    }
    if (pid == 0) {
      setpgid(0, 0);
      execve(argv[2], argv + 2, envps[r].data());
      static const char msg[] = "collective_launch: execve failed\n";
      (void)!write(2, msg, sizeof msg - 1);
      _exit(127);
    }
    setpgid(pid, pid);
    g_children.push_back(pid);
  }
  bool all_ok = true;
  for (int r = 0; r < np; ++r) {
    int status = 0;
    while (waitpid(g_children[r], &status, 0) < 0) {
      if (errno != EINTR) {
        std::perror("waitpid");
        return 1;
      }
    }
    if (WIFEXITED(status)) {
      std::printf("launch: rank %d exit %d\n", r, WEXITSTATUS(status));
      all_ok = all_ok && WEXITSTATUS(status) == 0;
    } else {
      std::printf("launch: rank %d signal %d\n", r, WTERMSIG(status));
      all_ok = false;
    }
    std::fflush(stdout);
  }
  server.stop();
  return all_ok ? 0 : 1;
}
