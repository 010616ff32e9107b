// The leader's side of a platform job with followers (job/platform_leader.h).
#include "hvd/launcher/job/platform_leader.h"
#include "hvd/launcher/process/report.h"

#include "hvd/launcher/job/platform_follower.h"
#include "hvd/launcher/options/options.h"
#include "hvd/launcher/process/signal_guard.h"
#include "hvd/launcher/process/signals.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <mutex>
#include <thread>

namespace hvd::launcher::platform {

namespace {

std::string seconds_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000);
  return fmt::format("{:.1f}", static_cast<double>(d.count()) / 1000.0);
}

/// Collects what one host's helper process (attach or status) says.
class HelperSink final : public EventSink {
 public:
  void on_output(int, Stream stream, const char* data, std::size_t len) override {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string& text = stream == Stream::Stdout ? out_ : err_;
    if (text.size() < 4096) text.append(data, std::min<std::size_t>(len, 4096 - text.size()));
    if (stream == Stream::Stdout && out_.find("attached\n") != std::string::npos) attached_ = true;
    changed_.notify_all();
  }
  void on_exit(const WorkerExit& exit) override {
    std::lock_guard<std::mutex> lock(mutex_);
    exited_ = true;
    exit_ = exit;
    changed_.notify_all();
    if (attached_ && watch_exit_) {
      spdlog::warn("the hvdrun follower on {} went away during the job{}", host_, last_line(err_));
    }
  }
  /// Waits until attached, exited, `until` or `stop`.
  void wait(Deadline until, const std::atomic<bool>& stop) {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!attached_ && !exited_ && !until.expired() && !stop) {
      changed_.wait_for(lock, std::min<std::chrono::milliseconds>(until.remaining(), std::chrono::milliseconds(100)));
    }
  }
  bool attached() {
    std::lock_guard<std::mutex> lock(mutex_);
    return attached_;
  }
  bool exited(WorkerExit* exit, std::string* err) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (exited_) {
      *exit = exit_;
      *err = err_;
    }
    return exited_;
  }
  void set_watch(const std::string& host, bool on) {
    std::lock_guard<std::mutex> lock(mutex_);
    host_ = host;
    watch_exit_ = on;
  }
  static std::string last_line(const std::string& text) {
    std::string t = text;
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
    auto nl = t.rfind('\n');
    t = nl == std::string::npos ? t : t.substr(nl + 1);
    const std::string prefix = kErrorPrefix;
    if (t.rfind(prefix, 0) == 0) t = t.substr(prefix.size());
    return t.empty() ? "" : ": " + t;
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::string out_, err_, host_;
  bool attached_ = false, exited_ = false, watch_exit_ = false;
  WorkerExit exit_;
};

/// A launch error that says the host is not up yet (rather than refusing us).
bool not_up_yet(const std::string& message) {
  for (const char* cause :
       {"connection refused", "name does not resolve", "no route to host", "network is unreachable"}) {
    if (message.find(cause) != std::string::npos) return true;
  }
  return false;
}

WorkerSpec helper_spec(const std::string& host, const std::vector<std::string>& argv, const std::string& label) {
  WorkerSpec w;
  w.slot.hostname = host;
  w.slot.rank = 0;
  w.argv = argv;
  w.label = label;
  w.cwd = "/";
  for (const char* name : {"PATH", "HOME", "USER", "LANG"}) {
    if (const char* v = std::getenv(name)) w.env[name] = v;
  }
  return w;
}

}  // namespace

struct PlatformLeader::State {
  SpawnerFactory& spawners;
  std::vector<Follower> followers;
  std::chrono::milliseconds start_timeout;
  std::string self_exe;
  std::vector<std::unique_ptr<Spawner>> attach_spawners;  // one per follower (null: not launched)
  std::vector<std::unique_ptr<HelperSink>> attach_sinks;
  bool torn_down = false;

  void teardown() {
    if (torn_down) return;
    torn_down = true;
    for (auto& s : attach_sinks) s->set_watch("", false);
    for (auto& s : attach_spawners) {
      if (s) s->shutdown();
    }
  }
};

PlatformLeader::PlatformLeader(SpawnerFactory& spawners, std::vector<Follower> followers,
                               std::chrono::milliseconds start_timeout, std::string self_exe)
    : state_(new State{spawners, std::move(followers), start_timeout, std::move(self_exe), {}, {}, false}) {}

PlatformLeader::~PlatformLeader() { state_->teardown(); }

std::vector<std::string> PlatformLeader::remote_command(const std::string& self_exe,
                                                        const std::vector<std::string>& args) {
  // As the SSH spawner does for the agent: this binary's path, else hvdrun
  // from the host's PATH.
  std::vector<std::string> argv = {"/bin/sh", "-c", "p=\"$0\"; [ -x \"$p\" ] || p=hvdrun; exec \"$p\" \"$@\"",
                                   self_exe};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

int PlatformLeader::attach() {
  State& s = *state_;
  const auto n = s.followers.size();
  if (n == 0) return exit_code::kOk;
  std::string names;
  for (const auto& f : s.followers) names += (names.empty() ? "" : ", ") + f.host;
  spdlog::info("attaching to the follower{} on {} (up to --start-timeout {}s)", n == 1 ? "" : "s", names,
               seconds_text(s.start_timeout));
  // SIGINT & co. while attaching: give up at once. Threads created from here
  // on (the spawners' I/O threads) inherit the blocked mask, as the job's own
  // SignalGuard expects of every thread.
  SignalGuard guard;
  std::atomic<int> interrupted{0};
  std::atomic<bool> stop{false};
  std::mutex mutex;
  s.attach_spawners.resize(n);
  s.attach_sinks.clear();
  for (std::size_t i = 0; i < n; ++i) s.attach_sinks.push_back(std::make_unique<HelperSink>());
  for (std::size_t i = 0; i < n; ++i) s.attach_spawners[i] = s.spawners.make(s.followers[i].host);
  guard.watch([&](int sig) {
    std::lock_guard<std::mutex> lock(mutex);
    interrupted = sig;
    stop = true;
    for (auto& sp : s.attach_spawners) sp->cancel_launch();
  });
  const Deadline deadline = Deadline::after(s.start_timeout);
  const std::string timeout_arg = seconds_text(s.start_timeout);
  std::vector<std::string> errors(n);
  {
    // Remote hosts connect in parallel; a local one (which ties its agent to
    // the launching thread) on this thread.
    std::vector<std::future<void>> pending;
    auto launch = [&](std::size_t i) {
      const auto& f = s.followers[i];
      bool said = false;
      for (;;) {
        try {
          Spawner* spawner;
          {
            std::lock_guard<std::mutex> lock(mutex);
            spawner = s.attach_spawners[i].get();
          }
          spawner->launch({helper_spec(f.host, remote_command(s.self_exe, {"--follower-attach", f.key, timeout_arg}),
                                       "follower-attach on " + f.host)},
                          *s.attach_sinks[i], deadline);
          return;
        } catch (const LaunchError& e) {
          // The follower's machine may still be starting (its name not yet
          // in DNS, its sshd not yet up): try again until the start timeout.
          if (!not_up_yet(e.what()) || stop || deadline.remaining() < std::chrono::seconds(1)) {
            errors[i] = e.what();
            return;
          }
          if (!said) spdlog::info("{}; trying again until --start-timeout", e.what());
          said = true;
        } catch (const std::exception& e) {
          errors[i] = fmt::format("{}: {}", f.host, e.what());
          return;
        }
        for (int k = 0; k < 10 && !stop; ++k) std::this_thread::sleep_for(std::chrono::milliseconds(100));
        std::lock_guard<std::mutex> lock(mutex);
        if (stop) continue;  // the next launch throws "cancelled" at once
        s.attach_spawners[i] = s.spawners.make(f.host);
      }
    };
    std::vector<std::size_t> local;
    for (std::size_t i = 0; i < n; ++i) {
      if (s.spawners.is_local(s.followers[i].host)) {
        local.push_back(i);
      } else {
        pending.push_back(std::async(std::launch::async, launch, i));
      }
    }
    for (auto i : local) launch(i);
    for (auto& p : pending) p.get();
  }
  // The attach processes give up at the same deadline and say why (e.g.
  // followers of another key listen there): a moment more for that to arrive.
  const Deadline answers = Deadline::after(deadline.remaining() + std::chrono::seconds(2));
  for (std::size_t i = 0; i < n && !stop; ++i) {
    if (errors[i].empty()) s.attach_sinks[i]->wait(answers, stop);
  }
  guard.stop_watching();
  if (interrupted) {
    std::fprintf(stderr, "hvdrun: interrupted by %s while attaching to the followers\n",
                 signal_name(interrupted).c_str());
    s.teardown();
    return 128 + interrupted;
  }
  int code = exit_code::kOk;
  for (std::size_t i = 0; i < n; ++i) {
    const auto& f = s.followers[i];
    std::string error = errors[i];
    if (error.empty() && !s.attach_sinks[i]->attached()) {
      WorkerExit ex;
      std::string err;
      if (s.attach_sinks[i]->exited(&ex, &err)) {
        std::string why = ex.lost_reason.empty() ? HelperSink::last_line(err) : ": " + ex.lost_reason;
        if (why.empty()) why = fmt::format(": hvdrun --follower-attach exited {}", ex.status);
        error = fmt::format(
            "{}{} (run the same hvdrun command line on every machine of the job; "
            "docs/platforms.md#followers)",
            f.host, why);
      } else {
        error = fmt::format(
            "{}: no hvdrun follower attached within --start-timeout {}s (run the same hvdrun "
            "command line on every machine of the job; docs/platforms.md#followers)",
            f.host, timeout_arg);
      }
    }
    if (!error.empty()) {
      if (code == exit_code::kOk) report_error(error);
      code = exit_code::kLaunch;
    }
  }
  if (code != exit_code::kOk) {
    s.teardown();
    return code;
  }
  for (std::size_t i = 0; i < n; ++i) s.attach_sinks[i]->set_watch(s.followers[i].host, true);
  spdlog::info("attached to the follower{} on {}", n == 1 ? "" : "s", names);
  return exit_code::kOk;
}

void PlatformLeader::report(int status, std::chrono::milliseconds budget) {
  State& s = *state_;
  if (s.torn_down || s.followers.empty()) return s.teardown();
  for (auto& sink : s.attach_sinks) sink->set_watch("", false);  // followers exit once told: expected
  const auto n = s.followers.size();
  const Deadline deadline = Deadline::after(budget);
  const std::string timeout_arg = seconds_text(
      std::max<std::chrono::milliseconds>(std::chrono::milliseconds(500), budget - std::chrono::milliseconds(1000)));
  std::vector<std::unique_ptr<Spawner>> spawners(n);
  std::vector<std::unique_ptr<HelperSink>> sinks;
  for (std::size_t i = 0; i < n; ++i) sinks.push_back(std::make_unique<HelperSink>());
  std::vector<std::string> errors(n);
  {
    std::vector<std::future<void>> pending;
    auto launch = [&](std::size_t i) {
      const auto& f = s.followers[i];
      try {
        spawners[i] = s.spawners.make(f.host);
        spawners[i]->launch(
            {helper_spec(f.host,
                         remote_command(s.self_exe, {"--follower-status", f.key, std::to_string(status), timeout_arg}),
                         "follower-status on " + f.host)},
            *sinks[i], deadline);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    };
    std::vector<std::size_t> local;
    for (std::size_t i = 0; i < n; ++i) {
      WorkerExit ex;
      std::string err;
      if (i < s.attach_sinks.size() && s.attach_sinks[i]->exited(&ex, &err)) {
        errors[i] = "its follower went away during the job";  // warned then: nobody to tell
      } else if (s.spawners.is_local(s.followers[i].host)) {
        local.push_back(i);
      } else {
        pending.push_back(std::async(std::launch::async, launch, i));
      }
    }
    for (auto i : local) launch(i);
    for (auto& p : pending) p.get();
  }
  std::atomic<bool> never{false};
  for (std::size_t i = 0; i < n; ++i) {
    const auto& f = s.followers[i];
    if (errors[i].empty() && spawners[i]) {
      // Exits (or the deadline) end the wait: wait() returns on either.
      WorkerExit ex;
      std::string err;
      while (!sinks[i]->exited(&ex, &err) && !deadline.expired()) sinks[i]->wait(deadline, never);
      if (!sinks[i]->exited(&ex, &err)) {
        errors[i] = "no answer in time";
      } else if (ex.status != 0) {
        errors[i] =
            ex.lost_reason.empty() ? fmt::format("exit {}{}", ex.status, HelperSink::last_line(err)) : ex.lost_reason;
      }
    }
    if (!errors[i].empty()) {
      spdlog::warn("could not report the job's status {} to the follower on {}: {}", status, f.host, errors[i]);
    }
  }
  for (auto& sp : spawners) {
    if (sp) sp->shutdown();
  }
  s.teardown();
}

std::vector<PlatformLeader::Follower> follower_hosts(const PlatformDescription& p, const Environment& ctx,
                                                     std::string* why) {
  std::vector<PlatformLeader::Follower> out;
  if (p.this_host.empty() || p.this_host != p.leader) return out;  // a launcher outside the hosts: nobody follows
  if (p.hosts.size() < 2) return out;
  if (!followers_expected(p, ctx, why)) return out;
  for (const auto& h : p.hosts) {
    if (h.name == p.leader) continue;
    out.push_back({h.name, follower_key(p, ctx, h.name)});
  }
  return out;
}

}  // namespace hvd::launcher::platform
