#pragma once
/// Followers of a platform job (docs/platforms.md#followers): every machine
/// of a platform job runs the same hvdrun command line; the leader launches,
/// every other machine (a follower) waits until the leader has attached and
/// then exits with the job's status.
///
/// The follower listens on an abstract Unix socket (abstract names belong to
/// the network namespace, so one per machine) named after a key: the
/// platform, its job id when it has one and this host's platform name. Only
/// peers with the follower's uid (or root) are served (SO_PEERCRED).
///
/// The protocol, one text line each way:
///   follower -> peer   "hvdrun-follower 1 <key>\n" (on accept)
///   peer -> follower   "attach\n": held open while the leader's job runs
///                      (`hvdrun --follower-attach KEY`, started by the
///                      leader through its spawner: it dies with the leader)
///                      "status N\n": the job ended with N
///                      (`hvdrun --follower-status KEY N`); answered "ok\n"
///
/// The follower exits with N on a status; with exit_code::kPlatformFollower
/// when no leader attached within the start timeout, or when every attach
/// connection went away without a status for `grace` (the leader was
/// killed); 128+signal on SIGINT/SIGTERM/SIGHUP.
#include "hvd/launcher/discovery/platform/platform.h"

#include <chrono>
#include <string>

namespace hvd::launcher::platform {

/// The follower key of `host` in this platform job: "<platform>:<job id>:<host>"
/// (the job id from SLURM_JOB_ID, LSB_JOBID, CLOUD_ML_JOB_ID, SageMaker's
/// TRAINING_JOB_NAME or SM_TRAINING_ENV's job_name; empty when unknown).
std::string follower_key(const PlatformDescription& p, const Environment& ctx, const std::string& host);

/// The abstract socket name for `key` (without the leading NUL); at most
/// 100 bytes (long keys are shortened with a hash).
std::string follower_socket_name(const std::string& key);

/// Whether the other hosts of this platform job run hvdrun too, so the
/// leader must attach to them: SageMaker always (every machine runs the
/// entrypoint); Slurm only inside a job step over several nodes
/// (`srun hvdrun ...`: SLURM_STEP_NUM_NODES > 1), not from the batch script
/// that runs on the first node only; OCI never (its followers coordinate
/// through the shared directory). `why` receives one line for the log.
bool followers_expected(const PlatformDescription& p, const Environment& ctx, std::string* why);

/// Whether a TCP socket of this network namespace listens on `port`
/// (/proc/net/tcp and tcp6).
bool tcp_port_listening(int port);

struct FollowerOptions {
  std::string key;
  std::string platform;  ///< for messages
  std::string leader;  ///< the leader's host name, for messages
  std::chrono::milliseconds start_timeout{30000};  ///< until the first attach
  std::chrono::milliseconds grace{3000};  ///< after the last attach connection closed
  /// Read SIGINT/SIGTERM/SIGHUP (blocked in the calling thread, through a
  /// signalfd) and exit 128+N. Unit tests running it on a thread say false.
  bool handle_signals = true;
};

/// Runs the follower to its end; returns the exit code. Prints the one
/// error line itself ("hvdrun: error: ...").
int run_follower(const FollowerOptions& options);

/// hvdrun on a follower machine: one info line, a warning when nothing
/// listens on the SSH port the leader will use (-p, else the ssh_config
/// Port for this host, else 22), then run_follower with --start-timeout.
int follow_leader(const Options& options, const PlatformDescription& p, const Environment& ctx);

/// `hvdrun --follower-attach KEY [TIMEOUT_S]`: connects to the follower
/// (retrying up to TIMEOUT_S, default 30), prints "attached" on stdout and
/// holds the connection until the follower closes it (exit 1) or it is
/// killed. Exit 1 with one line when no follower answers in time.
int follower_attach_main(int argc, char** argv);

/// `hvdrun --follower-status KEY N [TIMEOUT_S]`: reports the job's status
/// N to the follower (retrying the connection up to TIMEOUT_S, default 5);
/// exit 0 once the follower acknowledged it, else 1 with one line.
int follower_status_main(int argc, char** argv);

/// The client side, for the two subcommands and tests: connects to the
/// follower of `key` within `timeout` and checks its greeting. Returns the
/// connected fd, or -1 with `error` set.
int connect_follower(const std::string& key, std::chrono::milliseconds timeout, std::string* error);

}  // namespace hvd::launcher::platform
