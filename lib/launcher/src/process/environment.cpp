// The machine as the launcher reads it (process/environment.h).
#include "hvd/launcher/process/environment.h"

#include <limits.h>
#include <unistd.h>

extern char** environ;

namespace hvd::launcher {

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string entry(*e);
    size_t eq = entry.find('=');
    if (eq == std::string::npos || eq == 0) continue;
    env.emplace(entry.substr(0, eq), entry.substr(eq + 1));
  }
  return env;
}

Environment Environment::current() { return Environment{"", current_environment(), std::nullopt}; }

std::string Environment::host_name() const {
  if (hostname) return *hostname;
  if (auto named = get("HVDRUN_HOSTNAME"); named && !named->empty()) return *named;
  char buf[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "";
  return buf;
}

std::optional<std::string> Environment::get(const std::string& name) const {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

std::string Environment::path(const std::string& absolute) const { return root + absolute; }

}  // namespace hvd::launcher
