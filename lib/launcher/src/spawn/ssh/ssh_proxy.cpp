// ProxyCommand and ProxyJump (contract in ssh_proxy.h).
#include "hvd/launcher/spawn/ssh/ssh_proxy.h"

#include "hvd/launcher/process/shell.h"
#include "hvd/launcher/process/status.h"
#include "hvd/launcher/process/subprocess.h"
#include "hvd/launcher/spawn/spawner.h"
#include "hvd/launcher/spawn/ssh/ssh_session.h"

#include <libssh2.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

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

/// "exited with code 7", "killed by SIGTERM (status 143)", ... (process/status.h).
std::string status_text(int wait_status) {
  return describe_status(exit_status_of(wait_status), signal_of(wait_status));
}

// ---------------------------------------------------------------------------
// ProxyCommand

class CommandProxy : public Proxy {
 public:
  CommandProxy(Subprocess process, std::string command) : process_(std::move(process)), command_(std::move(command)) {}
  ~CommandProxy() override { stop(); }

  std::string problem(bool wait) override {
    std::lock_guard<std::mutex> lock(mu_);
    const auto status = wait ? process_.reap_until(Deadline::after(1s)) : process_.try_reap();
    if (!status) return "";
    return fmt::format("its ProxyCommand {}", status_text(*status));
  }

  void stop() override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!process_.valid() || process_.reaped()) return;
    // Without its connection (the session closed its end) a proxy such as
    // `ssh -W` ends by itself; give it a moment, then stop its group.
    if (!process_.reap_until(Deadline::after(300ms))) process_.terminate_group(1000ms);
    spdlog::debug("ProxyCommand '{}' {}", command_, status_text(process_.wait_status()));
  }

 private:
  std::mutex mu_;
  Subprocess process_;
  std::string command_;
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
  SpawnOptions so;
  so.argv = user_shell_argv("exec " + command);
  so.stdin_fd = ChildFd::from(theirs.get());
  so.stdout_fd = ChildFd::from(theirs.get());  // stderr: hvdrun's, as OpenSSH
  Subprocess process;
  try {
    process = Subprocess::spawn(so);
  } catch (const std::exception& e) {  // SpawnError, IoError (fork)
    throw LaunchError(host, fmt::format("{}: ProxyCommand could not be started ({})", host, e.what()));
  }
  const pid_t pid = process.pid();
  spdlog::debug("{}: ProxyCommand '{}' started (pid {})", host, command, pid);
  *connection = std::move(ours);
  return std::make_unique<CommandProxy>(std::move(process), command);
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
