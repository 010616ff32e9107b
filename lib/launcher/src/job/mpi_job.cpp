// The process half of `hvdrun --mpi`: probing mpirun and running the job
// under it (contracts in mpi_launch.h).
#include "hvd/common/error.h"
#include "hvd/common/logging.h"
#include "hvd/common/secret.h"
#include "hvd/launcher/spawn/mpi/mpi_launch.h"
#include "hvd/launcher/hosts/network.h"
#include "hvd/launcher/plan/worker_env.h"
#include "hvd/store/http_store.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

namespace hvd::launcher {

namespace {

/// argv/envp arrays for exec, built before fork (no allocation after fork).
struct ExecArgs {
  std::vector<std::string> storage_argv, storage_env;
  std::vector<char*> argv, envp;
  ExecArgs(const std::vector<std::string>& args, const std::map<std::string, std::string>& env)
      : storage_argv(args) {
    for (const auto& [k, v] : env) storage_env.push_back(k + "=" + v);
    for (auto& s : storage_argv) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (auto& s : storage_env) envp.push_back(s.data());
    envp.push_back(nullptr);
  }
};

/// In the child between fork and exec: only async-signal-safe calls.
[[noreturn]] void exec_child(const ExecArgs& a, int out_fd, int err_pipe_fd, bool death_signal) {
  setpgid(0, 0);
  if (death_signal) prctl(PR_SET_PDEATHSIG, SIGTERM);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) signal(sig, SIG_DFL);
  int devnull = open("/dev/null", O_RDONLY);
  if (devnull >= 0) {
    dup2(devnull, 0);
    if (devnull != 0) close(devnull);
  }
  if (out_fd >= 0) {
    dup2(out_fd, 1);
    dup2(out_fd, 2);
    if (out_fd > 2) close(out_fd);
  }
  execvpe(a.argv[0], a.argv.data(), a.envp.data());
  int err = errno;
  if (err_pipe_fd >= 0) {
    ssize_t ignored = write(err_pipe_fd, &err, sizeof err);
    (void)ignored;
  }
  _exit(127);
}

int status_to_code(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return exit_code::kInternal;
}

/// Forks and execs; returns the pid. Throws InvalidArgument("<prog> not
/// found on PATH...") when exec fails, reported through a CLOEXEC pipe.
pid_t spawn(const ExecArgs& a, int out_fd, bool death_signal, const std::string& not_found_message) {
  int errpipe[2];
  if (pipe2(errpipe, O_CLOEXEC) != 0) throw IoError(fmt::format("pipe: {}", std::strerror(errno)));
  pid_t pid = fork();
  if (pid < 0) {
    int err = errno;
    close(errpipe[0]);
    close(errpipe[1]);
    throw IoError(fmt::format("fork: {}", std::strerror(err)));
  }
  if (pid == 0) exec_child(a, out_fd, errpipe[1], death_signal);
  close(errpipe[1]);
  int child_errno = 0;
  ssize_t n;
  do {
    n = read(errpipe[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  close(errpipe[0]);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (child_errno == ENOENT) throw InvalidArgument(not_found_message);
    throw InvalidArgument(fmt::format("cannot run {}: {}", a.storage_argv.front(), std::strerror(child_errno)));
  }
  return pid;
}

void kill_and_reap(pid_t pid) {
  kill(-pid, SIGKILL);
  kill(pid, SIGKILL);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
}

}  // namespace

MpiInfo probe_mpirun(const std::string& mpirun, Deadline deadline) {
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) throw IoError(fmt::format("pipe: {}", std::strerror(errno)));
  ExecArgs args({mpirun, "--version"}, current_environment());
  pid_t pid;
  try {
    pid = spawn(args, out[1], false,
                mpirun == "mpirun" ? std::string("mpirun not found on PATH; install Open MPI or drop --mpi")
                                   : fmt::format("{} not found; install Open MPI or drop --mpi", mpirun));
  } catch (...) {
    close(out[0]);
    close(out[1]);
    throw;
  }
  close(out[1]);
  std::string text;
  constexpr std::size_t kMaxOutput = 1 << 20;
  for (;;) {
    pollfd p{out[0], POLLIN, 0};
    int r = poll(&p, 1, deadline.poll_timeout_ms());
    if (r < 0 && errno == EINTR) continue;
    if (r == 0 || deadline.expired()) {
      close(out[0]);
      kill_and_reap(pid);
      throw TimeoutError(fmt::format("'{} --version' did not finish in time; is {} working?", mpirun, mpirun));
    }
    char buf[4096];
    ssize_t n = read(out[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (text.size() < kMaxOutput) text.append(buf, static_cast<std::size_t>(n));
  }
  close(out[0]);
  int status = 0;
  // The output is closed; a well-behaved mpirun exits now. Bound it anyway.
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) break;
    if (deadline.expired()) {
      kill_and_reap(pid);
      throw TimeoutError(fmt::format("'{} --version' did not exit in time", mpirun));
    }
    usleep(10000);
  }
  MpiInfo info;
  info.mpirun = mpirun;
  info.impl = detect_mpi_impl(text);
  std::size_t nl = text.find('\n');
  info.version_line = text.substr(0, nl);
  while (!info.version_line.empty() && std::isspace(static_cast<unsigned char>(info.version_line.back()))) {
    info.version_line.pop_back();
  }
  if (status_to_code(status) != 0) {
    throw InvalidArgument(fmt::format("'{} --version' failed with status {}: {}", mpirun, status_to_code(status),
                                      info.version_line));
  }
  if (info.impl == MpiImpl::Unknown) {
    throw InvalidArgument(fmt::format("unsupported MPI implementation '{}'; hvdrun --mpi supports Open MPI, "
                                      "MPICH and Intel MPI (or drop --mpi)",
                                      info.version_line));
  }
  return info;
}

int run_mpi_job(const Options& options, const JobPlan& plan, const std::map<std::string, std::string>& job_env) {
  init_logging("hvdrun", options.verbose ? spdlog::level::debug : spdlog::level::info);
  if (plan.workers.empty()) {
    spdlog::warn("nothing to run: the job has no workers");
    return exit_code::kOk;
  }
  MpiInfo info;
  try {
    info = probe_mpirun("mpirun");
  } catch (const Error& e) {
    std::fprintf(stderr, "hvdrun: error: %s\n", e.what());
    return exit_code::kLaunch;
  }

  // Block the signals we forward before any thread exists (the store's
  // threads inherit the mask), and take them synchronously below.
  sigset_t forwarded, previous;
  sigemptyset(&forwarded);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&forwarded, sig);
  pthread_sigmask(SIG_BLOCK, &forwarded, &previous);
  struct RestoreMask {
    sigset_t mask;
    ~RestoreMask() { pthread_sigmask(SIG_SETMASK, &mask, nullptr); }
  } restore{previous};

  const std::string secret = random_secret();
  std::string driver_addr;
  try {
    driver_addr = choose_driver_address(options.network_interfaces, plan.hosts);
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "hvdrun: error: %s\n", e.what());
    return exit_code::kUsage;
  } catch (const Error& e) {
    // A host that does not resolve or has no route: unreachable (exit 3).
    std::fprintf(stderr, "hvdrun: error: %s\n", e.what());
    return exit_code::kLaunch;
  }
  store::ServerOptions so;
  // Ranks may be on any host mpirun reaches; when every host is local the
  // address is 127.0.0.1 and the store stays on loopback.
  so.bind_address = driver_addr;
  so.secret = secret;
  so.allow_unauthenticated = options.insecure_store;
  store::HttpStoreServer server(so);
  try {
    server.start();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hvdrun: error: cannot start the rendezvous store on %s: %s\n", driver_addr.c_str(),
                 e.what());
    return exit_code::kLaunch;
  }

  std::map<std::string, std::string> exported = job_env;
  exported["HOROVOD_GLOO_RENDEZVOUS_ADDR"] = driver_addr;
  exported["HOROVOD_GLOO_RENDEZVOUS_PORT"] = std::to_string(server.port());
  exported[kSecretEnv] = secret;

  std::vector<std::string> cmd;
  try {
    cmd = build_mpirun_command(info, options, plan, exported, geteuid() == 0);
  } catch (const InvalidArgument& e) {
    std::fprintf(stderr, "hvdrun: error: %s\n", e.what());
    return exit_code::kUsage;
  }
  std::map<std::string, std::string> child_env = current_environment();
  for (const auto& [k, v] : exported) child_env[k] = v;
  // Open MPI refuses root without these even when the flag is given by an
  // older mpirun; harmless elsewhere.
  if (geteuid() == 0 && info.impl == MpiImpl::OpenMpi) {
    child_env.emplace("OMPI_ALLOW_RUN_AS_ROOT", "1");
    child_env.emplace("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  }
  spdlog::info("{} ranks through {} on {} host{} (store {}:{})", plan.workers.size(), mpi_impl_name(info.impl),
               plan.hosts.size(), plan.hosts.size() == 1 ? "" : "s", driver_addr, server.port());
  {
    std::string line;
    for (const auto& w : cmd) line += (line.empty() ? "" : " ") + shell_quote(w);
    spdlog::debug("mpirun command: {}", line);
  }

  ExecArgs args(cmd, child_env);
  pid_t pid;
  try {
    pid = spawn(args, -1, true, "mpirun not found on PATH; install Open MPI or drop --mpi");
  } catch (const Error& e) {
    std::fprintf(stderr, "hvdrun: error: %s\n", e.what());
    return exit_code::kLaunch;
  }
  setpgid(pid, pid);  // also done in the child; whichever runs first wins

  const auto grace = options.kill_grace + std::chrono::seconds(5);
  int forwarded_sig = 0;
  std::optional<Clock::time_point> kill_at;
  int status = 0;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0 && errno != EINTR) {
      std::fprintf(stderr, "hvdrun: error: waitpid(mpirun): %s\n", std::strerror(errno));
      kill_and_reap(pid);
      return exit_code::kInternal;
    }
    if (kill_at && Clock::now() >= *kill_at) {
      spdlog::warn("mpirun still running {} ms after signal {}; killing its process group",
                   std::chrono::duration_cast<std::chrono::milliseconds>(grace).count(), forwarded_sig);
      kill_and_reap(pid);
      status = 0;
      break;
    }
    timespec wait_for{0, 50 * 1000 * 1000};
    int sig = sigtimedwait(&forwarded, nullptr, &wait_for);
    if (sig <= 0) continue;
    if (forwarded_sig == 0) {
      forwarded_sig = sig;
      spdlog::info("signal {} received; forwarding it to mpirun", sig);
      kill(pid, sig);
      kill_at = Clock::now() + grace;
    } else {
      spdlog::warn("second signal {}: killing mpirun's process group now", sig);
      kill_and_reap(pid);
      status = 0;
      break;
    }
  }
  // Anything mpirun left in its process group (it normally reaps its ranks
  // itself) goes with it: no process outlives hvdrun.
  kill(-pid, SIGKILL);
  server.stop();
  if (forwarded_sig != 0) return 128 + forwarded_sig;
  int code = status_to_code(status);
  if (code != 0) spdlog::error("mpirun exited with status {}", code);
  return code;
}

int run_mpi_mode(const Options& options, const JobPlan& plan) {
  const auto job_env = mpi_job_env(options, current_environment());
  if (options.dry_run == DryRunFormat::None) return run_mpi_job(options, plan, job_env);
  try {
    const std::string text =
        render_mpi_dry_run(probe_mpirun(), options, plan, job_env, ::geteuid() == 0, options.dry_run);
    std::fputs(text.c_str(), stdout);
  } catch (const Error& e) {  // no/unsupported mpirun, uneven Intel MPI slots, bad --mpi-args
    std::fprintf(stderr, "hvdrun: error: %s\n", e.what());
    return exit_code::kLaunch;
  }
  return exit_code::kOk;
}

}  // namespace hvd::launcher
