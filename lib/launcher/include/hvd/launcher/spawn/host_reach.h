#pragma once
/// How the workers of each host would be started, as data and as
/// --dry-run's "reached" section: this machine, srun, or SSH with the
/// settings a launch would connect with (spawner_factory.h's
/// DefaultSpawnerFactory::reach builds it; job/dry_run_report.cpp shows it).
#include "hvd/launcher/spawn/ssh/ssh_spawner.h"

#include <optional>
#include <string>
#include <vector>

namespace hvd::launcher {

/// How the workers of one host would be started: what make() would build
/// for it, resolved without starting or connecting anything (--dry-run).
struct HostReach {
  enum class Kind { Local, Srun, Ssh } kind = Kind::Local;
  std::string host;
  std::optional<SshRoute> ssh;  ///< Kind::Ssh
};

/// --dry-run's "reached" section. Text: nothing when every host is this
/// machine, else one block per host (the SSH ones with user, address, port,
/// proxy hops, keys and host key policy); JSON: one object per host.
std::string render_reach_text(const std::vector<HostReach>& hosts);
std::string render_reach_json(const std::vector<HostReach>& hosts);

}  // namespace hvd::launcher
