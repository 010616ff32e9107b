#pragma once
/// How hvdrun receives SIGINT/SIGTERM/SIGHUP while it supervises a job
/// (static and elastic runs share it).
///
/// The signals are blocked in the constructing thread before any other
/// thread exists (threads inherit the mask) and read from a signalfd by one
/// watcher thread; SIGPIPE is ignored so a closed stdout cannot kill hvdrun.
/// Children get both back to defaults (reset_signals_for_exec) before exec.
/// Construct it first thing in a run function, on the main thread.
#include "hvd/common/io.h"

#include <csignal>
#include <functional>
#include <thread>

namespace hvd::launcher {

class SignalGuard {
 public:
  SignalGuard();
  /// Consumes signals that arrived after the job ended (the exit code
  /// already says it all), then restores the mask and SIGPIPE.
  ~SignalGuard();
  SignalGuard(const SignalGuard&) = delete;
  SignalGuard& operator=(const SignalGuard&) = delete;

  /// Starts delivering signals to `on_signal` from a watcher thread.
  void watch(std::function<void(int)> on_signal);
  /// Stops the watcher thread; nothing is delivered after this returns.
  void stop_watching();

 private:
  sigset_t old_mask_;
  struct sigaction old_pipe_ {};
  UniqueFd fd_;
  UniqueFd stop_;
  std::thread watcher_;
};

}  // namespace hvd::launcher
