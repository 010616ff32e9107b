#include "hvd/launcher/job/run_internal.h"

#include <signal.h>

namespace hvd::launcher {

void reset_signals_for_exec() {
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2}) {
    ::sigaction(sig, &dfl, nullptr);
  }
}

char control_byte_for(int sig) {
  switch (sig) {
    case SIGINT: return 'I';
    case SIGTERM: return 'T';
    case SIGHUP: return 'H';
    case SIGKILL: return 'K';
    default: return 0;
  }
}

sigset_t forwarded_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGHUP);
  return set;
}

}  // namespace hvd::launcher
