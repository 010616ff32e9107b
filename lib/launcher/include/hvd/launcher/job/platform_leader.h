#pragma once
/// The leader's side of a platform job with followers
/// (docs/platforms.md#followers, job/platform_follower.h): before the
/// workers start, it runs `hvdrun --follower-attach KEY` on every follower
/// host through the job's spawners (SSH with the job's settings), so each
/// follower knows its leader is there and notices when it goes away (the
/// agent ends the attach process when the leader's connection closes); when
/// the job has ended it reports the job's status to every follower
/// (`hvdrun --follower-status KEY N`, in parallel, bounded), then tears the
/// attach processes down.
#include "hvd/launcher/discovery/platform/platform.h"
#include "hvd/launcher/spawn/spawner_factory.h"

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace hvd::launcher::platform {

class PlatformLeader {
 public:
  /// `followers`: the follower hosts with their keys (follower_key).
  struct Follower {
    std::string host;
    std::string key;
  };
  PlatformLeader(SpawnerFactory& spawners, std::vector<Follower> followers, std::chrono::milliseconds start_timeout,
                 std::string self_exe);
  ~PlatformLeader();  // tears the attach processes down
  PlatformLeader(const PlatformLeader&) = delete;
  PlatformLeader& operator=(const PlatformLeader&) = delete;

  /// Attaches to every follower within the start timeout; 0, or
  /// exit_code::kLaunch with one "hvdrun: error: HOST: ..." line printed
  /// (a host that cannot be reached, or no follower answering there), or
  /// 128+N when interrupted by SIGINT/SIGTERM/SIGHUP meanwhile.
  int attach();

  /// Reports `status` to every follower (in parallel, within `budget`),
  /// then ends the attach processes. Failures are warnings (the job's
  /// status stays hvdrun's exit code).
  void report(int status, std::chrono::milliseconds budget = std::chrono::seconds(10));

  /// The command the agents run: `self_exe args...`, falling back to
  /// `hvdrun` on the host's PATH when self_exe does not exist there.
  static std::vector<std::string> remote_command(const std::string& self_exe, const std::vector<std::string>& args);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

/// The follower hosts of `p` as seen from this machine (every host but the
/// leader and this one) with their keys; empty when this machine does not
/// lead or followers_expected() says no (`why` gets its reason).
std::vector<PlatformLeader::Follower> follower_hosts(const PlatformDescription& p, const Environment& ctx,
                                                     std::string* why);

}  // namespace hvd::launcher::platform
