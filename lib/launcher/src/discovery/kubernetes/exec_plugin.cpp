// kubeconfig exec credential plugins (exec_plugin.h).
#include "hvd/launcher/discovery/kubernetes/exec_plugin.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "hvd/common/io.h"
#include "hvd/launcher/process/subprocess.h"

extern char** environ;

namespace hvd::launcher::kube {

namespace {

std::string last_line(const std::string& text) {
  size_t end = text.find_last_not_of(" \t\r\n");
  if (end == std::string::npos) return "";
  size_t start = text.rfind('\n', end);
  start = start == std::string::npos ? 0 : start + 1;
  return text.substr(start, end - start + 1).substr(0, 300);
}

std::runtime_error failure(const ExecPlugin& p, const std::string& what) {
  return std::runtime_error(
      fmt::format("exec credential plugin '{}' of kubeconfig user '{}' {}", p.command, p.user, what));
}

}  // namespace

std::optional<std::chrono::system_clock::time_point> parse_rfc3339(const std::string& text) {
  std::tm tm{};
  int consumed = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
                  &tm.tm_min, &tm.tm_sec, &consumed) != 6) {
    return std::nullopt;
  }
  size_t at = static_cast<size_t>(consumed);
  if (at < text.size() && text[at] == '.') {
    ++at;
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') ++at;
  }
  long offset = 0;
  if (at < text.size() && (text[at] == 'Z' || text[at] == 'z')) {
    ++at;
  } else if (at < text.size() && (text[at] == '+' || text[at] == '-')) {
    int h = 0, m = 0;
    if (std::sscanf(text.c_str() + at + 1, "%2d:%2d", &h, &m) != 2) return std::nullopt;
    offset = (text[at] == '+' ? 1 : -1) * (h * 3600L + m * 60L);
    at += 6;
  } else {
    return std::nullopt;
  }
  if (at != text.size()) return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  const time_t t = timegm(&tm);
  if (t == static_cast<time_t>(-1)) return std::nullopt;
  return std::chrono::system_clock::from_time_t(t - offset);
}

ExecCredential parse_exec_credential(const std::string& output, const ExecPlugin& plugin) {
  const auto j = nlohmann::json::parse(output, nullptr, false);
  if (!j.is_object() || j.value("kind", "") != "ExecCredential") {
    throw failure(plugin, "did not print an ExecCredential: '" + last_line(output) + "'");
  }
  const nlohmann::json status = j.contains("status") ? j["status"] : nlohmann::json();
  ExecCredential c;
  if (status.is_object() && status.contains("token") && status["token"].is_string()) {
    c.token = status["token"].get<std::string>();
  }
  if (c.token.empty()) {
    if (status.is_object() && status.contains("clientCertificateData")) {
      throw failure(plugin, "returned a client certificate; hvdrun only takes tokens from exec plugins");
    }
    throw failure(plugin, "returned no status.token");
  }
  if (status.contains("expirationTimestamp") && status["expirationTimestamp"].is_string()) {
    const std::string when = status["expirationTimestamp"].get<std::string>();
    c.expires = parse_rfc3339(when);
    if (!c.expires) throw failure(plugin, "returned a malformed expirationTimestamp '" + when + "'");
  }
  return c;
}

ExecCredential run_exec_plugin(const ExecPlugin& plugin, std::chrono::milliseconds timeout) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) throw failure(plugin, std::string("could not run: ") + std::strerror(errno));
  UniqueFd out_r(out_pipe[0]), out_w(out_pipe[1]);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) throw failure(plugin, std::string("could not run: ") + std::strerror(errno));
  UniqueFd err_r(err_pipe[0]), err_w(err_pipe[1]);

  SpawnOptions so;
  so.argv = {plugin.command};
  so.argv.insert(so.argv.end(), plugin.args.begin(), plugin.args.end());
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string entry = *e;
    const std::string name = entry.substr(0, entry.find('='));
    bool replaced = name == "KUBERNETES_EXEC_INFO";
    for (const auto& [n, v] : plugin.env) replaced = replaced || n == name;
    if (!replaced) env.push_back(entry);
  }
  for (const auto& [n, v] : plugin.env) env.push_back(n + "=" + v);
  const nlohmann::json info = {
      {"apiVersion", plugin.api_version}, {"kind", "ExecCredential"}, {"spec", {{"interactive", false}}}};
  env.push_back("KUBERNETES_EXEC_INFO=" + info.dump());
  so.env = env;
  so.stdin_fd = ChildFd::dev_null();
  so.stdout_fd = ChildFd::from(out_w.get());
  so.stderr_fd = ChildFd::from(err_w.get());
  Subprocess child;
  try {
    child = Subprocess::spawn(so);
  } catch (const SpawnError& e) {
    throw failure(plugin, e.error_number() == ENOENT ? std::string("was not found (is it installed and in PATH?)")
                                                     : std::string("could not run: ") + e.what());
  }
  out_w.reset();
  err_w.reset();

  const Deadline deadline = Deadline::after(timeout);
  std::string out, err;
  bool out_open = true, err_open = true;
  while (out_open || err_open) {
    pollfd fds[2] = {{out_r.get(), POLLIN, 0}, {err_r.get(), POLLIN, 0}};
    if (!out_open) fds[0].fd = -1;
    if (!err_open) fds[1].fd = -1;
    const int n = ::poll(fds, 2, deadline.poll_timeout_ms());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // timeout
    char buf[8192];
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t r = ::read(fds[i].fd, buf, sizeof buf);
      if (r <= 0) {
        (i == 0 ? out_open : err_open) = false;
      } else {
        (i == 0 ? out : err).append(buf, static_cast<size_t>(r));
        if (out.size() + err.size() > (4u << 20)) {
          child.kill_group_and_reap();
          throw failure(plugin, "printed more than 4 MiB");
        }
      }
    }
  }
  const auto status = (out_open || err_open) ? std::nullopt : child.reap_until(deadline);
  if (!status) {
    child.kill_group_and_reap();
    throw failure(plugin, fmt::format("did not finish within {} s and was killed", timeout.count() / 1000.0));
  }
  const int code = exit_status_of(*status);
  if (code != 0) {
    const std::string why = last_line(err);
    throw failure(plugin, fmt::format("exited with code {}{}", code, why.empty() ? "" : ": " + why));
  }
  return parse_exec_credential(out, plugin);
}

}  // namespace hvd::launcher::kube
