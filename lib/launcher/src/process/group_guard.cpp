// The process-group guard (contract in group_guard.h).
#include "hvd/launcher/process/group_guard.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace hvd::launcher {

namespace {

// $1: the group id, $2: the grace in tenths of a second. The first line on
// stdin is the environment entry that marks the job's processes (empty: none);
// EOF after it is hvdrun's death; a line "now" instead is fire(): no grace. dash's kill takes neither `--` nor
// `-s NAME` before a negative pid, so signal numbers it is. grep -f - keeps
// the entry (it may hold a secret) off every command line.
constexpr const char* kGuardScript =
    "IFS= read -r m; read x; g=$2; [ \"$x\" = now ] && g=0; "
    "pids() { [ -n \"$m\" ] || return 0; "
    "for f in $(printf '%s\\n' \"$m\" | grep -lzxF -f - /proc/[0-9]*/environ 2>/dev/null); do "
    "f=${f#/proc/}; echo \"${f%/environ}\"; done; }; "
    "kill -15 -$1 2>/dev/null; for p in $(pids); do kill -15 $p 2>/dev/null; done; "
    "i=0; while [ $i -lt $g ]; do "
    "if ! kill -0 -$1 2>/dev/null && [ -z \"$(pids)\" ]; then break; fi; "
    "sleep 0.1; i=$((i+1)); done; "
    "kill -9 -$1 2>/dev/null; for p in $(pids); do kill -9 $p 2>/dev/null; done; "
    "shift 2; [ $# -gt 0 ] || exit 0; sleep 0.1; "
    "for d in \"$@\"; do rm -rf -- \"$d\"; rmdir -- \"${d%/*}\" 2>/dev/null; done; exit 0";

}  // namespace

GroupGuard GroupGuard::start(pid_t pgid, std::chrono::milliseconds grace, const std::string& env_entry,
                             const std::vector<std::string>& remove_after) {
  HVD_ENFORCE(pgid > 1, "GroupGuard needs a process group id, not {}", pgid);
  HVD_ENFORCE(env_entry.find('\n') == std::string::npos && env_entry.find('\0') == std::string::npos,
              "GroupGuard: the environment entry must be one line");
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw IoError(fmt::format("pipe failed: {}", std::strerror(errno)));
  UniqueFd read_end(fds[0]), write_end(fds[1]);
  const long tenths = grace.count() <= 0 ? 0 : (grace.count() + 99) / 100;
  SpawnOptions so;
  so.argv = {"/bin/sh", "-c", kGuardScript, "hvdrun-group-guard", std::to_string(pgid), std::to_string(tenths)};
  for (const std::string& path : remove_after) {
    // Absolute, below the root, and no ".." component: the guard runs rm -rf.
    HVD_ENFORCE(path.size() > 1 && path.front() == '/' && path.find("/../") == std::string::npos &&
                    path.compare(path.size() - 3, 3, "/..") != 0 && path.find('\n') == std::string::npos,
                "GroupGuard: refusing to remove '{}'", path);
    so.argv.push_back(path);
  }
  so.env = std::vector<std::string>{"PATH=/usr/bin:/bin"};
  so.new_process_group = true;  // never in the group it guards, never hit by a terminal's Ctrl-C
  so.stdin_fd = ChildFd::from(read_end.get());
  so.stdout_fd = ChildFd::dev_null();
  so.stderr_fd = ChildFd::dev_null();
  GroupGuard g;
  g.proc_ = Subprocess::spawn(so);
  g.lifeline_ = std::move(write_end);
  read_end.reset();
  if (!env_entry.empty()) {
    // Never blocks: one short line into an empty pipe.
    write_all(g.lifeline_.get(), (env_entry + "\n").data(), env_entry.size() + 1);
  }
  return g;
}

GroupGuard& GroupGuard::operator=(GroupGuard&& other) noexcept {
  if (this != &other) {
    dismiss();
    proc_ = std::move(other.proc_);
    lifeline_ = std::move(other.lifeline_);
  }
  return *this;
}

void GroupGuard::fire(std::chrono::milliseconds timeout) {
  if (!active()) return;
  const char now[] = "now\n";
  try {
    write_all(lifeline_.get(), now, sizeof now - 1);
  } catch (const IoError&) {
    // The guard is gone already; reaped below.
  }
  lifeline_.reset();
  if (!proc_.reap_until(Deadline::after(timeout))) proc_.kill_group_and_reap();
}

void GroupGuard::dismiss() {
  // Dead and reaped before its lifeline closes: it never acts on the group.
  if (proc_.valid() && !proc_.reaped()) proc_.kill_group_and_reap();
  lifeline_.reset();
}

}  // namespace hvd::launcher
