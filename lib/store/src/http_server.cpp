// The HTTP store server: one Boost.Asio event loop, one Connection object per
// client socket, each on its own strand. Long-polls are answered by a timer
// plus a one-shot watcher on the InMemoryStore, never by a parked thread.
// Errors inside handlers are values (error_code) or caught exceptions that
// close only the connection concerned; nothing escapes into io_context::run().
#include "hvd/common/error.h"
#include "hvd/common/secret.h"
#include "hvd/store/http_store.h"
#include "http_wire.h"

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <optional>
#include <thread>
#include <unordered_map>

namespace hvd::store {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

class Connection;

/// After an error response the connection is half-closed and what the client
/// still sends is drained (bounded) so that the kernel does not answer it with
/// a reset that could destroy the error response in flight.
constexpr std::chrono::milliseconds kLingerTime{500};
constexpr std::size_t kLingerBytes = 4u << 20;

}  // namespace

class HttpStoreServer::Impl {
 public:
  explicit Impl(ServerOptions o) : opts(std::move(o)) {}

  void start();
  void stop();
  void do_accept();
  /// Registers `c` unless the cap is reached or the server stops; false means
  /// the caller must drop the socket.
  bool register_connection(const std::shared_ptr<Connection>& c);
  void unregister_connection(Connection* c);

  ServerOptions opts;
  // Declared before io: connections destroyed while io's pending handlers are
  // torn down still reach the registry and the store.
  InMemoryStore store;
  mutable std::mutex conns_mu;
  std::condition_variable conns_cv;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> conns;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> rejected{0};

  std::mutex lifecycle_mu;
  bool started = false;
  bool stopped = false;
  uint16_t bound_port = 0;
  std::string bound_address;

  asio::io_context io;
  asio::strand<asio::io_context::executor_type> acceptor_strand{asio::make_strand(io)};
  tcp::acceptor acceptor{acceptor_strand};
  asio::steady_timer accept_backoff{acceptor_strand};
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;
};

namespace {

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpStoreServer::Impl& srv, tcp::socket socket)
      : srv_(srv),
        socket_(std::move(socket)),
        deadline_(socket_.get_executor()),
        wait_timer_(socket_.get_executor()) {
    error_code ec;
    auto ep = socket_.remote_endpoint(ec);
    peer_ = ec ? std::string("unknown peer") : ep.address().to_string() + ":" + std::to_string(ep.port());
  }

  ~Connection() {
    if (watch_id_ != 0) srv_.store.unwatch(watch_id_);
    srv_.unregister_connection(this);
  }

  void start() {
    asio::dispatch(socket_.get_executor(), [self = shared_from_this()] {
      self->safely([&] { self->begin_request(); });
    });
  }

  /// Thread-safe: closes on the connection's strand.
  void close() {
    asio::post(socket_.get_executor(), [self = shared_from_this()] { self->do_close(); });
  }

 private:
  enum class State { Reading, Handling, Writing, Lingering, Closed };

  template <typename F>
  void safely(F&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      spdlog::warn("rendezvous store: dropping connection from {}: {}", peer_, e.what());
      do_close();
    } catch (...) {
      spdlog::warn("rendezvous store: dropping connection from {}: unknown exception", peer_);
      do_close();
    }
  }

  // ---- reading a request -------------------------------------------------

  void begin_request() {
    if (state_ == State::Closed) return;
    state_ = State::Reading;
    req_ = http::RequestHead{};
    body_.clear();
    // The deadline covers the whole request: trickling bytes never extends it.
    deadline_.expires_after(srv_.opts.read_timeout);
    deadline_.async_wait([self = shared_from_this(), gen = ++deadline_gen_](const error_code& ec) {
      if (ec || gen != self->deadline_gen_ || self->state_ != State::Reading) return;
      spdlog::debug("rendezvous store: closing {}: no complete request within {} ms", self->peer_,
                    self->srv_.opts.read_timeout.count());
      self->do_close();
    });
    parse_or_read_head();
  }

  void parse_or_read_head() {
    std::size_t end = inbuf_.find("\r\n\r\n");
    if (end == std::string::npos) {
      // Reject garbage as soon as it is visible instead of waiting for a blank line.
      std::size_t scan_to = std::min(inbuf_.size(), srv_.opts.max_header_bytes);
      for (std::size_t i = 0; i < scan_to; ++i) {
        unsigned char c = static_cast<unsigned char>(inbuf_[i]);
        if ((c < 0x20 && c != '\r' && c != '\n' && c != '\t') || c == 0x7f) {
          return fail(400, "request head contains control bytes");
        }
      }
      std::size_t nl = inbuf_.find('\n');
      if (nl != std::string::npos) {
        http::RequestHead probe;
        std::string why;
        if (int status = http::parse_request_head(std::string_view(inbuf_).substr(0, nl), probe, why)) {
          return fail(status, why);
        }
      }
      if (inbuf_.size() > srv_.opts.max_header_bytes) {
        return fail(431, "request head exceeds " + std::to_string(srv_.opts.max_header_bytes) + " bytes");
      }
      socket_.async_read_some(asio::buffer(chunk_), [self = shared_from_this()](const error_code& ec, std::size_t n) {
        self->safely([&] {
          if (self->state_ != State::Reading) return;
          if (ec) return self->do_close();
          self->inbuf_.append(self->chunk_.data(), n);
          self->parse_or_read_head();
        });
      });
      return;
    }
    if (end + 4 > srv_.opts.max_header_bytes) {
      return fail(431, "request head exceeds " + std::to_string(srv_.opts.max_header_bytes) + " bytes");
    }
    std::string why;
    if (int status = http::parse_request_head(std::string_view(inbuf_).substr(0, end), req_, why)) {
      return fail(status, why);
    }
    inbuf_.erase(0, end + 4);

    // Authenticate before accepting a body from anyone.
    bool authorized = req_.secret ? constant_time_equal(*req_.secret, srv_.opts.secret)
                                  : srv_.opts.allow_unauthenticated;
    if (!authorized) {
      spdlog::warn("rendezvous store: rejected {} /{} from {}: {} {} header", req_.method, req_.path, peer_,
                   req_.secret ? "wrong" : "missing", http::kSecretHeader);
      return fail(401, std::string(req_.secret ? "wrong" : "missing") + " " + http::kSecretHeader + " header");
    }
    const std::size_t need = req_.content_length.value_or(0);
    if (need > srv_.opts.max_body_bytes) {
      return fail(413, "body of " + std::to_string(need) + " bytes exceeds the limit of " +
                           std::to_string(srv_.opts.max_body_bytes));
    }
    const std::size_t have = std::min(need, inbuf_.size());
    body_.assign(inbuf_, 0, have);
    inbuf_.erase(0, have);
    if (have == need) return handle_request();
    body_.resize(need);
    if (req_.expect_continue && req_.minor_version == 1) {
      // The client waits for this before sending the body (curl does for big bodies).
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      asio::async_write(socket_, asio::buffer(kContinue),
                        [self = shared_from_this(), have](const error_code& ec, std::size_t) {
                          self->safely([&] {
                            if (self->state_ != State::Reading) return;
                            if (ec) return self->do_close();
                            self->read_body(have);
                          });
                        });
      return;
    }
    read_body(have);
  }

  /// Reads the rest of the body into body_[have..]; still under the read deadline.
  void read_body(std::size_t have) {
    asio::async_read(socket_, asio::buffer(&body_[have], body_.size() - have),
                     [self = shared_from_this()](const error_code& ec, std::size_t) {
                       self->safely([&] {
                         if (self->state_ != State::Reading) return;
                         if (ec) return self->do_close();
                         self->handle_request();
                       });
                     });
  }

  // ---- handling ----------------------------------------------------------

  void handle_request() {
    state_ = State::Handling;
    ++deadline_gen_;
    deadline_.cancel();
    keep_alive_ = req_.keep_alive;
    const std::string& key = req_.path;
    if (key.empty()) return respond(400, "missing key: use /<scope>/<key>\n");
    const std::string& m = req_.method;
    try {
      if (m == "PUT") {
        srv_.store.set(key, Bytes(body_.begin(), body_.end()));
        return respond(200, "");
      }
      if (m == "GET") return handle_get(key);
      if (m == "DELETE") return respond(srv_.store.erase(key) ? 200 : 404, "");
      if (m == "POST") {
        auto add = http::query_param(req_.query, "add");
        std::optional<int64_t> delta;
        if (add) delta = parse_int64(*add);
        if (!delta) return respond(400, "POST needs ?add=<integer>\n");
        return respond(200, std::to_string(srv_.store.add(key, *delta)));
      }
    } catch (const InvalidArgument& e) {
      return respond(400, std::string(e.what()) + "\n");
    }
    respond(405, "method " + m + " not supported: use GET, PUT, DELETE or POST ?add=N\n");
  }

  static std::optional<int64_t> parse_int64(const std::string& s) {
    if (s.empty() || s.size() > 20) return std::nullopt;
    std::size_t i = s[0] == '-' ? 1 : 0;
    if (i == s.size()) return std::nullopt;
    for (std::size_t j = i; j < s.size(); ++j)
      if (s[j] < '0' || s[j] > '9') return std::nullopt;
    try {
      return std::stoll(s);
    } catch (...) {
      return std::nullopt;
    }
  }

  void handle_get(const std::string& key) {
    std::chrono::milliseconds wait{0};
    if (auto w = http::query_param(req_.query, "wait_ms")) {
      auto v = parse_int64(*w);
      if (!v || *v < 0) return respond(400, "wait_ms must be a non-negative integer\n");
      wait = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(*v), srv_.opts.max_wait);
    }
    if (wait.count() == 0) {
      auto v = srv_.store.try_get(key);
      if (!v) return respond(404, "");
      return respond(200, std::string(v->begin(), v->end()));
    }
    wait_key_ = key;
    const uint64_t gen = ++wait_gen_;
    wait_timer_.expires_after(wait);
    wait_timer_.async_wait([self = shared_from_this(), gen](const error_code& ec) {
      self->safely([&] {
        if (ec || gen != self->wait_gen_ || self->state_ != State::Handling) return;
        self->end_wait();
        self->respond(404, "");
      });
    });
    poll_key();
  }

  /// Answers the long-poll if the key exists, else (re-)arms a watcher.
  void poll_key() {
    std::weak_ptr<Connection> weak = shared_from_this();
    auto exec = socket_.get_executor();
    const uint64_t gen = wait_gen_;
    InMemoryStore::WatchId id = 0;
    auto value = srv_.store.try_get_or_watch(
        wait_key_,
        [weak, exec, gen] {
          asio::post(exec, [weak, gen] {
            if (auto self = weak.lock()) {
              self->safely([&] {
                if (gen != self->wait_gen_ || self->state_ != State::Handling) return;
                self->watch_id_ = 0;
                self->poll_key();  // the key may have been erased again meanwhile
              });
            }
          });
        },
        id);
    watch_id_ = id;
    if (value) {
      end_wait();
      respond(200, std::string(value->begin(), value->end()));
    }
  }

  void end_wait() {
    ++wait_gen_;
    wait_timer_.cancel();
    if (watch_id_ != 0) {
      srv_.store.unwatch(watch_id_);
      watch_id_ = 0;
    }
  }

  // ---- writing -----------------------------------------------------------

  /// Error before the request was understood: answer, then close.
  void fail(int status, const std::string& why) {
    spdlog::debug("rendezvous store: {} from {}: {}", status, peer_, why);
    keep_alive_ = false;
    respond(status, why + "\n");
  }

  void respond(int status, std::string body) {
    if (state_ == State::Closed) return;
    state_ = State::Writing;
    ++deadline_gen_;
    deadline_.cancel();
    // Requests we could not read completely leave the stream out of sync.
    const bool close_after = !keep_alive_ || srv_.stopping.load();
    out_head_ = "HTTP/1.1 " + std::to_string(status) + " " + http::reason_phrase(status) +
                "\r\nContent-Length: " + std::to_string(body.size()) +
                "\r\nContent-Type: application/octet-stream\r\n" +
                (close_after ? "Connection: close\r\n" : "") + "\r\n";
    out_body_ = std::move(body);
    std::array<asio::const_buffer, 2> bufs{asio::buffer(out_head_), asio::buffer(out_body_)};
    // A client that stops reading is bounded by the same deadline as one that stops writing.
    deadline_.expires_after(srv_.opts.read_timeout);
    deadline_.async_wait([self = shared_from_this(), gen = ++deadline_gen_](const error_code& ec) {
      if (ec || gen != self->deadline_gen_ || self->state_ != State::Writing) return;
      self->do_close();
    });
    asio::async_write(socket_, bufs, [self = shared_from_this(), close_after](const error_code& ec, std::size_t) {
      self->safely([&] {
        if (self->state_ != State::Writing) return;
        if (ec) return self->do_close();
        self->out_body_.clear();
        self->out_body_.shrink_to_fit();
        if (close_after) return self->linger_close();
        self->keep_alive_ = true;
        self->begin_request();
      });
    });
  }

  void linger_close() {
    state_ = State::Lingering;
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return do_close();
    deadline_.expires_after(kLingerTime);
    deadline_.async_wait([self = shared_from_this(), gen = ++deadline_gen_](const error_code& e) {
      if (e || gen != self->deadline_gen_) return;
      self->do_close();
    });
    drain();
  }

  void drain() {
    socket_.async_read_some(asio::buffer(chunk_), [self = shared_from_this()](const error_code& ec, std::size_t n) {
      if (self->state_ != State::Lingering) return;
      self->drained_ += n;
      if (ec || self->drained_ > kLingerBytes) return self->do_close();
      self->drain();
    });
  }

  void do_close() {
    if (state_ == State::Closed) return;
    state_ = State::Closed;
    ++wait_gen_;
    ++deadline_gen_;
    if (watch_id_ != 0) {
      srv_.store.unwatch(watch_id_);
      watch_id_ = 0;
    }
    error_code ec;
    deadline_.cancel();
    wait_timer_.cancel();
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    inbuf_.clear();
    inbuf_.shrink_to_fit();
    body_.clear();
    body_.shrink_to_fit();
  }

  HttpStoreServer::Impl& srv_;
  tcp::socket socket_;
  asio::steady_timer deadline_;
  asio::steady_timer wait_timer_;
  std::string peer_;
  State state_ = State::Reading;
  std::array<char, 4096> chunk_{};  // heads only: bodies are read in place
  std::string inbuf_;
  http::RequestHead req_;
  std::string body_;
  bool keep_alive_ = true;
  std::string out_head_;
  std::string out_body_;
  uint64_t deadline_gen_ = 0;
  uint64_t wait_gen_ = 0;
  std::string wait_key_;
  InMemoryStore::WatchId watch_id_ = 0;
  std::size_t drained_ = 0;
};

}  // namespace

// ---- server lifecycle -----------------------------------------------------

void HttpStoreServer::Impl::start() {
  std::lock_guard<std::mutex> lock(lifecycle_mu);
  if (started) throw InvalidArgument("HttpStoreServer::start() called twice");
  const std::string where = opts.bind_address + ":" + std::to_string(opts.port);
  tcp::endpoint endpoint;
  error_code ec;
  auto addr = asio::ip::make_address(opts.bind_address, ec);
  if (!ec) {
    endpoint = tcp::endpoint(addr, opts.port);
  } else {
    tcp::resolver resolver(io);
    auto results = resolver.resolve(opts.bind_address, std::to_string(opts.port), ec);
    if (ec || results.empty()) {
      throw IoError(fmt::format("rendezvous store cannot listen on {}: cannot resolve '{}': {}", where,
                                opts.bind_address, ec ? ec.message() : "no addresses"));
    }
    endpoint = results.begin()->endpoint();
  }
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    error_code ignored;
    acceptor.close(ignored);
    throw IoError(fmt::format("rendezvous store cannot listen on {}: {}", where, ec.message()));
  }
  auto local = acceptor.local_endpoint();
  bound_port = local.port();
  bound_address = local.address().to_string();
  started = true;
  work.emplace(io.get_executor());
  asio::post(acceptor_strand, [this] { do_accept(); });
  for (int i = 0; i < opts.threads; ++i) {
    threads.emplace_back([this] {
      for (;;) {
        try {
          io.run();
          return;
        } catch (const std::exception& e) {
          spdlog::error("rendezvous store: event loop error (continuing): {}", e.what());
        }
      }
    });
  }
  spdlog::info("rendezvous store listening on {}:{} ({})", bound_address, bound_port,
               opts.allow_unauthenticated ? "requests without the job secret allowed: --insecure-store"
                                          : "job secret required");
}

void HttpStoreServer::Impl::do_accept() {
  if (stopping) return;
  acceptor.async_accept(asio::make_strand(io), [this](const error_code& ec, tcp::socket socket) {
    if (stopping || ec == asio::error::operation_aborted) return;
    if (ec) {
      // EMFILE and friends: back off instead of spinning on the listener.
      spdlog::warn("rendezvous store: accept failed: {}", ec.message());
      accept_backoff.expires_after(std::chrono::milliseconds(100));
      accept_backoff.async_wait([this](const error_code& e) {
        if (!e) do_accept();
      });
      return;
    }
    try {
      error_code ignored;
      socket.set_option(tcp::no_delay(true), ignored);
      auto conn = std::make_shared<Connection>(*this, std::move(socket));
      if (register_connection(conn)) {
        conn->start();
      } else {
        uint64_t n = ++rejected;
        if (n == 1 || n % 1000 == 0) {
          spdlog::warn("rendezvous store: {} connection(s) refused: more than {} open", n, opts.max_connections);
        }
        // conn's destructor closes the socket.
      }
    } catch (const std::exception& e) {
      spdlog::warn("rendezvous store: cannot set up a connection: {}", e.what());
    }
    do_accept();
  });
}

bool HttpStoreServer::Impl::register_connection(const std::shared_ptr<Connection>& c) {
  std::lock_guard<std::mutex> lock(conns_mu);
  if (stopping || conns.size() >= opts.max_connections) return false;
  conns.emplace(c.get(), c);
  return true;
}

void HttpStoreServer::Impl::unregister_connection(Connection* c) {
  std::lock_guard<std::mutex> lock(conns_mu);
  if (conns.erase(c) > 0 && conns.empty()) conns_cv.notify_all();
}

void HttpStoreServer::Impl::stop() {
  std::lock_guard<std::mutex> lock(lifecycle_mu);
  if (!started || stopped) return;
  stopped = true;
  stopping = true;
  // On the acceptor's strand, so no accept handler registers a connection
  // after the snapshot below.
  asio::post(acceptor_strand, [this] {
    error_code ignored;
    acceptor.close(ignored);
    accept_backoff.cancel();
    std::vector<std::shared_ptr<Connection>> live;
    {
      std::lock_guard<std::mutex> l(conns_mu);
      for (auto& [ptr, weak] : conns)
        if (auto c = weak.lock()) live.push_back(std::move(c));
    }
    for (auto& c : live) c->close();
  });
  work.reset();
  {
    std::unique_lock<std::mutex> l(conns_mu);
    conns_cv.wait_for(l, std::chrono::seconds(2), [this] { return conns.empty(); });
  }
  io.stop();
  for (auto& t : threads)
    if (t.joinable()) t.join();
  threads.clear();
  spdlog::debug("rendezvous store on {}:{} stopped", bound_address, bound_port);
}

// ---- public API -------------------------------------------------------------

HttpStoreServer::HttpStoreServer(ServerOptions options) {
  if (options.secret.empty() && !options.allow_unauthenticated) {
    throw InvalidArgument("rendezvous store: a job secret is required (or allow_unauthenticated, --insecure-store)");
  }
  if (options.threads < 1) throw InvalidArgument("rendezvous store: threads must be >= 1");
  if (options.max_connections < 1) throw InvalidArgument("rendezvous store: max_connections must be >= 1");
  if (options.max_header_bytes < 256) throw InvalidArgument("rendezvous store: max_header_bytes must be >= 256");
  if (options.read_timeout.count() < 1) throw InvalidArgument("rendezvous store: read_timeout must be positive");
  impl_ = std::make_unique<Impl>(std::move(options));
}

HttpStoreServer::~HttpStoreServer() {
  try {
    stop();
  } catch (const std::exception& e) {
    spdlog::error("rendezvous store: error while stopping: {}", e.what());
  }
}

void HttpStoreServer::start() { impl_->start(); }
void HttpStoreServer::stop() { impl_->stop(); }
uint16_t HttpStoreServer::port() const { return impl_->bound_port; }
std::string HttpStoreServer::address() const { return impl_->bound_address; }
InMemoryStore& HttpStoreServer::store() { return impl_->store; }

std::size_t HttpStoreServer::connection_count() const {
  std::lock_guard<std::mutex> lock(impl_->conns_mu);
  return impl_->conns.size();
}

}  // namespace hvd::store
