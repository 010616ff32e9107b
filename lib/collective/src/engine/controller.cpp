#include "engine/controller.h"

#include "engine/fusion.h"

#include "hvd/common/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <utility>

namespace hvd::collective::detail {

namespace {

/// nullopt when every rank has the same value, else
/// "ranks 0,2 have float32[4,4], rank 1 has float32[4,5]".
std::optional<std::string> disagreement(const std::vector<std::string>& keys, const std::vector<std::string>& shown,
                                        const char* plural_verb, const char* singular_verb) {
  bool all_equal = std::all_of(keys.begin(), keys.end(), [&](const std::string& k) { return k == keys[0]; });
  if (all_equal) return std::nullopt;
  std::vector<std::pair<std::string, std::vector<int>>> groups;  // shown value -> ranks, first-seen order
  for (std::size_t r = 0; r < shown.size(); ++r) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == shown[r]; });
    if (it == groups.end()) {
      groups.push_back({shown[r], {static_cast<int>(r)}});
    } else {
      it->second.push_back(static_cast<int>(r));
    }
  }
  std::vector<std::string> parts;
  for (const auto& [value, ranks] : groups) {
    bool one = ranks.size() == 1;
    parts.push_back(
        fmt::format("rank{} {} {} {}", one ? "" : "s", join_ranks(ranks), one ? singular_verb : plural_verb, value));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

bool first_dim_may_differ(OpType t) { return t == OpType::Allgather || t == OpType::Alltoall; }
bool reduces(OpType t) { return t == OpType::Allreduce || t == OpType::Reducescatter; }

}  // namespace

Controller::Controller(ControllerOptions options) : options_(options), cache_(options.cache_capacity) {}

RankMessage Controller::make_message(const std::vector<Request>& fresh, bool shutdown,
                                     std::vector<std::string> stalled) {
  RankMessage m;
  m.shutdown = shutdown;
  m.stalled = std::move(stalled);
  for (const Request& q : fresh) {
    if (auto id = cache_.lookup(q, options_.rank)) {
      m.cache_hits.push_back(*id);
      ++stats_.cache_hits;
    } else {
      m.requests.push_back(q);
      ++stats_.cache_misses;
    }
  }
  return m;
}

void Controller::announce(int rank, Request request, Clock::time_point now, std::vector<std::string>& ready) {
  auto [it, inserted] = table_.try_emplace(request.name);
  Entry& e = it->second;
  if (inserted) {
    e.requests.assign(options_.size, Request{});
    e.have.assign(options_.size, false);
    e.cycle.assign(options_.size, 0);
    e.order = next_order_++;
    e.first_seen = now;
  }
  if (e.have[rank]) {
    throw IoError(fmt::format("negotiation state diverged: rank {} announced tensor '{}' twice", rank, request.name));
  }
  e.have[rank] = true;
  e.cycle[rank] = stats_.cycles;
  e.requests[rank] = std::move(request);
  if (on_announce) on_announce(e.requests[rank], rank);
  if (++e.count == options_.size) ready.push_back(it->first);
}

void Controller::complete_for_joined(std::vector<std::string>& ready) {
  // Also when the join itself completed this cycle: tensors still waiting
  // on joined ranks complete first (the join response goes last).
  auto j = table_.find(kJoinName);
  if (j == table_.end()) return;
  const std::vector<bool>& joined = j->second.have;
  std::vector<std::pair<uint64_t, std::string>> complete;
  for (auto& [name, e] : table_) {
    if (name == kJoinName || e.count == options_.size) continue;
    bool all = true;
    int first = -1;
    for (int r = 0; r < options_.size; ++r) {
      if (e.have[r] && first < 0) first = r;
      all = all && (e.have[r] || joined[r]);
    }
    if (!all || first < 0) continue;
    for (int r = 0; r < options_.size; ++r) {
      if (e.have[r]) continue;
      Request q = e.requests[first];
      q.joined = true;
      e.requests[r] = std::move(q);
      e.have[r] = true;
      ++e.count;
    }
    complete.push_back({e.order, name});
  }
  std::sort(complete.begin(), complete.end());
  for (auto& [order, name] : complete) {
    if (std::find(ready.begin(), ready.end(), name) == ready.end()) ready.push_back(name);
  }
}

Response Controller::validate(TensorRequests reqs) const {
  Response resp;
  resp.type = reqs[0].type;
  const std::string name = reqs[0].name;
  const std::size_t n = reqs.size();
  auto fail = [&](const std::string& what) {
    resp.error = ResponseError::Mismatch;
    resp.message = fmt::format("tensor '{}' mismatch: {}", name, what);
  };
  std::vector<std::string> keys(n), shown(n);

  // 1. Operation type.
  for (std::size_t r = 0; r < n; ++r) keys[r] = shown[r] = op_type_name(reqs[r].type);
  if (auto d = disagreement(keys, shown, "submit", "submits")) {
    fail(*d);
  }
  // 2. Dtype and shape (allgather/alltoall: all but the first dimension).
  if (resp.ok()) {
    for (std::size_t r = 0; r < n; ++r) {
      std::vector<int64_t> key_shape = reqs[r].shape;
      if (first_dim_may_differ(resp.type) && !key_shape.empty()) key_shape[0] = -1;
      keys[r] = describe_tensor(reqs[r].dtype, key_shape);
      shown[r] = describe_tensor(reqs[r].dtype, reqs[r].shape);
    }
    if (resp.type == OpType::Barrier) std::fill(keys.begin(), keys.end(), std::string());
    if (auto d = disagreement(keys, shown, "have", "has")) fail(*d);
  }
  // 3. Reduce op and scale factors.
  if (resp.ok() && reduces(resp.type)) {
    for (std::size_t r = 0; r < n; ++r) keys[r] = shown[r] = reduce_op_name(reqs[r].op);
    if (auto d = disagreement(keys, shown, "use op", "uses op")) fail(*d);
  }
  if (resp.ok() && reduces(resp.type)) {
    for (std::size_t r = 0; r < n; ++r) {
      keys[r] = shown[r] = fmt::format("prescale {} postscale {}", reqs[r].prescale, reqs[r].postscale);
    }
    if (auto d = disagreement(keys, shown, "use", "uses")) fail(*d);
  }
  // 4. Host or device memory (device ids themselves may differ per rank).
  if (resp.ok()) {
    for (std::size_t r = 0; r < n; ++r) {
      keys[r] = shown[r] = reqs[r].device >= 0 ? "device buffers" : "host buffers";
    }
    if (auto d = disagreement(keys, shown, "passed", "passed")) fail(*d);
  }
  if (resp.ok() && reqs[0].device >= 0 && !options_.device_buffers) {
    resp.error = ResponseError::Unsupported;
    resp.message = fmt::format(
        "tensor '{}': every rank passed CUDA device buffers, but this hvd_collective was built without the CUDA "
        "component (configure with nvcc available and -DHVD_WITH_CUDA=ON, or pass host buffers)",
        name);
  }
  // 5. Broadcast root.
  if (resp.ok() && resp.type == OpType::Broadcast) {
    for (std::size_t r = 0; r < n; ++r) keys[r] = shown[r] = fmt::format("root {}", reqs[r].root);
    if (auto d = disagreement(keys, shown, "use", "uses")) fail(*d);
  }
  resp.tensors.push_back(std::move(reqs));
  return resp;
}

Controller::Outcome Controller::process(const std::vector<RankMessage>& messages, Clock::time_point now) {
  if (static_cast<int>(messages.size()) != options_.size) {
    throw IoError(fmt::format("negotiation got {} messages for {} ranks", messages.size(), options_.size));
  }
  ++stats_.cycles;
  Outcome out;

  // Resolve cache bits against the cache as it stood when every rank encoded
  // its message, before this cycle's results change it.
  std::vector<std::vector<Request>> announced(options_.size);
  for (int r = 0; r < options_.size; ++r) {
    const RankMessage& m = messages[r];
    if (m.shutdown && out.shutdown_rank < 0) out.shutdown_rank = r;
    announced[r] = m.requests;
    for (uint32_t id : m.cache_hits) {
      const TensorRequests& t = cache_.get(id);
      if (static_cast<int>(t.size()) != options_.size) {
        throw IoError(fmt::format("negotiation state diverged: cache entry {} has {} ranks", id, t.size()));
      }
      announced[r].push_back(t[r]);
    }
  }

  std::vector<std::string> ready;
  for (int r = 0; r < options_.size; ++r) {
    for (Request& q : announced[r]) announce(r, std::move(q), now, ready);
  }
  complete_for_joined(ready);

  std::vector<Response> validated;
  validated.reserve(ready.size());
  Response join_done;  // runs after everything else of this cycle
  bool join_ready = false;
  for (const std::string& name : ready) {
    auto it = table_.find(name);
    std::vector<uint64_t> cycles = std::move(it->second.cycle);
    const bool made_up =
        std::any_of(it->second.requests.begin(), it->second.requests.end(), [](const Request& q) { return q.joined; });
    Response resp = validate(std::move(it->second.requests));
    table_.erase(it);
    // As Horovod: host allreduces (joined ranks add zeros) and barriers
    // (joined ranks take part) run; anything else fails on every rank.
    const bool joined_can_run =
        (resp.type == OpType::Allreduce && resp.tensors[0][0].device < 0) || resp.type == OpType::Barrier;
    if (resp.ok() && made_up && !joined_can_run) {
      std::vector<int> who;
      for (std::size_t r = 0; r < resp.tensors[0].size(); ++r) {
        if (resp.tensors[0][r].joined) who.push_back(static_cast<int>(r));
      }
      resp.error = ResponseError::Joined;
      resp.message = fmt::format(
          "tensor '{}': rank{} {} {} joined (join()); until every rank joins, only allreduce of host buffers and "
          "barrier can run",
          name, who.size() == 1 ? "" : "s", join_ranks(who), who.size() == 1 ? "has" : "have");
    }
    if (resp.ok() && resp.type == OpType::Join) {
      int last = 0;
      for (int r = 1; r < options_.size; ++r) {
        if (cycles[r] >= cycles[last]) last = r;
      }
      resp.last_joined = last;
      join_done = std::move(resp);
      join_ready = true;
      continue;
    }
    // Made-up requests are not what the joined rank would send: never cached.
    if (resp.ok() && !made_up) {
      cache_.put(resp.tensors[0]);
    } else {
      cache_.erase(name);
    }
    validated.push_back(std::move(resp));
  }

  out.responses = plan_fusion(std::move(validated), options_.fusion_threshold);
  if (join_ready) out.responses.push_back(std::move(join_done));

  // Stalled tensors, as rank 0 decided them; only those still incomplete.
  for (const std::string& name : messages[0].stalled) {
    auto it = table_.find(name);
    if (it == table_.end()) continue;
    std::vector<int> missing;
    for (int r = 0; r < options_.size; ++r) {
      if (!it->second.have[r]) missing.push_back(r);
    }
    Response resp;
    resp.error = ResponseError::Stalled;
    resp.message = fmt::format("tensor '{}' stalled: rank{} {} did not submit it before the stall shutdown time", name,
                               missing.size() == 1 ? "" : "s", join_ranks(missing));
    TensorRequests t = std::move(it->second.requests);
    for (Request& q : t) q.name = name;
    resp.type = t[0].type;
    resp.tensors.push_back(std::move(t));
    table_.erase(it);
    out.responses.push_back(std::move(resp));
  }

  for (const Response& r : out.responses) {
    ++stats_.responses;
    if (r.tensors.size() > 1) {
      ++stats_.fused_responses;
      stats_.fused_tensors += r.tensors.size();
    }
  }
  return out;
}

std::vector<PendingTensor> Controller::pending() const {
  std::vector<std::pair<uint64_t, PendingTensor>> items;
  for (const auto& [name, e] : table_) {
    PendingTensor t;
    t.name = name;
    t.first_seen = e.first_seen;
    for (int r = 0; r < options_.size; ++r) (e.have[r] ? t.present : t.missing).push_back(r);
    items.push_back({e.order, std::move(t)});
  }
  std::sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<PendingTensor> out;
  for (auto& [order, t] : items) out.push_back(std::move(t));
  return out;
}

}  // namespace hvd::collective::detail
