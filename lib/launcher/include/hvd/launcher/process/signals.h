#pragma once
/// The launcher's one signal table: which signals hvdrun forwards to its
/// workers, how a child gets a clean signal state before exec, and how a
/// signal is named in messages.
#include <csignal>
#include <string>

namespace hvd::launcher {

/// The signals hvdrun forwards to workers (SIGINT, SIGTERM, SIGHUP): the
/// launcher receives them through a signalfd (SignalGuard), the agent too.
sigset_t forwarded_signals();

/// For a freshly forked child, before exec: an empty signal mask and every
/// disposition back to SIG_DFL. Signal masks and SIG_IGN survive exec, so
/// without this a worker would inherit hvdrun's blocked SIGINT/SIGTERM
/// (handled through a signalfd) or ignored SIGPIPE and could not be stopped.
/// Async-signal-safe (Subprocess::spawn calls it between fork and exec).
void reset_signals_for_exec();

/// "SIGKILL", "SIGTERM", ...; "signal N" for a number without a name
/// (real-time signals, garbage).
std::string signal_name(int sig);

}  // namespace hvd::launcher
