// --dry-run's "reached" section (spawn/host_reach.h): how each host would
// be reached, rendered from what DefaultSpawnerFactory::reach resolved.
#include "hvd/launcher/spawn/host_reach.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>

namespace hvd::launcher {

namespace {

std::string address(const ssh::SessionOptions& o) {
  const std::string& name = o.hostname.empty() ? o.host : o.hostname;
  const std::string shown = name.find(':') != std::string::npos ? "[" + name + "]" : name;
  return fmt::format("{}@{} port {}", o.user, shown, o.port);
}

/// The keys authentication would try, by their sources, in ssh_session.cpp's
/// order (OpenSSH's): the agent's copies of the files, the agent's other
/// keys (not under IdentitiesOnly or -i), then the files from disk.
std::string keys_text(const ssh::SessionOptions& o) {
  const std::string& home = o.home;
  const ssh::IdentitySources sources = ssh::identity_sources(o);
  std::string agent;  // "" when no agent would be asked
  std::string no_agent;  // why an agent that is configured would not be
  if (!sources.agent_socket.empty()) {
    const std::string& sock = sources.agent_socket;
    if (::access(sock.c_str(), F_OK) != 0) {
      no_agent = fmt::format(" (no ssh-agent: {} {} does not exist)",
                             sources.agent_from_config ? "IdentityAgent" : "$SSH_AUTH_SOCK", sock);
    } else {
      agent = sources.agent_from_config ? "ssh-agent at " + ssh::tilde_path(sock, home)
                                        : std::string("ssh-agent ($SSH_AUTH_SOCK)");
    }
  }
  std::vector<std::string> files;
  for (const auto& f : sources.files) files.push_back(ssh::tilde_path(f.path, home) + (f.exists ? "" : " (missing)"));
  if (sources.from_flag) {
    return fmt::format("-i {}, only that key{}{}", files.front(),
                       agent.empty() ? "" : "; through " + agent + " when it holds it", no_agent);
  }
  const std::string listed =
      files.empty() ? std::string("no default key file (~/.ssh/id_ed25519, id_ecdsa, id_rsa)")
                    : (sources.from_config ? "IdentityFile " : "") + fmt::format("{}", fmt::join(files, ", "));
  if (o.identities_only) {
    return listed + ", only those (IdentitiesOnly)" +
           (agent.empty() ? "" : "; through " + agent + " when it holds them") + no_agent;
  }
  if (agent.empty()) return listed + no_agent;
  return agent + " (its copies of the files first, then its other keys), then " + listed;
}

std::string host_key_text(const ssh::SessionOptions& o) {
  std::vector<std::string> files;
  for (const auto& f : o.known_hosts_files) files.push_back(ssh::tilde_path(f, o.home));
  return fmt::format("StrictHostKeyChecking {} ({}); known_hosts {}", ssh::policy_name(o.host_key_policy),
                     o.host_key_policy_source, fmt::join(files, ", "));
}

nlohmann::ordered_json session_json(const ssh::SessionOptions& o) {
  nlohmann::ordered_json j;
  j["user"] = o.user;
  j["hostname"] = o.hostname.empty() ? o.host : o.hostname;
  j["port"] = o.port;
  if (!o.proxy_command.empty()) {
    j["proxy"] = {{"kind", "ProxyCommand"}, {"command", o.proxy_command}, {"where", o.proxy_where}};
  } else if (!o.jump_hosts.empty()) {
    nlohmann::ordered_json hops = nlohmann::ordered_json::array();
    for (const auto& hop : o.jump_hosts) hops.push_back(session_json(hop));
    j["proxy"] = {{"kind", "ProxyJump"}, {"hops", hops}, {"where", o.proxy_where}};
  } else {
    j["proxy"] = nullptr;
  }
  j["keys"] = keys_text(o);
  j["host_key_policy"] = ssh::policy_name(o.host_key_policy);
  j["host_key_policy_source"] = o.host_key_policy_source;
  j["known_hosts"] = o.known_hosts_files;
  return j;
}

}  // namespace

std::string render_reach_text(const std::vector<HostReach>& hosts) {
  const bool all_local = std::all_of(hosts.begin(), hosts.end(),
                                     [](const HostReach& h) { return h.kind == HostReach::Kind::Local; });
  if (all_local) return "";
  std::string out = "\nhow each host would be reached (nothing is connected):\n";
  for (const auto& h : hosts) {
    switch (h.kind) {
      case HostReach::Kind::Local: out += fmt::format("  {}: this machine\n", h.host); break;
      case HostReach::Kind::Srun: out += fmt::format("  {}: srun --overlap (a node of this Slurm allocation)\n", h.host); break;
      case HostReach::Kind::Ssh: {
        const SshRoute& r = *h.ssh;
        if (!r.options) {
          // launch()'s line for the host starts with its name.
          const std::string prefix = h.host + ": ";
          const std::string why = r.error.rfind(prefix, 0) == 0 ? r.error.substr(prefix.size()) : r.error;
          out += fmt::format("  {}: cannot be reached: {}\n", h.host, why);
          break;
        }
        const ssh::SessionOptions& o = *r.options;
        out += fmt::format("  {}: ssh {}\n", h.host, address(o));
        if (!o.proxy_command.empty()) {
          out += fmt::format("    through ProxyCommand {} ({})\n", o.proxy_command, o.proxy_where);
        } else if (!o.jump_hosts.empty()) {
          out += fmt::format("    through ProxyJump ({}), outermost first:\n", o.proxy_where);
          for (const auto& hop : o.jump_hosts) {
            out += fmt::format("      {}: ssh {}{}\n", hop.host, address(hop),
                               hop.proxy_command.empty() ? "" : ", through its ProxyCommand " + hop.proxy_command);
          }
        }
        out += fmt::format("    keys: {}\n", keys_text(o));
        out += fmt::format("    host key: {}\n", host_key_text(o));
        break;
      }
    }
  }
  return out;
}

std::string render_reach_json(const std::vector<HostReach>& hosts) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& h : hosts) {
    nlohmann::ordered_json j;
    j["host"] = h.host;
    switch (h.kind) {
      case HostReach::Kind::Local: j["via"] = "local"; break;
      case HostReach::Kind::Srun: j["via"] = "srun"; break;
      case HostReach::Kind::Ssh:
        j["via"] = "ssh";
        if (h.ssh->options) {
          const nlohmann::ordered_json settings = session_json(*h.ssh->options);
          for (const auto& [key, value] : settings.items()) j[key] = value;
        } else {
          j["error"] = h.ssh->error;
        }
        break;
    }
    out.push_back(j);
  }
  return out.dump();
}

}  // namespace hvd::launcher
