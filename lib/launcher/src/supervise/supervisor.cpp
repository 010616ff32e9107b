#include "hvd/launcher/supervise/supervisor.h"
#include "hvd/launcher/process/report.h"

#include "hvd/launcher/supervise/event_log.h"

#include "hvd/launcher/options/options.h"
#include "hvd/launcher/process/signals.h"
#include "hvd/launcher/process/status.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

namespace hvd::launcher {

namespace {

using std::chrono::duration_cast;
using std::chrono::milliseconds;

long long ms_since(Clock::time_point t) { return duration_cast<milliseconds>(Clock::now() - t).count(); }

}  // namespace

Supervisor::Supervisor(SupervisorOptions options, OutputRouter* output) : options_(options), output_(output) {}

void Supervisor::interrupt(int sig) {
  std::lock_guard<std::mutex> lock(mutex_);
  Event ev;
  ev.sig = sig;
  events_.push_back(ev);
  cv_.notify_all();
  if (!launching_.empty() && signal_during_launch_ == 0) {
    signal_during_launch_ = sig;
    for (Spawner* s : launching_) s->cancel_launch();
  }
}

void Supervisor::on_output(int rank, Stream stream, const char* data, std::size_t len) {
  if (output_) output_->write(rank, stream, data, len);
}

void Supervisor::on_exit(const WorkerExit& exit) {
  // The rank's last partial line goes out before anyone reports its death.
  if (output_) output_->finish(exit.rank);
  std::lock_guard<std::mutex> lock(mutex_);
  Event ev;
  ev.is_exit = true;
  ev.exit = exit;
  events_.push_back(ev);
  cv_.notify_all();
}

void Supervisor::launch_all(std::vector<HostLaunch>& hosts, std::vector<std::string>& errors) {
  const Deadline deadline = Deadline::after(options_.start_timeout);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& h : hosts) launching_.push_back(h.spawner.get());
    for (const Event& ev : events_) {  // a signal that came before run()
      if (!ev.is_exit && signal_during_launch_ == 0) signal_during_launch_ = ev.sig;
    }
    if (signal_during_launch_ != 0) {
      for (Spawner* s : launching_) s->cancel_launch();
    }
  }
  std::mutex errors_mutex;
  auto launch_one = [&](HostLaunch& h) {
    if (h.workers.empty()) return;
    auto t0 = Clock::now();
    try {
      h.spawner->launch(h.workers, *this, deadline);
      if (h.stands_for.empty()) {
        spdlog::info("started {} worker{} on {} in {} ms", h.workers.size(), h.workers.size() == 1 ? "" : "s", h.host,
                     ms_since(t0));
      } else {
        spdlog::info("started {} in {} ms", h.stands_for, ms_since(t0));
      }
      if (options_.events) {
        std::vector<int> ranks;
        for (const auto& w : h.workers) ranks.push_back(w.slot.rank);
        options_.events->emit("workers_started", {{"host", h.host}, {"ranks", ranks}, {"ms", ms_since(t0)}});
      }
    } catch (const LaunchError& e) {
      std::string msg = e.what();
      if (msg.rfind(e.host() + ":", 0) != 0) msg = e.host() + ": " + msg;
      if (options_.events) options_.events->emit("launch_failed", {{"host", h.host}, {"reason", msg}});
      std::lock_guard<std::mutex> lock(errors_mutex);
      errors.push_back(msg);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(errors_mutex);
      errors.push_back(h.host + ": " + e.what());
    }
  };
  std::vector<std::thread> threads;
  for (auto& h : hosts) {
    if (!h.launch_on_caller_thread) threads.emplace_back([&launch_one, &h] { launch_one(h); });
  }
  for (auto& h : hosts) {
    if (h.launch_on_caller_thread) launch_one(h);
  }
  for (auto& t : threads) t.join();
  std::lock_guard<std::mutex> lock(mutex_);
  launching_.clear();
}

void Supervisor::shutdown_all(std::vector<HostLaunch>& hosts) {
  // In parallel: each shutdown is bounded, and one slow host must not
  // delay the others' teardown.
  std::vector<std::thread> threads;
  for (auto& h : hosts) {
    threads.emplace_back([&h] {
      try {
        h.spawner->shutdown();
      } catch (const std::exception& e) {
        spdlog::error("{}: shutdown failed: {}", h.host, e.what());
      }
    });
  }
  for (auto& t : threads) t.join();
}

void Supervisor::report_failure(const WorkerExit& e, const std::string& who) {
  if (!e.lost_reason.empty()) {
    spdlog::error("{}: lost: {}", who, e.lost_reason);
  } else {
    spdlog::error("{}: {}", who, describe_status(e.status, e.signal));
  }
  if (!output_) return;
  std::vector<std::string> tail = output_->stderr_tail(e.rank);
  if (tail.empty()) return;
  spdlog::error("last {} line{} of rank {}'s stderr:", tail.size(), tail.size() == 1 ? "" : "s", e.rank);
  for (const auto& line : tail) spdlog::error("  [{}] {}", e.rank, line);
}

int Supervisor::run(std::vector<HostLaunch> hosts) {
  const auto t_start = Clock::now();
  struct RankInfo {
    Spawner* spawner;
    std::string host;
    std::string who;  ///< "rank N on HOST", or the worker's label
    bool alive = true;
  };
  std::map<int, RankInfo> ranks;
  for (auto& h : hosts) {
    for (const auto& w : h.workers) {
      ranks[w.slot.rank] = RankInfo{
          h.spawner.get(), h.host, w.label.empty() ? fmt::format("rank {} on {}", w.slot.rank, h.host) : w.label, true};
    }
  }

  std::vector<std::string> launch_errors;
  launch_all(hosts, launch_errors);
  if (!launch_errors.empty() && signal_during_launch_ != 0) {
    // The launch was cancelled by the signal: not a launch failure.
    spdlog::warn("received {} while starting workers; stopping", signal_name(signal_during_launch_));
    if (options_.events) options_.events->emit("signal", {{"signal", signal_during_launch_}});
    shutdown_all(hosts);
    return 128 + signal_during_launch_;
  }
  if (!launch_errors.empty()) {
    for (const auto& msg : launch_errors) report_error(msg);
    std::fflush(stderr);
    spdlog::info("launch failed; stopping the workers that did start");
    shutdown_all(hosts);
    return exit_code::kLaunch;
  }

  std::size_t alive = ranks.size();
  bool failed = false;
  WorkerExit failure;
  int interrupted = 0;
  Clock::time_point kill_at = Clock::time_point::max();
  Clock::time_point give_up_at = Clock::time_point::max();

  auto signal_alive = [&](int sig) {
    for (auto& [rank, info] : ranks) {
      if (info.alive) info.spawner->signal(rank, sig);
    }
  };
  auto escalate = [&](const char* why) {
    spdlog::warn("{}: sending SIGKILL to {} worker{}", why, alive, alive == 1 ? "" : "s");
    signal_alive(SIGKILL);
    kill_at = Clock::time_point::max();
    give_up_at = Clock::now() + options_.kill_wait;
  };

  while (alive > 0) {
    std::deque<Event> batch;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      Clock::time_point wake = std::min(kill_at, give_up_at);
      if (events_.empty()) {
        if (wake == Clock::time_point::max())
          cv_.wait(lock, [&] { return !events_.empty(); });
        else
          cv_.wait_until(lock, wake, [&] { return !events_.empty(); });
      }
      batch.swap(events_);
    }
    for (const Event& ev : batch) {
      if (ev.is_exit) {
        const WorkerExit& e = ev.exit;
        auto it = ranks.find(e.rank);
        if (it == ranks.end() || !it->second.alive) {
          spdlog::debug("ignoring a second exit report for rank {}", e.rank);
          continue;
        }
        it->second.alive = false;
        --alive;
        bool bad = !e.lost_reason.empty() || e.status != 0 || e.signal != 0;
        if (options_.events) {
          options_.events->emit(
              "worker_exit",
              {{"rank", e.rank},
               {"host", it->second.host},
               {"status", e.lost_reason.empty() ? (e.signal ? 128 + e.signal : e.status) : -1},
               {"description", e.lost_reason.empty() ? describe_status(e.status, e.signal) : "lost: " + e.lost_reason},
               {"lost", !e.lost_reason.empty()}});
        }
        if (bad && !failed && interrupted == 0) {
          failed = true;
          failure = e;
          report_failure(e, it->second.who);
          if (alive > 0) {
            spdlog::warn("terminating {} other worker{} (SIGTERM, then SIGKILL after {} ms)", alive,
                         alive == 1 ? "" : "s", options_.kill_grace.count());
            signal_alive(SIGTERM);
            kill_at = Clock::now() + options_.kill_grace;
          }
        } else if (!e.lost_reason.empty()) {
          spdlog::info("{}: lost: {}", it->second.who, e.lost_reason);
        } else if (bad) {
          spdlog::info("{}: {}", it->second.who, describe_status(e.status, e.signal));
        } else {
          spdlog::debug("{} exited successfully", it->second.who);
        }
      } else if (interrupted == 0 && !failed) {
        interrupted = ev.sig;
        if (options_.events) options_.events->emit("signal", {{"signal", ev.sig}});
        spdlog::warn("received {}; forwarding it to {} worker{}", signal_name(ev.sig), alive, alive == 1 ? "" : "s");
        signal_alive(ev.sig);
        kill_at = Clock::now() + options_.kill_grace;
      } else if (alive > 0) {
        if (interrupted == 0) interrupted = ev.sig;  // remember it; the failure's status still wins
        escalate(fmt::format("received {} again", signal_name(ev.sig)).c_str());
      }
    }
    if (alive == 0) break;
    auto now = Clock::now();
    if (now >= kill_at) {
      escalate(fmt::format("{} ms grace period over", options_.kill_grace.count()).c_str());
    } else if (now >= give_up_at) {
      spdlog::error("{} worker{} did not report an exit after SIGKILL; shutting their hosts down", alive,
                    alive == 1 ? "" : "s");
      break;
    }
  }

  shutdown_all(hosts);

  if (failed) {
    if (!failure.lost_reason.empty()) return exit_code::kLaunch;
    if (failure.status != 0) return failure.status;
    return 128 + failure.signal;
  }
  if (interrupted != 0) {
    spdlog::info("all workers stopped after {}", signal_name(interrupted));
    return 128 + interrupted;
  }
  if (hosts.size() == 1 && !hosts.front().stands_for.empty()) {
    spdlog::info("{} exited successfully ({} ms)", hosts.front().stands_for, ms_since(t_start));
  } else {
    spdlog::info("all {} worker{} exited successfully ({} ms)", ranks.size(), ranks.size() == 1 ? "" : "s",
                 ms_since(t_start));
  }
  return exit_code::kOk;
}

}  // namespace hvd::launcher
