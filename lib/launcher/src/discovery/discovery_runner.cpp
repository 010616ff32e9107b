// Runs --host-discovery-script once, bounded in time and output.
//
// The script runs as `/bin/sh -c SCRIPT` in a new process group with stdin
// from /dev/null and stdout/stderr on pipes. We read both pipes with poll()
// until the shell exits and the pipes reach EOF, or until the deadline. The
// process group is always SIGKILLed before the shell is reaped: background
// children a script forgot (or a hung `curl`) must never pile up, and while
// the shell is an unreaped zombie its pid -- the group id -- cannot be
// reused, so the kill can never hit an unrelated group. A grandchild that
// keeps the pipes open after the shell exited is given a short drain period,
// then killed with the rest; a run therefore ends within timeout + ~drain.
//
// Should hvdrun die during a run (kill -9 included), a GroupGuard kills the
// script's group: nothing of a hung script outlives hvdrun (issue 21). A
// readable `cancel_fd` (hvdrun is stopping: Ctrl-C) ends a run at once.
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <string>
#include <vector>

#include "hvd/common/io.h"
#include "hvd/launcher/discovery/discovery.h"
#include "hvd/launcher/discovery/host_source.h"
#include "hvd/launcher/process/group_guard.h"
#include "hvd/launcher/process/signals.h"
#include "hvd/launcher/process/subprocess.h"

namespace hvd::launcher {
namespace {

using Clock = std::chrono::steady_clock;

/// After the shell exited, how long we keep reading pipes that a leftover
/// child still holds open before giving up on them.
constexpr std::chrono::milliseconds kDrainAfterExit{200};
/// Only the tail of stderr matters (its last non-empty line).
constexpr std::size_t kStderrKeep = 64 * 1024;
constexpr std::size_t kReadChunk = 64 * 1024;

/// The script as shown in messages: one line, bounded.
std::string shown_script(const std::string& script) {
  std::string s;
  for (char c : script) s += (c == '\n' || c == '\r' || c == '\t') ? ' ' : c;
  if (s.size() > 200) s = s.substr(0, 197) + "...";
  return s;
}

/// The last non-empty line of `text`, control characters dropped, bounded.
std::string last_line(const std::string& text) {
  std::size_t end = text.size();
  for (;;) {
    while (end > 0 &&
           (text[end - 1] == '\n' || text[end - 1] == '\r' || text[end - 1] == ' ' || text[end - 1] == '\t')) {
      --end;
    }
    if (end == 0) return "";
    std::size_t begin = text.rfind('\n', end - 1);
    begin = begin == std::string::npos ? 0 : begin + 1;
    std::string line;
    for (std::size_t i = begin; i < end; ++i) {
      unsigned char c = static_cast<unsigned char>(text[i]);
      if (c >= 0x20 && c != 0x7f) line += static_cast<char>(c);
    }
    std::size_t b = line.find_first_not_of(' ');
    if (b != std::string::npos) {
      line = line.substr(b);
      if (line.size() > 300) line = line.substr(0, 297) + "...";
      return line;
    }
    end = begin;
  }
}

std::string byte_size(std::size_t n) {
  if (n >= (1u << 20) && n % (1u << 20) == 0) return fmt::format("{} MiB", n >> 20);
  if (n >= 1024 && n % 1024 == 0) return fmt::format("{} KiB", n >> 10);
  return fmt::format("{} bytes", n);
}

std::string seconds_text(std::chrono::milliseconds ms) { return fmt::format("{:g} s", ms.count() / 1000.0); }

DiscoveryResult failure(std::string message) {
  DiscoveryResult r;
  r.error = std::move(message);
  return r;
}

/// A single word the shell would not reinterpret (a path to a script).
bool is_plain_word(const std::string& s) {
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && std::string("/._-+,:@%").find(c) == std::string::npos) {
      return false;
    }
  }
  return !s.empty();
}

bool is_readable(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLIN | POLLHUP | POLLERR));
}

}  // namespace

DiscoveryResult run_discovery_script(const DiscoveryScriptOptions& options) {
  const std::string name = fmt::format("host discovery script '{}'", shown_script(options.script));
  if (options.script.empty()) return failure("host discovery script: empty command");
  if (options.script.find('\0') != std::string::npos) return failure(name + ": contains a NUL byte");
  const std::string cancelled_message = name + " was stopped: hvdrun is shutting down";
  if (is_readable(options.cancel_fd)) return failure(cancelled_message);

  // A plain path is exec'd by the shell, so that the script itself leads the
  // group and its signal death shows as such (not as the shell's 128+N).
  SpawnOptions spawn;
  spawn.argv = {"/bin/sh", "-c", is_plain_word(options.script) ? "exec " + options.script : options.script};
  spawn.stdin_fd = ChildFd::dev_null();

  auto os_failure = [&](const char* what) {
    return failure(fmt::format("{}: cannot run it: {} failed: {}", name, what, std::strerror(errno)));
  };
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return os_failure("pipe");
  UniqueFd out_read(out[0]), out_write(out[1]);
  if (::pipe2(err, O_CLOEXEC) != 0) return os_failure("pipe");
  UniqueFd err_read(err[0]), err_write(err[1]);
  spawn.stdout_fd = ChildFd::from(out_write.get());
  spawn.stderr_fd = ChildFd::from(err_write.get());

  const auto started = Clock::now();
  const auto deadline = started + options.timeout;
  // hvdrun's own sockets and pipes that lack CLOEXEC do not leak into the
  // script (Subprocess closes them): a script holding a worker's pipe would
  // delay EOFs.
  Subprocess shell;
  try {
    shell = Subprocess::spawn(spawn);
  } catch (const std::exception& e) {
    return failure(fmt::format("{}: cannot run it: {}", name, e.what()));
  }
  out_write.reset();
  err_write.reset();
  // Declared after `shell`, so destroyed (dismissed) before it on every path.
  GroupGuard guard;
  try {
    guard = GroupGuard::start(shell.pid(), std::chrono::milliseconds(0));
  } catch (const std::exception& e) {
    shell.kill_group_and_reap();
    return failure(fmt::format("{}: cannot run it: cannot start its process-group guard: {}", name, e.what()));
  }

  std::string stdout_text, stderr_text;
  bool out_open = true, err_open = true, exited = false, too_much = false, timed_out = false, cancelled = false;
  Clock::time_point drain_until{};
  std::vector<char> buf(kReadChunk);

  for (;;) {
    if (!exited && shell.exited()) {
      exited = true;
      drain_until = std::min(deadline, Clock::now() + kDrainAfterExit);
    }
    if (exited && !out_open && !err_open) break;
    const auto now = Clock::now();
    if (exited && now >= drain_until) break;  // a leftover child holds the pipes
    if (!exited && now >= deadline) {
      timed_out = true;
      break;
    }
    const auto until = exited ? drain_until : deadline;
    auto wait_ms = std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1;
    // Without a pidfd, the shell's exit is noticed by polling every 10 ms.
    if (shell.pidfd() < 0 && !exited) wait_ms = std::min<long long>(wait_ms, 10);

    pollfd fds[4];
    int n = 0;
    int out_i = -1, err_i = -1, cancel_i = -1;
    if (options.cancel_fd >= 0) {
      cancel_i = n;
      fds[n++] = {options.cancel_fd, POLLIN, 0};
    }
    if (out_open) {
      out_i = n;
      fds[n++] = {out_read.get(), POLLIN, 0};
    }
    if (err_open) {
      err_i = n;
      fds[n++] = {err_read.get(), POLLIN, 0};
    }
    if (shell.pidfd() >= 0 && !exited) fds[n++] = {shell.pidfd(), POLLIN, 0};
    int rc = ::poll(fds, static_cast<nfds_t>(n), static_cast<int>(wait_ms));
    if (rc < 0 && errno != EINTR) {
      const int e = errno;
      guard.dismiss();
      shell.kill_group_and_reap();
      errno = e;
      return os_failure("poll");
    }
    if (rc <= 0) continue;
    if (cancel_i >= 0 && fds[cancel_i].revents != 0) {
      cancelled = true;
      break;
    }

    auto drain = [&](int index, UniqueFd& fd, bool& open, std::string& into, bool is_stdout) {
      if (index < 0 || !(fds[index].revents & (POLLIN | POLLHUP | POLLERR))) return;
      ssize_t got = ::read(fd.get(), buf.data(), buf.size());
      if (got < 0 && (errno == EINTR || errno == EAGAIN)) return;
      if (got <= 0) {
        open = false;
        return;
      }
      into.append(buf.data(), static_cast<std::size_t>(got));
      if (is_stdout && into.size() > options.max_output_bytes) {
        too_much = true;
      } else if (!is_stdout && into.size() > 2 * kStderrKeep) {
        into.erase(0, into.size() - kStderrKeep);
      }
    };
    drain(out_i, out_read, out_open, stdout_text, true);
    drain(err_i, err_read, err_open, stderr_text, false);
    if (too_much) break;
  }

  guard.dismiss();  // before the leader is reaped: its group id stays reserved until then
  const int status = shell.kill_group_and_reap();
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started);
  spdlog::debug("{} finished in {} ms", name, took.count());

  if (cancelled) return failure(cancelled_message);
  if (timed_out) {
    return failure(fmt::format("{} timed out after {} and was killed", name, seconds_text(options.timeout)));
  }
  if (too_much) {
    return failure(
        fmt::format("{} printed more than {} (a host list is expected)", name, byte_size(options.max_output_bytes)));
  }
  const std::string err_line = last_line(stderr_text);
  const std::string err_suffix = err_line.empty() ? std::string(" (no stderr output)") : ": " + err_line;
  if (signal_of(status) != 0) {
    return failure(fmt::format("{} was killed by {}{}", name, signal_name(signal_of(status)),
                               err_line.empty() ? std::string() : ": " + err_line));
  }
  const int code = exit_status_of(status);
  if (code != 0) return failure(fmt::format("{} exited with code {}{}", name, code, err_suffix));

  DiscoveryResult parsed = parse_discovery_output(stdout_text, options.default_slots);
  if (!parsed.ok()) parsed.error = name + ": " + *parsed.error;
  return parsed;
}

ScriptHostSource::ScriptHostSource(DiscoveryScriptOptions options) : options_(std::move(options)) {
  cancel_ = UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!cancel_) throw IoError(fmt::format("eventfd failed: {}", std::strerror(errno)));
  options_.cancel_fd = cancel_.get();
}

void ScriptHostSource::cancel() {
  // Stays readable for good: the run in progress and every later one end at once.
  const uint64_t one = 1;
  ssize_t n = ::write(cancel_.get(), &one, sizeof one);
  (void)n;
}

}  // namespace hvd::launcher
