#include "hvd/launcher/process/status.h"

#include <fmt/format.h>

#include <csignal>
#include <cstring>

namespace hvd::launcher {

namespace {

std::string signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    default: return fmt::format("signal {}", sig);
  }
}

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
