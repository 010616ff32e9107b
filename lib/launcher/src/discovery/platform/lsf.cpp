// IBM Spectrum LSF jobs (docs/platforms.md#lsf).
#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <sstream>

#include "hvd/common/error.h"
#include "hvd/launcher/discovery/platform/platform.h"

namespace hvd::launcher::platform {

namespace {

/// The short name: up to the first '.'.
std::string short_name(const std::string& name) { return name.substr(0, name.find('.')); }

/// Whether LSF's `listed` name is this machine's `mine` (either may be the
/// fully qualified one).
bool same_host(const std::string& listed, const std::string& mine) {
  return listed == mine || short_name(listed) == short_name(mine);
}

}  // namespace

std::vector<HostSpec> parse_lsb_mcpu_hosts(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> tokens;
  for (std::string t; in >> t;) tokens.push_back(t);
  if (tokens.empty()) throw InvalidArgument("LSB_MCPU_HOSTS is empty (expected 'hostA 4 hostB 4')");
  if (tokens.size() % 2 != 0) {
    throw InvalidArgument(fmt::format(
        "LSB_MCPU_HOSTS='{}': {} words, expected pairs of a host name and its slot count ('hostA 4 hostB 4')", text,
        tokens.size()));
  }
  std::vector<HostSpec> out;
  for (size_t i = 0; i < tokens.size(); i += 2) {
    const std::string& name = tokens[i];
    const std::string& count = tokens[i + 1];
    const bool digits = !count.empty() && count.size() <= 6 && std::all_of(count.begin(), count.end(), [](char c) {
      return std::isdigit(static_cast<unsigned char>(c));
    });
    if (!digits || std::stoi(count) < 1) {
      throw InvalidArgument(fmt::format(
          "LSB_MCPU_HOSTS='{}': the slot count '{}' of host '{}' is not a whole number >= 1", text, count, name));
    }
    for (const auto& h : out) {
      if (h.name == name)
        throw InvalidArgument(fmt::format("LSB_MCPU_HOSTS='{}': host '{}' is listed twice", text, name));
    }
    out.push_back(HostSpec{name, std::stoi(count)});
  }
  return out;
}

std::optional<PlatformDescription> detect_lsf(const Environment& ctx) {
  const auto job_id = ctx.get("LSB_JOBID");
  if (!job_id) return std::nullopt;
  PlatformDescription p;
  p.name = "lsf";
  p.evidence.push_back("LSB_JOBID=" + *job_id);
  const auto list = ctx.get("LSB_MCPU_HOSTS");
  if (!list) throw InvalidArgument("LSB_JOBID is set but LSB_MCPU_HOSTS is not: not inside an LSF job?");
  p.evidence.push_back("LSB_MCPU_HOSTS=" + *list);
  std::vector<HostSpec> hosts = parse_lsb_mcpu_hosts(*list);

  // LSF runs the job script on the first host: it launches.
  const std::string me = ctx.host_name();
  const auto named = ctx.get("HVDRUN_HOSTNAME");
  p.evidence.push_back(!ctx.hostname && named && !named->empty() ? "HVDRUN_HOSTNAME=" + me : "host name " + me);
  p.leader = hosts.front().name;
  for (const auto& h : hosts) {
    if (same_host(h.name, me)) p.this_host = h.name;
  }
  // horovodrun runs on the launch node and starts ranks on the compute
  // nodes only; the launch node has no GPUs there. Only the launch node
  // itself can count its GPUs, so it drops itself from the hosts.
  if (hosts.size() > 1 && p.this_host == hosts.front().name) {
    const GpuCount gpus = count_nvidia_gpus(ctx);
    p.evidence.insert(p.evidence.end(), gpus.evidence.begin(), gpus.evidence.end());
    if (gpus.count == 0) {
      hosts.erase(hosts.begin());
      p.this_host.clear();  // not one of the hosts: launches from here
    }
  }
  p.hosts = std::move(hosts);
  return p;
}

}  // namespace hvd::launcher::platform
