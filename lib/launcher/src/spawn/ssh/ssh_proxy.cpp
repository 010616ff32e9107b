// ProxyCommand and ProxyJump (contract in ssh_proxy.h).
#include "hvd/launcher/spawn/ssh/ssh_proxy.h"

#include "hvd/launcher/process/signals.h"
#include "hvd/launcher/spawn/spawner.h"
#include "hvd/launcher/spawn/ssh/ssh_session.h"

#include <fcntl.h>
#include <libssh2.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

extern char** environ;

namespace hvd::launcher::ssh {

namespace {

using namespace std::chrono_literals;

std::pair<UniqueFd, UniqueFd> make_socketpair(const std::string& host, const char* what) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    throw LaunchError(host, fmt::format("{}: {}: socketpair: {}", host, what, std::strerror(errno)));
  }
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

std::string status_text(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by {}", signal_name(WTERMSIG(status)));
  return "ended";
}

// ---------------------------------------------------------------------------
// ProxyCommand

class CommandProxy : public Proxy {
 public:
  CommandProxy(pid_t pid, std::string command) : pid_(pid), command_(std::move(command)) {}
  ~CommandProxy() override { stop(); }

  std::string problem(bool wait) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto until = std::chrono::steady_clock::now() + (wait ? 1s : 0s);
    for (;;) {
      reap_locked(false);
      if (reaped_ || std::chrono::steady_clock::now() >= until) break;
      std::this_thread::sleep_for(10ms);
    }
    if (!reaped_) return "";
    return fmt::format("its ProxyCommand {}", status_text(status_));
  }

  void stop() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (reaped_ || pid_ <= 0) return;
    // Without its connection (the session closed its end) a proxy such as
    // `ssh -W` ends by itself; give it a moment, then signal its group.
    auto wait_for = [&](std::chrono::milliseconds d) {
      const auto until = std::chrono::steady_clock::now() + d;
      while (!reap_locked(false) && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
      return reaped_;
    };
    if (wait_for(300ms)) return;
    ::kill(-pid_, SIGTERM);
    if (wait_for(1000ms)) return;
    ::kill(-pid_, SIGKILL);
    reap_locked(true);
  }

 private:
  bool reap_locked(bool block) {
    if (reaped_) return true;
    int status = 0;
    pid_t w;
    do {
      w = ::waitpid(pid_, &status, block ? 0 : WNOHANG);
    } while (w < 0 && errno == EINTR);
    if (w == pid_) {
      reaped_ = true;
      status_ = status;
      spdlog::debug("ProxyCommand '{}' {}", command_, status_text(status));
    } else if (w < 0) {
      reaped_ = true;  // not ours to wait for any more (ECHILD)
      status_ = 0;
    }
    return reaped_;
  }

  std::mutex mu_;
  pid_t pid_;
  std::string command_;
  bool reaped_ = false;
  int status_ = 0;
};

// ---------------------------------------------------------------------------
// ProxyJump

class JumpRelay : public Proxy {
 public:
  JumpRelay(std::unique_ptr<Session> jump, LIBSSH2_CHANNEL* channel, UniqueFd pair, UniqueFd wake)
      : jump_(std::move(jump)), channel_(channel), pair_(std::move(pair)), wake_(std::move(wake)) {
    name_ = jump_->host();
    thread_ = std::thread([this] { run(); });
  }
  ~JumpRelay() override { stop(); }

  std::string problem(bool wait) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (wait) cv_.wait_for(lock, 1s, [&] { return done_; });
    return problem_;
  }

  void stop() override {
    {
      // The session closed its end: the relay forwards what is left (the
      // SSH disconnect) and ends by itself; then it is told to stop.
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, 500ms, [&] { return done_; });
    }
    stop_.store(true);
    const uint64_t one = 1;
    if (wake_) {
      ssize_t n = ::write(wake_.get(), &one, sizeof one);
      (void)n;
    }
    if (thread_.joinable()) thread_.join();
  }

 private:
  static constexpr std::size_t kBuffer = 256 * 1024;  // per direction

  void fail(const std::string& why) {
    std::lock_guard<std::mutex> lock(mu_);
    if (problem_.empty()) problem_ = fmt::format("jump host {}: {}", name_, why);
  }

  void run() {
    std::string to_channel, to_pair;
    bool pair_eof = false, channel_eof = false, pair_shut = false;
    std::vector<char> buf(32 * 1024);
    while (!stop_.load()) {
      bool progress = false;
      const uint64_t received_before = jump_->bytes_received();
      // The host -> the session.
      if (!channel_eof && to_pair.size() < kBuffer) {
        ssize_t n = libssh2_channel_read(channel_, buf.data(), buf.size());
        if (n > 0) {
          to_pair.append(buf.data(), static_cast<std::size_t>(n));
          progress = true;
        } else if (n == 0 || (n == LIBSSH2_ERROR_EAGAIN && libssh2_channel_eof(channel_) == 1)) {
          if (libssh2_channel_eof(channel_) == 1) channel_eof = true;
        } else if (n != LIBSSH2_ERROR_EAGAIN) {
          fail(jump_->connection_error());
          break;
        }
      }
      if (!to_pair.empty()) {
        ssize_t w = ::send(pair_.get(), to_pair.data(), to_pair.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) {
          to_pair.erase(0, static_cast<std::size_t>(w));
          progress = true;
        } else if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          break;  // the session closed its end
        }
      }
      if (channel_eof && to_pair.empty() && !pair_shut) {
        ::shutdown(pair_.get(), SHUT_WR);  // the host closed the connection: the session sees it
        pair_shut = true;
      }
      // The session -> the host.
      if (!pair_eof && to_channel.size() < kBuffer) {
        ssize_t r = ::recv(pair_.get(), buf.data(), buf.size(), MSG_DONTWAIT);
        if (r > 0) {
          to_channel.append(buf.data(), static_cast<std::size_t>(r));
          progress = true;
        } else if (r == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          pair_eof = true;
        }
      }
      if (!to_channel.empty() && !channel_eof) {
        ssize_t w = libssh2_channel_write(channel_, to_channel.data(), to_channel.size());
        if (w > 0) {
          to_channel.erase(0, static_cast<std::size_t>(w));
          progress = true;
        } else if (w != LIBSSH2_ERROR_EAGAIN) {
          fail(jump_->connection_error());
          break;
        }
      } else if (channel_eof) {
        to_channel.clear();
      }
      if (pair_eof && to_channel.empty()) break;  // the session is done
      if (progress || jump_->bytes_received() != received_before) continue;
      short jump_events = 0;
      if ((!channel_eof && to_pair.size() < kBuffer) || !to_channel.empty()) jump_events |= POLLIN;
      if (!to_channel.empty()) jump_events |= static_cast<short>(jump_->wanted_events() & POLLOUT);
      short pair_events = 0;
      if (!pair_eof && to_channel.size() < kBuffer) pair_events |= POLLIN;
      if (!to_pair.empty()) pair_events |= POLLOUT;
      pollfd fds[3] = {{jump_->fd(), jump_events, 0}, {pair_.get(), pair_events, 0}, {wake_.get(), POLLIN, 0}};
      int rc = ::poll(fds, 3, 1000);
      if (rc < 0 && errno != EINTR) {
        fail(fmt::format("poll: {}", std::strerror(errno)));
        break;
      }
    }
    pair_.reset();  // the session sees the end (if it had not closed first)
    // Close the channel and the jump host's session, bounded.
    const Deadline d = Deadline::after(500ms);
    while (libssh2_channel_close(channel_) == LIBSSH2_ERROR_EAGAIN && !d.expired()) {
      pollfd p{jump_->fd(), jump_->wanted_events(), 0};
      ::poll(&p, 1, 10);
    }
    libssh2_channel_free(channel_);
    channel_ = nullptr;
    jump_->close();
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
  }

  std::unique_ptr<Session> jump_;
  LIBSSH2_CHANNEL* channel_;
  UniqueFd pair_;
  UniqueFd wake_;
  std::string name_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string problem_;
};

}  // namespace

std::unique_ptr<Proxy> start_proxy_command(const std::string& host, const std::string& command, UniqueFd* connection) {
  auto [ours, theirs] = make_socketpair(host, "ProxyCommand");
  const char* sh = std::getenv("SHELL");
  const std::string shell = sh != nullptr && *sh != '\0' ? sh : "/bin/sh";
  posix_spawn_file_actions_t fa;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, theirs.get(), 0);
  posix_spawn_file_actions_adddup2(&fa, theirs.get(), 1);
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  std::string arg0 = shell, arg1 = "-c", arg2 = "exec " + command;
  char* argv[] = {arg0.data(), arg1.data(), arg2.data(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, shell.c_str(), &fa, &attr, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    throw LaunchError(host,
                      fmt::format("{}: ProxyCommand could not be started ({}: {})", host, shell, std::strerror(rc)));
  }
  spdlog::debug("{}: ProxyCommand '{}' started (pid {})", host, command, pid);
  *connection = std::move(ours);
  return std::make_unique<CommandProxy>(pid, command);
}

std::unique_ptr<Proxy> start_jump_relay(const std::string& host, std::unique_ptr<Session> jump,
                                        const std::string& to_host, int to_port, Deadline deadline,
                                        const std::atomic<bool>* cancel, UniqueFd* connection) {
  (void)cancel;  // the jump session's waits already look at it
  LIBSSH2_SESSION* raw = jump->raw();
  LIBSSH2_CHANNEL* channel = nullptr;
  const std::string where = fmt::format("{}:{}", to_host, to_port);
  for (;;) {
    channel = libssh2_channel_direct_tcpip_ex(raw, to_host.c_str(), to_port, "127.0.0.1", 22);
    if (channel != nullptr) break;
    if (libssh2_session_last_errno(raw) != LIBSSH2_ERROR_EAGAIN) {
      throw LaunchError(host, fmt::format("{}: jump host {} could not connect to {} ({})", host, jump->peer(), where,
                                          jump->last_error()));
    }
    try {
      jump->wait_socket(deadline, "opening a connection through the jump host");
    } catch (const LaunchError& e) {
      throw LaunchError(host, fmt::format("{}: jump host {}", host, e.what()));
    }
  }
  spdlog::debug("{}: connected to {} through the jump host {}", host, where, jump->peer());
  auto [ours, theirs] = make_socketpair(host, "ProxyJump");
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake) {
    libssh2_channel_free(channel);
    throw LaunchError(host, fmt::format("{}: ProxyJump: eventfd: {}", host, std::strerror(errno)));
  }
  *connection = std::move(ours);
  return std::make_unique<JumpRelay>(std::move(jump), channel, std::move(theirs), std::move(wake));
}

}  // namespace hvd::launcher::ssh
