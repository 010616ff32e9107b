// SignalGuard: signalfd-based signal delivery, the one owner of hvdrun's signal state.
#include "hvd/launcher/process/signal_guard.h"

#include "hvd/common/error.h"
#include "hvd/launcher/process/signals.h"

#include <fmt/format.h>

#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace hvd::launcher {

SignalGuard::SignalGuard(std::initializer_list<int> also) {
  sigset_t set = forwarded_signals();
  for (int sig : also) sigaddset(&set, sig);
  pthread_sigmask(SIG_BLOCK, &set, &old_mask_);
  fd_.reset(::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!fd_) throw IoError(fmt::format("signalfd failed: {}", std::strerror(errno)));
  stop_.reset(::eventfd(0, EFD_CLOEXEC));
  if (!stop_) throw IoError(fmt::format("eventfd failed: {}", std::strerror(errno)));
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigemptyset(&ign.sa_mask);
  ::sigaction(SIGPIPE, &ign, &old_pipe_);
}

void SignalGuard::watch(std::function<void(int)> on_signal) {
  watcher_ = std::thread([this, on_signal = std::move(on_signal)] {
    for (;;) {
      struct pollfd fds[2] = {{fd_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0 && errno != EINTR) return;
      if (fds[1].revents) return;
      struct signalfd_siginfo si;
      while (::read(fd_.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        on_signal(static_cast<int>(si.ssi_signo));
      }
    }
  });
}

void SignalGuard::stop_watching() {
  if (!watcher_.joinable()) return;
  uint64_t one = 1;
  ssize_t ignored = ::write(stop_.get(), &one, sizeof one);
  (void)ignored;
  watcher_.join();
}

int SignalGuard::wait(std::chrono::milliseconds timeout) {
  struct pollfd pfd = {fd_.get(), POLLIN, 0};
  if (timeout.count() > 0 && ::poll(&pfd, 1, static_cast<int>(timeout.count())) <= 0) return 0;
  struct signalfd_siginfo si;
  if (::read(fd_.get(), &si, sizeof si) != static_cast<ssize_t>(sizeof si)) return 0;
  return static_cast<int>(si.ssi_signo);
}

SignalGuard::~SignalGuard() {
  stop_watching();
  struct signalfd_siginfo si;
  while (::read(fd_.get(), &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
  }
  ::sigaction(SIGPIPE, &old_pipe_, nullptr);
  pthread_sigmask(SIG_SETMASK, &old_mask_, nullptr);
}

}  // namespace hvd::launcher
