// connect_comm: a communicator whose links form through a Store, at init
// for the few peers the first collectives need and at first use for the
// rest (bootstrap/mesh_plan.h), then let peers on the same host switch to
// shared memory (shm/local_links.h, unless HVD_TRANSPORT=tcp).
//
// Every rank listens on an ephemeral port and publishes "<prefix>rank_<r>"
// -> "host:port" (one store request). The link between two ranks is always
// opened by the higher rank: it reads the lower rank's address from the
// store and connects; the lower rank's acceptor thread (one per
// communicator) answers every handshake and the data-path hello at any
// time, so a connect never waits for the lower rank's own progress and the
// scheme cannot deadlock. A lower rank that needs a link waits for the
// higher rank to open it (watching its other links meanwhile, so that a
// failure elsewhere ends the wait).
//
// What this costs per rank does not grow with the job: one store write,
// one store read and one connection per link, and a rank has O(1) links
// after init (two ring neighbours beyond kEagerMeshMaxRanks ranks; the
// binomial trees and the pairwise exchanges add theirs when first used).
// The old scheme (a full mesh up front, each rank connecting to every lower
// rank and then accepting every higher one in turn) cost n - 1 store reads
// and n - 1 connections and shared-memory pairings per rank, one after
// another: O(n^2) set-up work on a host, and an np 256 job never started.
//
// abort() shuts every link down and stops the acceptor. Peers blocked on us
// then see EOF/RST at once, fail, and abort their own links in turn, so a
// failure anywhere cascades to every rank within a few round trips.
#include "hvd/collective/comm.h"

#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/job_env.h"
#include "hvd/common/secret.h"
#include "hvd/transport/shm.h"
#include "hvd/transport/tcp.h"

#include "bootstrap/mesh_plan.h"
#include "shm/local_links.h"

#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <poll.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

namespace hvd::collective {

FailureBoard::FailureBoard(std::shared_ptr<store::Store> store, std::string prefix, std::chrono::milliseconds budget)
    : store_(std::move(store)), prefix_(std::move(prefix)), budget_(budget) {}

bool FailureBoard::record(store::Store& store, const std::string& prefix, const std::string& failure) {
  if (store.add(prefix + "failure/claim", 1) != 1) return false;
  store.set_string(first_key(prefix), failure);
  return true;
}

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
    std::thread([store = store_, prefix = prefix_, record = std::move(record), outcome, budget = budget_] {
      std::string first;
      try {
        if (FailureBoard::record(*store, prefix, record)) {
          first = record;
        } else {
          first = store->get_string(first_key(prefix), budget);  // the first claimant is writing it
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

using Clock = std::chrono::steady_clock;

std::string rank_key(const CommOptions& o, int r) { return fmt::format("{}rank_{}", o.prefix, r); }

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

/// What the communicator and its acceptor thread share (the thread may
/// outlive the communicator by one pairing: see ~MeshComm).
struct AcceptorState {
  explicit AcceptorState(int size)
      : inbox(static_cast<std::size_t>(size)), claimed(static_cast<std::size_t>(size), 0),
        failed(static_cast<std::size_t>(size)) {}
  std::mutex mu;
  std::condition_variable cv;
  /// Links accepted from higher ranks and not yet taken by the communicator.
  std::vector<std::unique_ptr<transport::Link>> inbox;
  /// A handshake from that rank was accepted (a second one is refused).
  std::vector<char> claimed;
  /// Why the link from that rank failed after its handshake.
  std::vector<std::string> failed;
  /// The acceptor stopped for good (its listener failed): why.
  std::string fatal;
  bool stop = false;
  /// Inside LocalPairing::accept_side.
  bool pairing = false;
};

void accept_loop(std::shared_ptr<AcceptorState> st, std::shared_ptr<transport::TcpListener> listener,
                 std::shared_ptr<detail::LocalPairing> pairing, transport::Handshake hs, transport::TcpOptions tcp,
                 int size, std::chrono::milliseconds link_timeout) {
  const int me = hs.self_rank;
  auto wanted = [&](int p) {
    std::lock_guard<std::mutex> lock(st->mu);
    if (p <= me || p >= size || st->claimed[p]) return false;
    st->claimed[p] = 1;
    return true;
  };
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(st->mu);
      if (st->stop) return;
    }
    std::unique_ptr<transport::TcpLink> tcp_link;
    try {
      tcp_link = listener->accept(hs, wanted, Deadline::never(), tcp);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(st->mu);
      if (!st->stop) st->fatal = fmt::format("rank {}: accepting links from peers failed: {}", me, e.what());
      st->cv.notify_all();
      return;
    }
    const int p = tcp_link->peer();
    {
      std::lock_guard<std::mutex> lock(st->mu);
      st->pairing = true;
    }
    std::unique_ptr<transport::Link> done;
    std::string why;
    try {
      done = pairing->accept_side(std::move(tcp_link), Deadline::after(link_timeout));
    } catch (const std::exception& e) {
      why = e.what();
    }
    std::lock_guard<std::mutex> lock(st->mu);
    st->pairing = false;
    if (done) {
      st->inbox[p] = std::move(done);
    } else {
      st->failed[p] = why;
    }
    st->cv.notify_all();
  }
}

class MeshComm final : public Comm {
 public:
  MeshComm(store::Store& store, const CommOptions& options, bool use_shm)
      : store_(store), options_(options), rank_(options.rank), size_(options.size),
        owned_(static_cast<std::size_t>(options.size)),
        ready_(new std::atomic<transport::Link*>[static_cast<std::size_t>(options.size)]) {
    for (int p = 0; p < size_; ++p) ready_[p].store(nullptr);
    // Links formed after init get the full start timeout (at least 30 s):
    // on an oversubscribed host a healthy peer may take seconds to answer.
    link_timeout_ = std::max(options.timeout, std::chrono::milliseconds(30000));

    const int local_ranks = detail::local_ranks_hint(size_);
    cpu_set_t cpus;
    CPU_ZERO(&cpus);
    const int ncpu = ::sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? std::max(1, CPU_COUNT(&cpus)) : 1;
    tcp_.socket_buffer_bytes = options.socket_buffer_bytes < 0 ? kDefaultSocketBuffer : options.socket_buffer_bytes;
    if (!env::get(transport::kPeerTimeoutEnv)) {
      tcp_.peer_timeout = detail::scaled_peer_timeout(transport::kDefaultPeerTimeout, local_ranks, ncpu);
    }
    tcp_.retry_refused = false;  // addresses are published after listening
    hs_.secret = options.secret;
    hs_.scope = options.prefix;
    hs_.self_rank = rank_;
    hs_.handshake_timeout = std::max(hs_.handshake_timeout, options.timeout);

    std::string bind = options.bind_address;
    if (bind.empty() && !options.route_hint.empty()) bind = transport::source_address_for(options.route_hint);
    if (bind.empty()) bind = "127.0.0.1";
    listener_ = std::make_shared<transport::TcpListener>(bind, 0, 128);
    // A wildcard bind is not an address peers can dial: advertise the
    // route's source address (or loopback) instead.
    advertise_ = listener_->endpoint();
    if (bind == "0.0.0.0" || bind == "::") {
      std::string host = options.route_hint.empty() ? "" : transport::source_address_for(options.route_hint);
      if (host.empty()) host = bind == "::" ? "::1" : "127.0.0.1";
      advertise_ = host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, listener_->port())
                                                       : fmt::format("{}:{}", host, listener_->port());
    }
    pairing_ = std::make_shared<detail::LocalPairing>(options, use_shm, local_ranks);
    acceptor_ = std::make_shared<AcceptorState>(size_);
    thread_ = std::thread(accept_loop, acceptor_, listener_, pairing_, hs_, tcp_, size_, link_timeout_);
    pthread_setname_np(thread_.native_handle(), "hvd-accept");
  }

  ~MeshComm() override {
    stop_acceptor();
    if (thread_.joinable()) {
      bool pairing;
      {
        std::lock_guard<std::mutex> lock(acceptor_->mu);
        pairing = acceptor_->pairing;
      }
      // A pairing in progress ends by its own deadline; the thread owns
      // what it touches, so it may finish after us.
      if (pairing) {
        thread_.detach();
      } else {
        thread_.join();
      }
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  transport::Link& link(int peer) override {
    if (peer < 0 || peer >= size_ || peer == rank_) {
      throw InvalidArgument(fmt::format("no link from rank {} to rank {}", rank_, peer));
    }
    if (transport::Link* l = ready_[peer].load(std::memory_order_acquire)) return *l;
    const auto t0 = Clock::now();
    transport::Link& l = establish(peer, Deadline::after(link_timeout_));
    spdlog::debug("rank {}: link to rank {} formed at first use in {:.1f} ms", rank_, peer, ms_since(t0));
    return l;
  }

  void abort(const std::string& reason) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!aborted_.load()) {
        reason_ = reason;
        aborted_.store(true);
        // Debug only: the caller says why at the level it deserves
        // (Context: an error for a failure, info for a requested abort).
        spdlog::debug("rank {}: communicator aborted: {}", rank_, reason);
      }
      for (auto& l : owned_) {
        if (l) l->shutdown();
      }
    }
    stop_acceptor();
  }

  bool aborted() const override { return aborted_.load(); }

  std::string abort_reason() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }

  /// Publishes our address (one store write).
  void publish() { store_.set_string(rank_key(options_, rank_), advertise_); }
  const std::string& advertised() const { return advertise_; }

  /// The init links (eager_peers): connects to the lower ones, then waits
  /// for the higher ones; a timeout names every rank still missing.
  void connect_eager(Deadline deadline) {
    const std::vector<int> peers = detail::eager_peers(rank_, size_);
    for (int p : peers) {
      if (p < rank_) {
        establish(p, deadline);
        ++connected_;
      }
    }
    std::vector<int> higher;
    for (int p : peers) {
      if (p > rank_) higher.push_back(p);
    }
    for (std::size_t i = 0; i < higher.size(); ++i) {
      try {
        establish(higher[i], deadline);
        ++accepted_;
      } catch (const TimeoutError&) {
        std::string absent;
        for (std::size_t j = i; j < higher.size(); ++j) {
          if (!ready_[higher[j]].load()) absent += fmt::format("{}{}", absent.empty() ? "" : ", ", higher[j]);
        }
        throw TimeoutError(fmt::format("rank {}: ranks [{}] did not connect within {} ms (step: accepting links "
                                       "from higher ranks; each connects after reading rank {}'s address '{}' from "
                                       "the store)",
                                       rank_, absent, options_.timeout.count(), rank_, advertise_));
      }
    }
  }

  /// The data path, one line: up to kEagerMeshMaxRanks ranks (every link
  /// formed) the local group exactly, from its lowest rank at info with
  /// --verbose; beyond, from rank 0, what each link will get.
  void log_data_path(bool verbose) {
    std::vector<int> group{rank_};
    std::chrono::nanoseconds busy{0};
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int p = 0; p < size_; ++p) {
        const transport::SharedMemoryLink* shm = owned_[p] ? owned_[p]->shared_memory() : nullptr;
        if (shm && shm->send_window() > 0) {
          group.push_back(p);
          busy = std::max(busy, shm->busy_poll_hint());
        }
      }
    }
    std::sort(group.begin(), group.end());
    std::string line;
    bool info = false;
    if (size_ > detail::kEagerMeshMaxRanks) {
      line = fmt::format("rank {}: data path: {} (links beyond the ring neighbours form at first use)", rank_,
                         pairing_->describe());
      info = rank_ == 0;
    } else if (group.size() == 1) {
      const bool tcp_forced = pairing_->describe().find("=tcp") != std::string::npos;
      line = fmt::format("rank {}: data path: TCP to every peer ({})", rank_,
                         tcp_forced ? fmt::format("{}=tcp", transport::kTransportEnv)
                                    : std::string("no other rank on this host"));
      info = tcp_forced && rank_ == 0;
    } else {
      line = fmt::format("rank {}: data path: shared memory between the ranks [{}] of this host ({}, busy poll {} ns "
                         "between yields); TCP to the {} other rank(s)",
                         rank_, fmt::join(group, ","), pairing_->describe(true), busy.count(),
                         size_ - static_cast<int>(group.size()));
      info = group.front() == rank_;
    }
    if (info && verbose) {
      spdlog::info("{}", line);
    } else {
      spdlog::debug("{}", line);
    }
  }

  int connected_at_init() const { return connected_; }
  int accepted_at_init() const { return accepted_; }
  const detail::LocalPairing& pairing() const { return *pairing_; }
  std::chrono::milliseconds peer_timeout() const { return tcp_.peer_timeout; }

 private:
  void stop_acceptor() {
    {
      std::lock_guard<std::mutex> lock(acceptor_->mu);
      if (acceptor_->stop) return;
      acceptor_->stop = true;
      acceptor_->cv.notify_all();
    }
    listener_->shutdown();
  }

  transport::Link& establish(int peer, Deadline deadline) {
    if (aborted_.load()) {
      throw transport::LinkError(peer, fmt::format("rank {}: no link to rank {}: the communicator was aborted ({})",
                                                   rank_, peer, abort_reason()));
    }
    std::unique_ptr<transport::Link> l = peer < rank_ ? connect_to(peer, deadline) : await(peer, deadline);
    std::lock_guard<std::mutex> lock(mu_);
    owned_[peer] = std::move(l);
    if (aborted_.load()) owned_[peer]->shutdown();
    ready_[peer].store(owned_[peer].get(), std::memory_order_release);
    return *owned_[peer];
  }

  /// Lower peer: read its address, connect, choose the data path.
  std::unique_ptr<transport::Link> connect_to(int peer, Deadline deadline) {
    const std::string key = rank_key(options_, peer);
    std::string endpoint;
    try {
      // In slices, so that a failure another rank recorded (a rank that
      // will never publish) ends the wait early.
      for (;;) {
        try {
          endpoint = store_.get_string(key, std::min(deadline.remaining(), kFailureCheckInterval));
          break;
        } catch (const TimeoutError&) {
          if (deadline.expired()) throw;
        }
        throw_if_failure_recorded(fmt::format("waiting for rank {}'s address", peer));
      }
    } catch (const TimeoutError&) {
      throw TimeoutError(fmt::format("rank {}: rank {} never published its address (store key '{}') within {} ms",
                                     rank_, peer, key, options_.timeout.count()));
    } catch (const IoError& e) {
      throw IoError(fmt::format("rank {}: reading rank {}'s address (store key '{}') from the rendezvous store "
                                "failed: {}",
                                rank_, peer, key, e.what()));
    }
    std::unique_ptr<transport::TcpLink> tcp;
    try {
      tcp = transport::connect(endpoint, peer, hs_, deadline, tcp_);
    } catch (const TimeoutError&) {
      throw;  // names both ranks and the endpoint
    } catch (const transport::LinkError&) {
      throw;
    } catch (const IoError& e) {
      throw transport::LinkError(peer, e.what());
    }
    return pairing_->connect_side(std::move(tcp), deadline);
  }

  /// Higher peer: wait for its acceptor-side link. Meanwhile, every ~50 ms,
  /// our other links are checked for a hang-up: a peer that failed or
  /// aborted ends the wait at once (the peer we wait for may be waiting on
  /// that failure too, and would never come).
  std::unique_ptr<transport::Link> await(int peer, Deadline deadline) {
    const auto t0 = Clock::now();
    auto next_failure_check = t0 + kFailureCheckInterval;
    std::unique_lock<std::mutex> lock(acceptor_->mu);
    for (;;) {
      if (acceptor_->inbox[peer]) return std::move(acceptor_->inbox[peer]);
      if (!acceptor_->failed[peer].empty()) throw transport::LinkError(peer, acceptor_->failed[peer]);
      if (!acceptor_->fatal.empty()) throw IoError(acceptor_->fatal);
      if (aborted_.load()) {
        throw transport::LinkError(peer, fmt::format("rank {}: no link to rank {}: the communicator was aborted ({})",
                                                     rank_, peer, abort_reason()));
      }
      if (deadline.expired()) {
        throw TimeoutError(fmt::format("rank {}: rank {} did not connect within {:.0f} ms (it has not reached this "
                                       "step, or is stuck)",
                                       rank_, peer, ms_since(t0)));
      }
      lock.unlock();
      check_hangups();
      if (Clock::now() >= next_failure_check) {
        throw_if_failure_recorded(fmt::format("waiting for rank {} to connect", peer));
        next_failure_check = Clock::now() + kFailureCheckInterval;
      }
      lock.lock();
      if (acceptor_->inbox[peer] || !acceptor_->failed[peer].empty()) continue;
      acceptor_->cv.wait_until(lock, std::min(deadline.at(), Clock::now() + std::chrono::milliseconds(50)));
    }
  }

  /// How often a rank waiting at init looks for a failure another rank
  /// recorded on the FailureBoard of this rendezvous.
  static constexpr std::chrono::milliseconds kFailureCheckInterval{250};

  /// Throws IoError when a rank recorded this rendezvous's first failure
  /// (FailureBoard): the peer we wait for may never come (it gave up, or is
  /// waiting for the one that failed), and waiting out the whole timeout
  /// would only delay the re-formation. The caller's message adds the
  /// recorded failure ("first failure in the job").
  void throw_if_failure_recorded(const std::string& step) {
    std::optional<store::Bytes> first;
    try {
      first = store_.try_get(FailureBoard::first_key(options_.prefix));
    } catch (const std::exception&) {
      return;  // the store did not answer: the deadline still bounds the wait
    }
    if (!first) return;
    throw IoError(fmt::format("rank {}: stopped {}: another rank recorded this communicator's first failure", rank_,
                              step));
  }

  /// Throws LinkError for the first established link whose peer hung up.
  void check_hangups() {
    std::vector<pollfd> fds;
    std::vector<int> who;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int p = 0; p < size_; ++p) {
        if (!owned_[p]) continue;
        fds.push_back(pollfd{owned_[p]->poll_fd(), POLLRDHUP, 0});
        who.push_back(p);
      }
    }
    if (fds.empty() || ::poll(fds.data(), fds.size(), 0) <= 0) return;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents & (POLLRDHUP | POLLHUP | POLLERR)) {
        throw transport::LinkError(who[i], fmt::format("connection to rank {} closed by peer (seen while rank {} "
                                                       "waited for a new link)",
                                                       who[i], rank_));
      }
    }
  }

  store::Store& store_;
  CommOptions options_;
  int rank_;
  int size_;
  std::chrono::milliseconds link_timeout_{30000};
  transport::TcpOptions tcp_;
  transport::Handshake hs_;
  std::string advertise_;
  std::shared_ptr<transport::TcpListener> listener_;
  std::shared_ptr<detail::LocalPairing> pairing_;
  std::shared_ptr<AcceptorState> acceptor_;
  std::thread thread_;
  /// Guards owned_ (link() of the collective thread vs abort()).
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<transport::Link>> owned_;
  std::unique_ptr<std::atomic<transport::Link*>[]> ready_;
  std::atomic<bool> aborted_{false};
  std::string reason_;
  int connected_ = 0;
  int accepted_ = 0;
};

/// A job of one rank: no links.
class SoloComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  transport::Link& link(int peer) override {
    throw InvalidArgument(fmt::format("no link from rank 0 to rank {}", peer));
  }
  void abort(const std::string& reason) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!aborted_.exchange(true)) reason_ = reason;
  }
  bool aborted() const override { return aborted_.load(); }
  std::string abort_reason() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }

 private:
  std::atomic<bool> aborted_{false};
  mutable std::mutex mu_;
  std::string reason_;
};

}  // namespace

std::unique_ptr<Comm> connect_comm(store::Store& store, const CommOptions& options) {
  if (options.size < 1) throw InvalidArgument(fmt::format("communicator size must be >= 1, got {}", options.size));
  if (options.rank < 0 || options.rank >= options.size) {
    throw InvalidArgument(fmt::format("rank {} is outside [0, {})", options.rank, options.size));
  }
  // Bad values of the data-path variables fail before anyone connects.
  const bool use_shm = transport::shm_enabled_from_env();
  if (use_shm) transport::check_shm_env();
  if (options.size == 1) return std::make_unique<SoloComm>();

  if (options.secret.empty()) {
    spdlog::warn("rank {}: no job secret ({} unset?): data-plane links are not authenticated", options.rank,
                 kSecretEnv);
  }
  const auto t0 = Clock::now();
  const Deadline deadline = Deadline::after(options.timeout);
  auto comm = std::make_unique<MeshComm>(store, options, use_shm);
  const double t_listen = ms_since(t0);
  try {
    comm->publish();
  } catch (const IoError& e) {
    throw IoError(fmt::format("rank {}: publishing its address (store key '{}') in the rendezvous store failed: {}",
                              options.rank, rank_key(options, options.rank), e.what()));
  }
  const double t_publish = ms_since(t0);
  comm->connect_eager(deadline);
  const double t_links = ms_since(t0);
  // One line per rank at debug; rank 0's at info with --verbose
  // (docs/collective.md, "Links and their handshake").
  const bool verbose = env::get_bool_or(job_env::kVerbose, false);
  const std::string line = fmt::format(
      "rank {}: communicator of {} ranks ready in {:.1f} ms (listen {:.1f} ms, publish address {:.1f} ms, {} link(s) "
      "connected + {} accepted at init in {:.1f} ms: {} shared memory, {} TCP; {}; silent-peer limit {} ms)",
      options.rank, options.size, t_links, t_listen, t_publish - t_listen, comm->connected_at_init(),
      comm->accepted_at_init(), t_links - t_publish, comm->pairing().shm_links(), comm->pairing().tcp_links(),
      options.size > detail::kEagerMeshMaxRanks ? "the other links form at first use" : "every pair linked",
      comm->peer_timeout().count());
  if (options.rank == 0 && verbose) {
    spdlog::info("{}", line);
  } else {
    spdlog::debug("{}", line);
  }
  comm->log_data_path(verbose);
  return comm;
}

}  // namespace hvd::collective
