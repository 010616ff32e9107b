// hvd::elastic::State, BufferState and run(): Horovod's elastic contract
// (commit / restore / sync / reset callbacks) over a Membership.
#include "hvd/collective/context.h"
#include "hvd/collective/elastic.h"
#include "hvd/collective/hvd.h"

#include "hvd/common/error.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstring>
#include <set>

namespace hvd::elastic {

namespace {

/// Tensor names of the State's own collectives. Fixed, so every rank's
/// calls match; the "elastic." prefix keeps them apart from user tensors.
constexpr const char* kHostsUpdatedTensor = "elastic.hosts_updated";
constexpr const char* kCommitsTensor = "elastic.sync.commits";

}  // namespace

State::State() = default;
State::~State() = default;

void State::commit() {
  save();
  ++commits_;
  check_host_updates();
}

void check_host_updates(Membership& m) {
  if (!m.elastic()) return;
  collective::Context& ctx = m.context();
  // Every rank contributes whether it saw a newer world; MAX tells all of
  // them whether anyone did, so all throw (or none) at this same point.
  int32_t flag = m.hosts_updated() ? 1 : 0;
  if (ctx.size() > 1) {
    ctx.allreduce(collective::AllreduceArgs{
        kHostsUpdatedTensor, &flag, &flag, collective::DataType::Int32, {1}, collective::ReduceOp::Max});
  }
  if (flag != 0) {
    throw HostsUpdatedInterrupt(
        fmt::format("hvd elastic: a new world was published (this is rank {} of {})", ctx.rank(), ctx.size()));
  }
}

void State::check_host_updates() { elastic::check_host_updates(membership()); }

void State::restore() { restore_saved(); }

void State::sync() {
  collective::Context& ctx = membership().context();
  int root = 0;
  if (ctx.size() > 1) {
    const int64_t mine = static_cast<int64_t>(commits_);
    collective::Handle h =
        ctx.allgather(collective::AllgatherArgs{kCommitsTensor, &mine, collective::DataType::Int64, {1}, {}});
    const auto* all = static_cast<const int64_t*>(h.output());
    const std::size_t n = h.output_bytes() / sizeof(int64_t);
    if (n != static_cast<std::size_t>(ctx.size())) {
      throw Error(fmt::format("hvd elastic sync: expected {} commit counts, got {}", ctx.size(), n));
    }
    // Most commits wins; strict '>' keeps the lowest rank on ties.
    for (std::size_t r = 1; r < n; ++r) {
      if (all[r] > all[root]) root = static_cast<int>(r);
    }
    sync_from(root);
    commits_ = static_cast<uint64_t>(all[root]);
    spdlog::debug("hvd elastic sync: rank {} of {} took the state of rank {} ({} commits)", ctx.rank(), ctx.size(),
                  root, commits_);
  }
  save();
  // This member now holds what the sync gave it (hvdrun decides whether
  // that is the job's trained state: store/elastic_world.h, synced_key).
  if (membership().elastic()) membership().synced();
}

void State::register_reset_callbacks(std::vector<std::function<void()>> callbacks) {
  for (auto& c : callbacks) reset_callbacks_.push_back(std::move(c));
}

void State::on_reset() {
  for (auto& c : reset_callbacks_) {
    if (c) c();
  }
}

// ---- BufferState ------------------------------------------------------------

void BufferState::add(const std::string& name, void* data, std::size_t bytes) {
  if (name.empty()) throw InvalidArgument("hvd elastic BufferState::add: empty buffer name");
  if (data == nullptr && bytes > 0) {
    throw InvalidArgument(fmt::format("hvd elastic BufferState::add: buffer '{}' is NULL", name));
  }
  for (const auto& e : entries_) {
    if (e.name == name) {
      throw InvalidArgument(fmt::format("hvd elastic BufferState::add: buffer '{}' is already registered", name));
    }
  }
  Entry e{name, data, bytes, {}};
  const auto* p = static_cast<const uint8_t*>(data);
  e.saved.assign(p, p + bytes);
  entries_.push_back(std::move(e));
}

void BufferState::save() {
  for (auto& e : entries_) {
    if (e.bytes > 0) std::memcpy(e.saved.data(), e.data, e.bytes);
  }
}

void BufferState::restore_saved() {
  for (auto& e : entries_) {
    if (e.bytes > 0) std::memcpy(e.data, e.saved.data(), e.bytes);
  }
}

void BufferState::sync_from(int root) {
  collective::Context& ctx = membership().context();
  std::vector<collective::Handle> handles;
  handles.reserve(entries_.size());
  for (auto& e : entries_) {
    handles.push_back(ctx.broadcast_async(collective::BroadcastArgs{
        "elastic.sync." + e.name, e.data, e.data, collective::DataType::UInt8, {static_cast<int64_t>(e.bytes)}, root}));
  }
  for (auto& h : handles) h.wait();
}

// ---- run ------------------------------------------------------------------

void run(State& state, const std::function<void(State&)>& fn) {
  Membership& m = state.membership();
  if (!m.elastic()) {
    state.sync();
    fn(state);
    return;
  }
  for (;;) {
    try {
      // Never skipped: survivors and newcomers always agree that a sync
      // happens after a (re-)join.
      state.sync();
      fn(state);
      return;
    } catch (const PeerFailureError& e) {
      spdlog::warn("hvd elastic: {}; restoring commit {} and re-forming", e.what(), state.commits());
      state.restore();
    } catch (const HostsUpdatedInterrupt& e) {
      spdlog::info("hvd elastic: {}; re-forming", e.what());
    }
    m.reset();
    state.on_reset();
  }
}

}  // namespace hvd::elastic
