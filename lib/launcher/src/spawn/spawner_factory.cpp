#include "hvd/launcher/spawn/spawner_factory.h"

#include "hvd/launcher/hosts/network.h"
#include "hvd/launcher/spawn/local_spawner.h"
#include "hvd/launcher/spawn/srun/srun_launch.h"
#include "hvd/launcher/spawn/ssh/ssh_spawner.h"

#include <algorithm>
#include <cstdlib>

namespace hvd::launcher {

SpawnerOptions spawner_options(const Options& options) {
  SpawnerOptions out;
  out.kill_grace = options.kill_grace;
  out.ssh_port = options.ssh_port;
  out.ssh_identity_file = options.ssh_identity_file;
  out.ssh_strict_host_key_checking = options.ssh_strict_host_key_checking;
  out.ssh_keepalive = options.ssh_keepalive;
  out.verbose = options.verbose;
  out.launcher = options.launcher;
  out.srun_nodes = options.srun_nodes;
  return out;
}

DefaultSpawnerFactory::DefaultSpawnerFactory(SpawnerOptions options) : options_(std::move(options)) {}

bool DefaultSpawnerFactory::is_local(const std::string& host) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = local_.find(host);
    if (it != local_.end()) return it->second;
  }
  const bool local = is_local_host(host);  // outside the lock: may take a bounded name lookup
  std::lock_guard<std::mutex> lock(mutex_);
  local_.emplace(host, local);
  return local;
}

HostReach::Kind DefaultSpawnerFactory::kind(const std::string& host) {
  if (is_local(host)) return HostReach::Kind::Local;
  const bool allocation_node =
      std::find(options_.srun_nodes.begin(), options_.srun_nodes.end(), host) != options_.srun_nodes.end();
  if (options_.launcher == "srun" || allocation_node) return HostReach::Kind::Srun;
  return HostReach::Kind::Ssh;
}

SshSpawnerOptions DefaultSpawnerFactory::ssh_options() const {
  SshSpawnerOptions ssh;
  ssh.port = options_.ssh_port;
  ssh.identity_file = options_.ssh_identity_file;
  ssh.strict_host_key_checking = options_.ssh_strict_host_key_checking;
  ssh.agent_command = {local_agent_path()};
  ssh.kill_grace = options_.kill_grace;
  ssh.verbose = options_.verbose;
  ssh.keepalive = options_.ssh_keepalive;
  return ssh;
}

std::unique_ptr<Spawner> DefaultSpawnerFactory::make(const std::string& host) {
  switch (kind(host)) {
    case HostReach::Kind::Local: {
      LocalSpawnerOptions lo;
      lo.host = host;  // messages name the host as the job does (127.0.0.1, this machine's name)
      lo.agent_command = {local_agent_path()};
      lo.kill_grace = options_.kill_grace;
      return make_local_spawner(lo);
    }
    case HostReach::Kind::Srun: {
      // The node's agent through srun: a local process carrying the protocol
      // (spawn/srun/srun_launch.h), one step per node and launch. The node runs
      // the same hvdrun-agent path unless HVDRUN_REMOTE_AGENT names the command there.
      LocalSpawnerOptions lo;
      lo.host = host;
      const char* over = std::getenv("HVDRUN_REMOTE_AGENT");
      std::vector<std::string> agent = {local_agent_path()};
      if (over != nullptr && *over != '\0') agent = {"/bin/sh", "-c", "exec " + std::string(over)};  // as over SSH
      lo.agent_command = srun_agent_command(host, agent);
      lo.kill_grace = options_.kill_grace;
      // Launched from a helper thread like an SSH host's: no death signal
      // tied to it (srun would pass it on to the worker). hvdrun's end closes
      // srun's stdin, srun the agent's, and the agent stops the worker.
      lo.parent_death_signal = 0;
      return make_local_spawner(lo);
    }
    case HostReach::Kind::Ssh: break;
  }
  return make_ssh_spawner(ssh_options());
}

HostReach DefaultSpawnerFactory::reach(const std::string& host) {
  HostReach out;
  out.host = host;
  out.kind = kind(host);
  if (out.kind == HostReach::Kind::Ssh) out.ssh = describe_ssh_route(ssh_options(), host);
  return out;
}

}  // namespace hvd::launcher
