#include "hvd/launcher/spawn/agent_client.h"

#include "hvd/launcher/process/signals.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace hvd::launcher {

std::string agent_launch_frames(const std::string& host, const std::vector<WorkerSpec>& workers,
                                std::chrono::milliseconds kill_grace) {
  std::string frames =
      encode_agent_message(agent_msg::Hello{kAgentProtocolVersion, static_cast<std::uint32_t>(kill_grace.count())});
  for (const WorkerSpec& w : workers) {
    agent_msg::Spawn s;
    s.id = static_cast<std::uint32_t>(w.slot.rank);
    s.argv = w.argv;
    s.env.reserve(w.env.size());
    for (const auto& [name, value] : w.env) s.env.push_back(name + "=" + value);
    s.cwd = w.cwd;
    try {
      frames += encode_agent_message(s);
    } catch (const AgentProtocolError& e) {
      throw LaunchError(host, fmt::format("{}: rank {}: {}", host, w.slot.rank, e.what()));
    }
  }
  frames += encode_agent_message(agent_msg::Done{});
  return frames;
}

std::string agent_signal_frame(int rank, int sig) {
  if (!agent_can_signal(sig)) return {};
  return encode_agent_message(agent_msg::Signal{static_cast<std::uint32_t>(rank), sig});
}

AgentClient::AgentClient(std::string where, EventSink& sink, const std::vector<WorkerSpec>& workers)
    : where_(std::move(where)), sink_(sink) {
  for (const WorkerSpec& w : workers) {
    if (reported_.emplace(w.slot.rank, false).second) ++unreported_;
  }
}

bool AgentClient::reported(int rank) const {
  auto it = reported_.find(rank);
  return it == reported_.end() || it->second;
}

bool AgentClient::on_bytes(const char* data, std::size_t len) {
  if (!error_.empty()) return false;
  reader_.feed(data, len);
  try {
    while (auto m = reader_.next()) {
      if (auto* h = std::get_if<agent_msg::Hello>(&*m)) {
        if (h->version != kAgentProtocolVersion) {
          error_ = fmt::format("the agent speaks protocol version {}, this hvdrun version {}: install the same "
                               "hvdrun (and hvdrun-agent) on every host",
                               h->version, kAgentProtocolVersion);
          return false;
        }
        hello_ = true;
        spdlog::debug("{}: agent {} started", where_, h->value);
        continue;
      }
      if (!hello_) {
        error_ = fmt::format("the agent's first frame is {}, not Hello", agent_message_name(*m));
        return false;
      }
      if (auto* o = std::get_if<agent_msg::Output>(&*m)) {
        const int rank = static_cast<int>(o->id);
        if (reported(rank)) {
          error_ = fmt::format("the agent sent output for rank {}, which {}", rank,
                               reported_.count(rank) ? "has exited" : "it was not given");
          return false;
        }
        sink_.on_output(rank, o->stream == 1 ? Stream::Stdout : Stream::Stderr, o->data.data(), o->data.size());
      } else if (auto* x = std::get_if<agent_msg::Exit>(&*m)) {
        const int rank = static_cast<int>(x->id);
        if (reported(rank)) {
          error_ = fmt::format("the agent reported an exit for rank {}, which {}", rank,
                               reported_.count(rank) ? "was reported already" : "it was not given");
          return false;
        }
        reported_[rank] = true;
        --unreported_;
        WorkerExit e;
        e.rank = rank;
        e.status = static_cast<int>(x->status);
        e.signal = static_cast<int>(x->signal);
        sink_.on_exit(e);
      } else if (auto* err = std::get_if<agent_msg::Error>(&*m)) {
        error_ = "the agent stopped: " + err->message;
        return false;
      } else {
        error_ = fmt::format("the agent sent a {} frame, which only hvdrun sends", agent_message_name(*m));
        return false;
      }
    }
  } catch (const AgentProtocolError& e) {
    error_ = e.what();
    return false;
  }
  return true;
}

void AgentClient::finish(int status, int signal, const std::string& why) {
  std::string reason = why;
  if (!error_.empty()) reason = fmt::format("{}: {}", where_, error_);
  if (error_.empty() && reader_.pending() > 0) reason += " (its last frame was cut off)";
  for (auto& [rank, done] : reported_) {
    if (done) continue;
    done = true;
    --unreported_;
    WorkerExit e;
    e.rank = rank;
    e.status = status;
    e.signal = signal;
    e.lost_reason = reason;
    sink_.on_exit(e);
  }
}

}  // namespace hvd::launcher
