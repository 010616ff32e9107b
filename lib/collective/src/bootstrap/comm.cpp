// connect_comm: forms a full mesh of authenticated TCP links through a Store,
// then lets peers on the same host switch to shared memory
// (shm/local_links.h, unless HVD_TRANSPORT=tcp).
//
// Every rank listens on an ephemeral port and publishes "<prefix>rank_<r>"
// -> "host:port". Then it connects to every lower rank and accepts every
// higher one. The scheme cannot deadlock: rank 0 only accepts, and rank k's
// connections complete as soon as the lower ranks reach their accept phase,
// which they do after their own (lower) connections complete.
//
// abort() shuts every link down. Peers blocked on us then see EOF/RST at
// once, fail, and abort their own links in turn, so a failure anywhere
// cascades to every rank within a few round trips.
#include "hvd/collective/comm.h"

#include "hvd/common/error.h"
#include "hvd/common/secret.h"
#include "hvd/transport/shm.h"
#include "hvd/transport/tcp.h"

#include "shm/local_links.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>

namespace hvd::collective {

FailureBoard::FailureBoard(std::shared_ptr<store::Store> store, std::string prefix, std::chrono::milliseconds budget)
    : store_(std::move(store)), prefix_(std::move(prefix)), budget_(budget) {}

std::string FailureBoard::report(const std::string& failure) {
  // The store calls run on a thread of their own, so that a store that is
  // slow, gone, or busy with another thread's long poll (one connection per
  // client) costs this rank at most the budget. The thread owns everything
  // it touches and may outlive the call.
  struct Outcome {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::string first;
  };
  auto outcome = std::make_shared<Outcome>();
  constexpr std::size_t kMaxRecord = 1024;
  std::string record = failure.size() > kMaxRecord ? failure.substr(0, kMaxRecord) + "..." : failure;
  try {
    std::thread([store = store_, claim = prefix_ + "failure/claim", key = prefix_ + "failure/first",
                 record = std::move(record), outcome, budget = budget_] {
      std::string first;
      try {
        if (store->add(claim, 1) == 1) {
          store->set_string(key, record);
          first = record;
        } else {
          first = store->get_string(key, budget);  // the first claimant is writing it
        }
      } catch (...) {
        // No answer: the caller reports what it saw itself.
      }
      std::lock_guard<std::mutex> lock(outcome->mu);
      outcome->first = std::move(first);
      outcome->done = true;
      outcome->cv.notify_all();
    }).detach();
  } catch (const std::system_error&) {
    return failure;  // no thread: report what we saw
  }
  std::unique_lock<std::mutex> lock(outcome->mu);
  outcome->cv.wait_for(lock, budget_, [&] { return outcome->done; });
  return outcome->first.empty() ? failure : outcome->first;
}

char* Comm::scratch(std::size_t slot, std::size_t bytes) {
  if (scratch_.size() <= slot) scratch_.resize(slot + 1);
  ScratchBuffer& b = scratch_[slot];
  if (b.size < bytes) {
    // Grow geometrically so a sweep over sizes allocates O(log) times.
    std::size_t n = b.size == 0 ? 4096 : b.size;
    while (n < bytes) n *= 2;
    b.data.reset(new char[n]);
    b.size = n;
  }
  return b.data.get();
}

namespace {

class TcpComm final : public Comm {
 public:
  TcpComm(int rank, int size) : rank_(rank), size_(size), links_(static_cast<std::size_t>(size)) {}

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  transport::Link& link(int peer) override {
    HVD_ENFORCE(peer >= 0 && peer < size_ && peer != rank_ && links_[peer], "no link from rank {} to rank {}", rank_,
                peer);
    return *links_[peer];
  }

  void abort(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!aborted_.load()) {
        reason_ = reason;
        aborted_.store(true);
        spdlog::warn("rank {}: communicator aborted: {}", rank_, reason);
      }
    }
    for (auto& l : links_) {
      if (l) l->shutdown();
    }
  }

  bool aborted() const override { return aborted_.load(); }

  std::string abort_reason() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }

  void set_link(int peer, std::unique_ptr<transport::Link> l) { links_[peer] = std::move(l); }
  /// For choose_local_links, before the Comm is handed out.
  std::vector<std::unique_ptr<transport::Link>>& links() { return links_; }
  bool has_link(int peer) const { return links_[peer] != nullptr; }

 private:
  int rank_;
  int size_;
  std::vector<std::unique_ptr<transport::Link>> links_;
  std::atomic<bool> aborted_{false};
  mutable std::mutex mu_;
  std::string reason_;
};

std::string rank_key(const CommOptions& o, int r) { return fmt::format("{}rank_{}", o.prefix, r); }

}  // namespace

std::unique_ptr<Comm> connect_comm(store::Store& store, const CommOptions& options) {
  if (options.size < 1) throw InvalidArgument(fmt::format("communicator size must be >= 1, got {}", options.size));
  if (options.rank < 0 || options.rank >= options.size) {
    throw InvalidArgument(fmt::format("rank {} is outside [0, {})", options.rank, options.size));
  }
  // Bad values of the data-path variables fail before anyone connects.
  const bool use_shm = transport::shm_enabled_from_env();
  if (use_shm) transport::check_shm_env();
  auto comm = std::make_unique<TcpComm>(options.rank, options.size);
  if (options.size == 1) return comm;

  if (options.secret.empty()) {
    spdlog::warn("rank {}: no job secret ({} unset?): data-plane links are not authenticated", options.rank,
                 kSecretEnv);
  }
  std::string bind = options.bind_address;
  if (bind.empty() && !options.route_hint.empty()) bind = transport::source_address_for(options.route_hint);
  if (bind.empty()) bind = "127.0.0.1";

  const Deadline deadline = Deadline::after(options.timeout);
  transport::TcpListener listener(bind, 0, options.size + 16);
  // A wildcard bind is not an address peers can dial: advertise the route's
  // source address (or loopback) instead.
  std::string advertise = listener.endpoint();
  if (bind == "0.0.0.0" || bind == "::") {
    std::string host = options.route_hint.empty() ? "" : transport::source_address_for(options.route_hint);
    if (host.empty()) host = bind == "::" ? "::1" : "127.0.0.1";
    advertise = host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, listener.port())
                                                    : fmt::format("{}:{}", host, listener.port());
  }
  store.set_string(rank_key(options, options.rank), advertise);

  transport::TcpOptions tcp;
  tcp.socket_buffer_bytes = options.socket_buffer_bytes < 0 ? kDefaultSocketBuffer : options.socket_buffer_bytes;

  transport::Handshake hs;
  hs.secret = options.secret;
  hs.scope = options.prefix;
  hs.self_rank = options.rank;

  // Lower ranks: connect.
  for (int p = 0; p < options.rank; ++p) {
    std::string endpoint;
    try {
      endpoint = store.get_string(rank_key(options, p), deadline.remaining());
    } catch (const TimeoutError&) {
      throw TimeoutError(fmt::format("rank {}: rank {} never published its address (key '{}') within {} ms",
                                     options.rank, p, rank_key(options, p), options.timeout.count()));
    }
    comm->set_link(p, transport::connect(endpoint, p, hs, deadline, tcp));
  }

  // Higher ranks: accept, refusing strangers and duplicates.
  int missing = options.size - 1 - options.rank;
  while (missing > 0) {
    std::unique_ptr<transport::TcpLink> l;
    try {
      l = listener.accept(
          hs, [&](int p) { return p > options.rank && p < options.size && !comm->has_link(p); }, deadline, tcp);
    } catch (const TimeoutError&) {
      std::string absent;
      for (int p = options.rank + 1; p < options.size; ++p) {
        if (!comm->has_link(p)) absent += fmt::format("{}{}", absent.empty() ? "" : ", ", p);
      }
      throw TimeoutError(fmt::format("rank {}: ranks [{}] did not connect within {} ms", options.rank, absent,
                                     options.timeout.count()));
    }
    int p = l->peer();
    comm->set_link(p, std::move(l));
    --missing;
  }
  spdlog::debug("rank {}: connected to {} peers (listening on {})", options.rank, options.size - 1, advertise);
  // The one point where the link to each peer is chosen.
  detail::choose_local_links(comm->links(), options, use_shm, deadline);
  return comm;
}

}  // namespace hvd::collective
