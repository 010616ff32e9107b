// Process sets (process_sets.h, docs/collective.md "Process sets").
#include "engine/process_sets.h"

#include "hvd/collective/errors.h"
#include "hvd/common/error.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>

namespace hvd::collective::detail {

namespace {

std::string ranks_text(const std::vector<int>& ranks) { return fmt::format("[{}]", fmt::join(ranks, ", ")); }

/// Every rank's string, in rank order: one allgather of the lengths, one of
/// the bytes.
std::vector<std::string> gather_strings(Context& c, const std::string& name, const std::string& mine) {
  const int64_t len = static_cast<int64_t>(mine.size());
  AllgatherArgs la;
  la.name = name + ".len";
  la.input = &len;
  la.dtype = DataType::Int64;
  la.shape = {1};
  Handle lh = c.allgather(la);
  std::vector<int64_t> lens(static_cast<std::size_t>(c.size()));
  if (lh.output_bytes() != lens.size() * sizeof(int64_t)) {
    throw IoError(fmt::format("hvd: process set agreement got {} bytes of lengths", lh.output_bytes()));
  }
  std::memcpy(lens.data(), lh.output(), lh.output_bytes());
  AllgatherArgs ba;
  ba.name = name;
  ba.input = mine.data();
  ba.dtype = DataType::UInt8;
  ba.shape = {len};
  Handle bh = c.allgather(ba);
  std::vector<std::string> out;
  const char* p = static_cast<const char*>(bh.output());
  std::size_t off = 0;
  for (int64_t l : lens) {
    if (l < 0 || off + static_cast<std::size_t>(l) > bh.output_bytes()) {
      throw IoError("hvd: process set agreement: inconsistent lengths");
    }
    out.emplace_back(p + off, static_cast<std::size_t>(l));
    off += static_cast<std::size_t>(l);
  }
  return out;
}

constexpr const char* kDynamicHint =
    "set HOROVOD_DYNAMIC_PROCESS_SETS=1 (or call init(process_sets=\"dynamic\")) on every rank to allow adding and "
    "removing process sets after initialization; static sets are passed to init(process_sets=[...])";

}  // namespace

SetTopology set_topology(const std::vector<int>& ranks, const std::vector<std::string>& hosts, int me) {
  auto host = [&](std::size_t i) {
    const auto g = static_cast<std::size_t>(ranks[i]);
    return g < hosts.size() ? hosts[g] : std::string();
  };
  const auto mine = static_cast<std::size_t>(me);
  std::vector<int> local(ranks.size(), 0);
  SetTopology t;
  t.local_size = t.cross_size = 0;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) local[i] += host(j) == host(i) ? 1 : 0;
    if (host(i) == host(mine)) ++t.local_size;
  }
  t.local_rank = local[mine];
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (local[i] != t.local_rank) continue;
    if (i < mine) ++t.cross_rank;
    ++t.cross_size;
  }
  return t;
}

ProcessSetTable::ProcessSetTable(Context& owner, std::shared_ptr<store::Store> store)
    : owner_(owner), store_(std::move(store)) {
  std::vector<int> all(static_cast<std::size_t>(owner_.size()));
  for (int r = 0; r < owner_.size(); ++r) all[static_cast<std::size_t>(r)] = r;
  sets_[kGlobalProcessSet] = Entry{std::move(all), nullptr};
}

ProcessSetTable::~ProcessSetTable() { shutdown_all(); }

void ProcessSetTable::agree(const std::string& call) {
  const uint64_t n = calls_++;
  const std::string mine = call + "\n" + owner_.settings().hostname;
  std::vector<std::string> all = gather_strings(owner_, fmt::format("hvd.process_set.call.{}", n), mine);
  std::vector<std::string> calls(all.size()), hosts(all.size());
  for (std::size_t r = 0; r < all.size(); ++r) {
    const auto nl = all[r].rfind('\n');
    calls[r] = all[r].substr(0, nl);
    hosts[r] = nl == std::string::npos ? std::string() : all[r].substr(nl + 1);
  }
  hosts_ = std::move(hosts);
  std::vector<std::string> differ;
  for (std::size_t r = 0; r < calls.size(); ++r) {
    if (calls[r] != calls[0]) differ.push_back(fmt::format("rank {} called {}", r, calls[r]));
  }
  if (!differ.empty()) {
    throw InvalidArgument(fmt::format(
        "hvd: process sets must be added and removed by every rank with the same arguments, in the same order: "
        "rank 0 called {}, {}",
        calls[0], fmt::join(differ, ", ")));
  }
}

std::vector<int> ProcessSetTable::checked(std::vector<int> ranks, const char* what, bool allow_global) const {
  const std::string given = ranks_text(ranks);
  if (ranks.empty()) throw InvalidArgument(fmt::format("hvd: {}([]): a process set needs at least one rank", what));
  std::sort(ranks.begin(), ranks.end());
  if (auto d = std::adjacent_find(ranks.begin(), ranks.end()); d != ranks.end()) {
    throw InvalidArgument(fmt::format("hvd: {}({}): rank {} appears more than once", what, given, *d));
  }
  if (ranks.front() < 0 || ranks.back() >= owner_.size()) {
    const int bad = ranks.front() < 0 ? ranks.front() : ranks.back();
    throw InvalidArgument(
        fmt::format("hvd: {}({}): rank {} is out of range for a job of size {}", what, given, bad, owner_.size()));
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [id, e] : sets_) {
    if (e.ranks == ranks && !(allow_global && id == kGlobalProcessSet)) {
      throw InvalidArgument(fmt::format("hvd: {}({}): duplicate process set: process set {} already has ranks {}", what,
                                        given, id, ranks_text(ranks)));
    }
  }
  return ranks;
}

void ProcessSetTable::install(int32_t id, std::vector<int> ranks) {
  const auto me = std::find(ranks.begin(), ranks.end(), owner_.rank());
  std::shared_ptr<Context> ctx;
  if (me != ranks.end()) {
    const Settings& o = owner_.settings();
    Settings s = o;
    s.process_sets.clear();
    s.skip_unfit_process_sets = false;
    s.dynamic_process_sets = false;
    s.process_set_id = id;
    s.init_deadline.reset();
    s.rank = static_cast<int>(me - ranks.begin());
    s.size = static_cast<int>(ranks.size());
    const SetTopology t = set_topology(ranks, hosts_, s.rank);
    s.local_rank = t.local_rank;
    s.local_size = t.local_size;
    s.cross_rank = t.cross_rank;
    s.cross_size = t.cross_size;
    // The set's thread runs where the owner's does (HOROVOD_THREAD_AFFINITY).
    s.thread_affinity.clear();
    if (!o.thread_affinity.empty() && static_cast<int>(o.thread_affinity.size()) >= o.local_size) {
      s.thread_affinity.assign(static_cast<std::size_t>(s.local_size),
                               o.thread_affinity[static_cast<std::size_t>(o.local_rank)]);
    }
    s.comm_prefix = fmt::format("{}pset{}.{}/", o.comm_prefix, calls_, id);
    try {
      ctx = std::shared_ptr<Context>(Context::create(s, s.size > 1 ? store_ : nullptr));
    } catch (const std::exception& e) {
      // Typed as it was (a rendezvous timeout stays a TimeoutError).
      spdlog::error("hvd[{}]: process set {} {} did not form: {}", owner_.rank(), id, ranks_text(ranks), e.what());
      {
        std::lock_guard<std::mutex> lock(mu_);
        free_ids_.push_front(id);
      }
      throw;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  sets_[id] = Entry{std::move(ranks), std::move(ctx)};
}

void ProcessSetTable::register_static(const std::vector<std::vector<int>>& sets, bool skip_unfit) {
  std::lock_guard<std::mutex> call_lock(call_mu_);
  std::vector<std::string> described;
  for (const auto& s : sets) described.push_back(ranks_text(s));
  agree(fmt::format("init(process_sets=[{}])", fmt::join(described, ", ")));
  for (std::size_t i = 0; i < sets.size(); ++i) {
    const auto id = static_cast<int32_t>(i + 1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      next_id_ = id + 1;
    }
    const bool fits = std::all_of(sets[i].begin(), sets[i].end(), [&](int r) { return r >= 0 && r < owner_.size(); });
    if (skip_unfit && !fits) {
      if (owner_.rank() == 0) {
        spdlog::warn(
            "hvd: static process set {} {} is not registered in this world of {} ranks (it names a rank "
            "that does not exist); operations on it fail until a world has its ranks",
            id, ranks_text(sets[i]), owner_.size());
      }
      continue;
    }
    // An elastic world may shrink to a static set's ranks: then it is
    // registered all the same (its id must keep working).
    install(id, checked(sets[i], "init(process_sets=...)", skip_unfit));
  }
}

int32_t ProcessSetTable::add(std::vector<int> ranks) {
  if (!owner_.settings().dynamic_process_sets) {
    throw InvalidArgument(fmt::format("hvd: add_process_set({}): {}", ranks_text(ranks), kDynamicHint));
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  // Agree first: every rank then reaches the same verdict on the arguments.
  agree(fmt::format("add_process_set({})", ranks_text(ranks)));
  std::vector<int> sorted = checked(std::move(ranks), "add_process_set", false);
  int32_t id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_ids_.empty()) {
      id = free_ids_.front();
      free_ids_.pop_front();
    } else {
      id = next_id_++;
    }
  }
  install(id, std::move(sorted));
  return id;
}

void ProcessSetTable::remove(int32_t id) {
  if (!owner_.settings().dynamic_process_sets) {
    throw InvalidArgument(fmt::format("hvd: remove_process_set({}): {}", id, kDynamicHint));
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  agree(fmt::format("remove_process_set({})", id));
  if (id == kGlobalProcessSet) {
    throw InvalidArgument("hvd: remove_process_set(0): the global process set cannot be removed");
  }
  std::shared_ptr<Context> ctx;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = sets_.find(id);
    if (it == sets_.end()) {
      throw InvalidArgument(fmt::format("hvd: remove_process_set({}): no process set has id {}", id, id));
    }
    ctx = std::move(it->second.context);
    sets_.erase(it);
    free_ids_.push_back(id);
  }
  if (ctx) ctx->shutdown();
}

const ProcessSetTable::Entry& ProcessSetTable::entry(int32_t id, const std::string& what) const {
  auto it = sets_.find(id);
  if (it == sets_.end()) {
    std::vector<int32_t> known;
    for (const auto& [k, e] : sets_) known.push_back(k);
    throw InvalidArgument(
        fmt::format("hvd: {}: process set {} is not registered (registered: {})", what, id, fmt::join(known, ", ")));
  }
  return it->second;
}

std::vector<int32_t> ProcessSetTable::ids() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int32_t> out;
  for (const auto& [id, e] : sets_) out.push_back(id);
  return out;
}

std::vector<int> ProcessSetTable::ranks(int32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return entry(id, "process_set_ranks").ranks;
}

bool ProcessSetTable::included(int32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto& r = entry(id, "process_set_included").ranks;
  return std::binary_search(r.begin(), r.end(), owner_.rank());
}

int ProcessSetTable::rank(int32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  const auto& r = entry(id, "process_set_rank").ranks;
  auto it = std::lower_bound(r.begin(), r.end(), owner_.rank());
  if (it == r.end() || *it != owner_.rank()) {
    throw InvalidArgument(fmt::format("hvd: process_set_rank({}): rank {} is not a member of process set {} {}", id,
                                      owner_.rank(), id, ranks_text(r)));
  }
  return static_cast<int>(it - r.begin());
}

int ProcessSetTable::size(int32_t id) const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(entry(id, "process_set_size").ranks.size());
}

std::shared_ptr<Context> ProcessSetTable::member(int32_t id, const std::string& what) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Entry& e = entry(id, what);
  if (!e.context) {
    throw InvalidArgument(fmt::format("hvd: {}: rank {} is not a member of process set {} {}", what, owner_.rank(), id,
                                      ranks_text(e.ranks)));
  }
  return e.context;
}

int ProcessSetTable::set_rank_of(int32_t id, int global_rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return -1;
  const auto& r = it->second.ranks;
  auto p = std::lower_bound(r.begin(), r.end(), global_rank);
  return p != r.end() && *p == global_rank ? static_cast<int>(p - r.begin()) : -1;
}

void ProcessSetTable::shutdown_all() {
  std::vector<std::shared_ptr<Context>> ctxs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, e] : sets_) {
      if (e.context) ctxs.push_back(e.context);
    }
  }
  for (auto& c : ctxs) {
    try {
      c->shutdown();
    } catch (...) {
    }
  }
}

void ProcessSetTable::abort_all(const std::string& reason) {
  std::vector<std::shared_ptr<Context>> ctxs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, e] : sets_) {
      if (e.context) ctxs.push_back(e.context);
    }
  }
  for (auto& c : ctxs) c->abort(reason);
}

}  // namespace hvd::collective::detail
