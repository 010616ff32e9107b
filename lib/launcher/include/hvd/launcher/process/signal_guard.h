#pragma once
/// How hvdrun receives SIGINT/SIGTERM/SIGHUP: the one owner of hvdrun's
/// signal state. Every job mode (JobServices), an OCI run (MAIN and
/// WORKER), a platform leader and follower, and the agent (`hvdrun-agent`,
/// which adds SIGCHLD) read their signals through one.
///
/// The signals are blocked in the constructing thread before any other
/// thread exists (threads inherit the mask) and read from a signalfd by one
/// watcher thread; SIGPIPE is ignored so a closed stdout cannot kill hvdrun.
/// Children get both back to defaults (reset_signals_for_exec) before exec.
/// Construct it first thing in a run function, on the main thread.
#include "hvd/common/io.h"

#include <chrono>
#include <csignal>
#include <functional>
#include <initializer_list>
#include <thread>

namespace hvd::launcher {

class SignalGuard {
 public:
  /// The forwarded signals (SIGINT, SIGTERM, SIGHUP) and `also` (the agent
  /// adds SIGCHLD to learn of its worker's end in the same loop).
  explicit SignalGuard(std::initializer_list<int> also = {});
  /// Consumes signals that arrived after the job ended (the exit code
  /// already says it all), then restores the mask and SIGPIPE.
  ~SignalGuard();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

  /// Starts delivering signals to `on_signal` from a watcher thread.
  void watch(std::function<void(int)> on_signal);
  /// Stops the watcher thread; nothing is delivered after this returns.
  void stop_watching();

  /// Without a watcher: a signal that arrived, waiting up to `timeout`
  /// (zero: only look); 0 when none came.
  int wait(std::chrono::milliseconds timeout);
  /// Without a watcher, for a loop that polls several descriptors: this
  /// one becomes readable when a signal arrived (then wait(0) takes it).
  int fd() const { return fd_.get(); }

 private:
  sigset_t old_mask_;
  struct sigaction old_pipe_ {};
  UniqueFd fd_;
  UniqueFd stop_;
  std::thread watcher_;
};

}  // namespace hvd::launcher
