#include "hvd/launcher/process/status.h"

#include "hvd/launcher/process/signals.h"

#include <fmt/format.h>

#include <csignal>
#include <cstring>

namespace hvd::launcher {

namespace {

std::string signal_hint(int sig) {
  switch (sig) {
    case SIGKILL: return "; often the out-of-memory killer";
    case SIGSEGV: return "; a crash: invalid memory access";
    case SIGABRT: return "; the program aborted (failed assertion or uncaught exception)";
    case SIGBUS: return "; a crash: bus error (often a full /dev/shm)";
    case SIGFPE: return "; a crash: arithmetic error";
    case SIGPIPE: return "; it wrote to a closed pipe or socket";
    default: return "";
  }
}

}  // namespace

std::string describe_status(int status, int signal) {
  if (signal == 0 && status > 128 && status < 128 + 65) signal = status - 128;
  if (signal != 0) {
    return fmt::format("killed by {} (status {}{})", signal_name(signal), 128 + signal, signal_hint(signal));
  }
  if (status == 0) return "exited successfully";
  if (status == 127) return "command not found (status 127)";
  if (status == 126) return "command could not be executed (status 126: permission denied or not executable)";
  return fmt::format("exited with code {}", status);
}

}  // namespace hvd::launcher
