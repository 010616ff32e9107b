// The HTTP store server: one Boost.Asio event loop, one Connection object per
// client socket, each on its own strand; Boost.Beast parses the requests and
// writes the responses. Long-polls are answered by a timer plus a one-shot
// watcher on the InMemoryStore, never by a parked thread. Errors inside
// handlers are values (error_code) or caught exceptions that close only the
// connection concerned; nothing escapes into io_context::run().
#include "http_wire.h"
#include "hvd/common/error.h"
#include "hvd/common/secret.h"
#include "hvd/store/http_store.h"
#include "hvd/common/log_limiter.h"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <spdlog/spdlog.h>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <limits>
#include <list>
#include <optional>
#include <thread>
#include <unordered_map>

namespace hvd::store {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using boost::system::error_code;

namespace {

class Connection;

/// After an error response the connection is half-closed and what the client
/// still sends is drained (bounded) so that the kernel does not answer it with
/// a reset that could destroy the error response in flight.
constexpr std::chrono::milliseconds kLingerTime{500};
constexpr std::size_t kLingerBytes = 4u << 20;
/// Read sizes: small while a head arrives (idle connections hold one such
/// buffer), larger for bodies.
constexpr std::size_t kHeadChunk = 4096;
constexpr std::size_t kBodyChunk = 64u << 10;

}  // namespace

class HttpStoreServer::Impl {
 public:
  explicit Impl(ServerOptions o)
      : opts(std::move(o)),
        rejected_log(opts.log_period),
        evicted_log(opts.log_period),
        refused_log(opts.log_period),
        accept_log(opts.log_period) {}

  void start();
  void stop();
  void do_accept();
  /// Takes over an accepted descriptor (SOCK_CLOEXEC | SOCK_NONBLOCK).
  void adopt(int fd);
  /// accept4 failed with EMFILE/ENFILE: the oldest stranger makes room.
  void out_of_descriptors(int err);
  void accept_later(std::chrono::milliseconds delay);
  /// Registers `c` in the pending pool unless the server stops (false: the
  /// caller drops the socket). Connections to close to make room for it are
  /// appended to `victims` (closed by the caller, outside the lock).
  bool register_connection(const std::shared_ptr<Connection>& c, std::vector<std::shared_ptr<Connection>>& victims);
  /// `c` authenticated: it leaves the pending pool. False when
  /// max_connections authenticated connections are open already.
  bool promote(Connection* c);
  void unregister_connection(Connection* c);
  /// Takes the oldest pending connection (from `source`, or any when
  /// empty) out of the pool; requires conns_mu.
  std::shared_ptr<Connection> take_oldest_pending_locked(const std::string& source);
  /// Logs the counts of suppressed warnings (force: whatever is counted).
  void flush_logs(bool force);
  void arm_log_timer();

  ServerOptions opts;
  // Declared before io: connections destroyed while io's pending handlers are
  // torn down still reach the registry and the store.
  InMemoryStore store;
  mutable std::mutex conns_mu;
  std::condition_variable conns_cv;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> conns;
  /// Not yet authenticated, oldest first (under conns_mu).
  std::list<Connection*> pending;
  std::unordered_map<std::string, std::size_t> pending_per_source;
  std::size_t authenticated = 0;
  /// max_pending, lowered at start() to fit the descriptors left.
  std::size_t pending_cap = 0;
  std::atomic<bool> stopping{false};
  /// Warnings strangers can trigger at will: once, then a count per period.
  LogLimiter rejected_log;
  LogLimiter evicted_log;
  LogLimiter refused_log;
  LogLimiter accept_log;

  std::mutex lifecycle_mu;
  bool started = false;
  bool stopped = false;
  uint16_t bound_port = 0;
  std::string bound_address;

  asio::io_context io;
  asio::strand<asio::io_context::executor_type> acceptor_strand{asio::make_strand(io)};
  tcp::acceptor acceptor{acceptor_strand};
  asio::steady_timer accept_backoff{acceptor_strand};
  asio::steady_timer log_timer{acceptor_strand};
  tcp protocol = tcp::v4();
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
        wait_timer_(socket_.get_executor()),
        pending_until_(std::chrono::steady_clock::now() + std::min(srv.opts.pending_timeout, srv.opts.read_timeout)) {
    error_code ec;
    auto ep = socket_.remote_endpoint(ec);
    source = ec ? std::string("unknown") : ep.address().to_string();
    peer_ = ec ? std::string("unknown peer") : source + ":" + std::to_string(ep.port());
  }

  const std::string& peer() const { return peer_; }

  // The pending pool's bookkeeping, guarded by the server's conns_mu.
  std::string source;
  std::list<Connection*>::iterator pool_pos;
  bool in_pool = false;
  bool counted_authenticated = false;

  ~Connection() {
    if (watch_id_ != 0) srv_.store.unwatch(watch_id_);
    srv_.unregister_connection(this);
  }

  void start() {
    asio::dispatch(socket_.get_executor(),
                   [self = shared_from_this()] { self->safely([&] { self->begin_request(); }); });
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
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(
        std::min<std::size_t>(srv_.opts.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
    // Checked against max_body_bytes only after authentication (accept_head).
    parser_->body_limit(boost::none);
    request_line_checked_ = false;
    // The deadline covers the whole request: trickling bytes never extends
    // it. A connection that has not authenticated yet has less time, counted
    // from accept: the job's clients send their first request at once.
    auto until = std::chrono::steady_clock::now() + srv_.opts.read_timeout;
    if (!authenticated_) until = std::min(until, pending_until_);
    arm_read_deadline(until);
    parse();
  }

  void arm_read_deadline(std::chrono::steady_clock::time_point until) {
    deadline_.expires_at(until);
    deadline_.async_wait([self = shared_from_this(), gen = ++deadline_gen_](const error_code& ec) {
      if (ec || gen != self->deadline_gen_ || self->state_ != State::Reading) return;
      if (self->authenticated_) {
        spdlog::debug("rendezvous store: closing {}: no complete request within {} ms", self->peer_,
                      self->srv_.opts.read_timeout.count());
      } else {
        spdlog::debug("rendezvous store: closing {}: no authenticated request within {} ms of connecting", self->peer_,
                      std::min(self->srv_.opts.pending_timeout, self->srv_.opts.read_timeout).count());
      }
      self->do_close();
    });
  }

  /// Feeds what has arrived to the parser; reads more while it needs more.
  void parse() {
    if (!parser_->is_header_done()) {
      std::string why;
      if (int status = screen_head(why)) return fail(status, why);
      error_code ec;
      inbuf_.consume(parser_->put(inbuf_.data(), ec));
      if (ec == bhttp::error::need_more || (!ec && !parser_->is_header_done())) return read_more();
      if (ec) return fail(status_for(ec), describe(ec));
      if (!accept_head()) return;
      const std::size_t need = static_cast<std::size_t>(parser_->content_length().value_or(0));
      if (expect_continue_ && !parser_->is_done() && inbuf_.size() < need) {
        // The client waits for this before sending the body (curl does for big bodies).
        return bhttp::async_write(socket_, interim_, [self = shared_from_this()](const error_code& e, std::size_t) {
          self->safely([&] {
            if (self->state_ != State::Reading) return;
            if (e) return self->do_close();
            self->parse();
          });
        });
      }
    }
    // The body, still under the read deadline.
    while (!parser_->is_done()) {
      if (inbuf_.size() == 0) return read_more();
      error_code ec;
      const std::size_t used = parser_->put(inbuf_.data(), ec);
      inbuf_.consume(used);
      if (ec == bhttp::error::need_more || (!ec && used == 0)) return read_more();
      if (ec) return fail(400, describe(ec));
    }
    handle_request();
  }

  void read_more() {
    const std::size_t chunk = parser_->is_header_done() ? kBodyChunk : kHeadChunk;
    socket_.async_read_some(inbuf_.prepare(chunk), [self = shared_from_this()](const error_code& ec, std::size_t n) {
      self->safely([&] {
        if (self->state_ != State::Reading) return;
        if (ec) return self->do_close();
        self->inbuf_.commit(n);
        self->parse();
      });
    });
  }

  /// Beast parses nothing before the blank line that ends the head, so
  /// garbage is looked for here as it arrives and answered at once rather
  /// than after read_timeout: control bytes anywhere in the head, and the
  /// request line as soon as its '\n' is in. 0 or the status to answer.
  int screen_head(std::string& why) {
    const std::string_view buffered(static_cast<const char*>(inbuf_.data().data()), inbuf_.size());
    const std::size_t blank = buffered.find("\r\n\r\n");  // the head ends with the first CRLF of it
    const std::string_view head =
        buffered.substr(0, std::min(blank == std::string_view::npos ? blank : blank + 2, srv_.opts.max_header_bytes));
    for (unsigned char c : head) {
      if ((c < 0x20 && c != '\r' && c != '\n' && c != '\t') || c == 0x7f) {
        why = "request head contains control bytes";
        return 400;
      }
    }
    const std::size_t nl = head.find('\n');
    if (request_line_checked_ || nl == std::string_view::npos) return 0;
    request_line_checked_ = true;
    return check_request_line(head.substr(0, nl + 1), why);
  }

  /// Parses the request line (with its "\r\n") alone, as a request without
  /// header fields.
  int check_request_line(std::string_view line, std::string& why) {
    if (line.size() < 2 || line.substr(line.size() - 2) != "\r\n") {
      why = "request line must end with CRLF";
      return 400;
    }
    bhttp::request_parser<bhttp::empty_body> probe;
    const std::string text = std::string(line) + "\r\n";
    error_code ec;
    probe.put(asio::buffer(text), ec);
    if (ec == bhttp::error::bad_version) {
      // Beast says so both for "HTTP/2.0" (505) and for a garbled version (400).
      const std::string_view v = line.substr(line.rfind(' ') + 1, 8);
      const bool well_formed = line.size() >= 10 && line.rfind(' ') + 11 == line.size() && v.substr(0, 5) == "HTTP/" &&
                               std::isdigit(static_cast<unsigned char>(v[5])) && v[6] == '.' &&
                               std::isdigit(static_cast<unsigned char>(v[7]));
      why = well_formed ? "unsupported HTTP version" : describe(ec);
      return well_formed ? 505 : 400;
    }
    if (ec) {
      why = describe(ec);
      return status_for(ec);
    }
    return http::parse_target(probe.get().target(), why) ? 0 : 400;
  }

  static int status_for(const error_code& ec) {
    if (ec == bhttp::error::header_limit) return 431;
    if (ec == bhttp::error::bad_transfer_encoding) return 501;
    return 400;
  }

  std::string describe(const error_code& ec) const {
    if (ec == bhttp::error::header_limit) {
      return "request head exceeds " + std::to_string(srv_.opts.max_header_bytes) + " bytes";
    }
    if (ec == bhttp::error::bad_transfer_encoding) return "Transfer-Encoding is not supported; send Content-Length";
    return "malformed request: " + ec.message();
  }

  /// The head is complete: refuses what the protocol does not allow and
  /// unauthenticated requests, before any body is read. False when it has
  /// answered (and is closing).
  bool accept_head() {
    const auto& req = parser_->get();
    if (req.find(bhttp::field::transfer_encoding) != req.end()) {
      fail(501, "Transfer-Encoding is not supported; send Content-Length");
      return false;
    }
    std::string why;
    auto target = http::parse_target(req.target(), why);
    if (!target) {
      fail(400, why);
      return false;
    }
    target_ = std::move(*target);
    // Authenticate before accepting a body from anyone.
    auto secret = req.find(http::kSecretHeader);
    const bool has_secret = secret != req.end();
    bool authorized = has_secret ? constant_time_equal(std::string(secret->value()), srv_.opts.secret)
                                 : srv_.opts.allow_unauthenticated;
    if (!authorized) {
      // Anyone who reaches the port can trigger this at will: one line, then
      // a count per period (flush_logs).
      if (srv_.rejected_log.admit(std::chrono::steady_clock::now())) {
        spdlog::warn(
            "rendezvous store: rejected {} /{} from {}: {} {} header (further rejections are counted and reported "
            "every {})",
            std::string(req.method_string()), target_.key, peer_, has_secret ? "wrong" : "missing", http::kSecretHeader,
            LogLimiter::window_text(srv_.opts.log_period));
      }
      fail(401, std::string(has_secret ? "wrong" : "missing") + " " + http::kSecretHeader + " header");
      return false;
    }
    if (!authenticated_) {
      if (!srv_.promote(this)) {
        if (srv_.refused_log.admit(std::chrono::steady_clock::now())) {
          spdlog::warn("rendezvous store: refused a request from {}: {} authenticated connections are open already",
                       peer_, srv_.opts.max_connections);
        }
        fail(503, "too many connections: " + std::to_string(srv_.opts.max_connections) + " are open already");
        return false;
      }
      authenticated_ = true;
      // The rest of this request (its body) has the full read_timeout.
      arm_read_deadline(std::chrono::steady_clock::now() + srv_.opts.read_timeout);
    }
    const std::uint64_t need = parser_->content_length().value_or(0);
    if (need > srv_.opts.max_body_bytes) {
      fail(413, "body of " + std::to_string(need) + " bytes exceeds the limit of " +
                    std::to_string(srv_.opts.max_body_bytes));
      return false;
    }
    parser_->body_limit(srv_.opts.max_body_bytes);
    expect_continue_ = req.version() == 11 && beast::iequals(req[bhttp::field::expect], "100-continue");
    return true;
  }

  // ---- handling ----------------------------------------------------------

  void handle_request() {
    state_ = State::Handling;
    ++deadline_gen_;
    deadline_.cancel();
    auto& req = parser_->get();
    keep_alive_ = req.keep_alive();
    const std::string& key = target_.key;
    if (key.empty()) return respond(400, "missing key: use /<scope>/<key>\n");
    try {
      switch (req.method()) {
        case bhttp::verb::put:
          srv_.store.set(key, Bytes(req.body().begin(), req.body().end()));
          return respond(200, "");
        case bhttp::verb::get: return handle_get(key);
        case bhttp::verb::delete_: return respond(srv_.store.erase(key) ? 200 : 404, "");
        case bhttp::verb::post: {
          auto add = http::query_param(target_.query, "add");
          std::optional<int64_t> delta;
          if (add) delta = parse_int64(*add);
          if (!delta) return respond(400, "POST needs ?add=<integer>\n");
          return respond(200, std::to_string(srv_.store.add(key, *delta)));
        }
        default: break;
      }
    } catch (const InvalidArgument& e) {
      return respond(400, std::string(e.what()) + "\n");
    }
    respond(405,
            "method " + std::string(req.method_string()) + " not supported: use GET, PUT, DELETE or POST ?add=N\n");
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
    if (auto w = http::query_param(target_.query, "wait_ms")) {
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
    res_ = {};
    res_.version(11);
    res_.result(static_cast<unsigned>(status));
    res_.set(bhttp::field::content_type, "application/octet-stream");
    res_.keep_alive(!close_after);
    res_.body() = std::move(body);
    res_.prepare_payload();
    // A client that stops reading is bounded by the same deadline as one that stops writing.
    deadline_.expires_after(srv_.opts.read_timeout);
    deadline_.async_wait([self = shared_from_this(), gen = ++deadline_gen_](const error_code& ec) {
      if (ec || gen != self->deadline_gen_ || self->state_ != State::Writing) return;
      self->do_close();
    });
    bhttp::async_write(socket_, res_, [self = shared_from_this(), close_after](const error_code& ec, std::size_t) {
      self->safely([&] {
        if (self->state_ != State::Writing) return;
        if (ec) return self->do_close();
        self->res_ = {};
        if (close_after) return self->linger_close();
        self->keep_alive_ = true;
        if (self->inbuf_.capacity() > 4 * kHeadChunk && self->inbuf_.size() == 0) self->inbuf_.shrink_to_fit();
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
    // parser_, inbuf_ and res_ stay as they are: a completed read or write
    // whose handler is still queued refers to them. They go with the
    // Connection, once the last handler has let go of it.
  }

  HttpStoreServer::Impl& srv_;
  tcp::socket socket_;
  asio::steady_timer deadline_;
  asio::steady_timer wait_timer_;
  std::string peer_;
  /// Until this passes, a connection that has not authenticated must have
  /// delivered its first authenticated head (pending_timeout from accept).
  std::chrono::steady_clock::time_point pending_until_;
  /// Strand-local: this connection has made an authenticated request.
  bool authenticated_ = false;
  State state_ = State::Reading;
  /// Bytes received and not yet parsed (pipelined requests wait here).
  beast::flat_buffer inbuf_;
  /// One per request: Beast parsers cannot be reused.
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bool request_line_checked_ = false;
  bool expect_continue_ = false;
  http::Target target_;
  bool keep_alive_ = true;
  bhttp::response<bhttp::string_body> res_;
  const bhttp::response<bhttp::empty_body> interim_{bhttp::status::continue_, 11};
  std::array<char, 4096> chunk_{};  // drained bytes after an error answer
  uint64_t deadline_gen_ = 0;
  uint64_t wait_gen_ = 0;
  std::string wait_key_;
  InMemoryStore::WatchId watch_id_ = 0;
  std::size_t drained_ = 0;
};

}  // namespace

// ---- server lifecycle -----------------------------------------------------

namespace {

/// Descriptors open in this process now (for the pending pool's budget).
std::size_t open_descriptor_count() {
  DIR* d = ::opendir("/proc/self/fd");
  if (d == nullptr) return 64;
  std::size_t n = 0;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(d);
  return n > 0 ? n - 1 : 0;  // not the directory's own descriptor
}

/// max_pending, lowered so that strangers never hold more than a quarter of
/// the descriptors this process has left (hvdrun needs the rest for its
/// agents, pipes and the workers' own store connections).
std::size_t pending_budget(std::size_t max_pending) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return max_pending;
  const std::size_t in_use = open_descriptor_count();
  const std::size_t left = rl.rlim_cur > in_use ? static_cast<std::size_t>(rl.rlim_cur) - in_use : 0;
  return std::min(max_pending, std::max<std::size_t>(16, left / 4));
}

}  // namespace

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
  // Our own socket: Asio (1.81) creates and accepts sockets without
  // close-on-exec, so every child hvdrun starts would inherit them.
  protocol = endpoint.protocol();
  const int listen_fd = ::socket(protocol.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, IPPROTO_TCP);
  if (listen_fd < 0) {
    throw IoError(fmt::format("rendezvous store cannot listen on {}: socket: {}", where, std::strerror(errno)));
  }
  acceptor.assign(protocol, listen_fd, ec);
  if (ec) ::close(listen_fd);
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
  pending_cap = pending_budget(opts.max_pending);
  started = true;
  work.emplace(io.get_executor());
  asio::post(acceptor_strand, [this] {
    do_accept();
    arm_log_timer();
  });
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
  spdlog::info(
      "rendezvous store listening on {}:{} ({})", bound_address, bound_port,
      opts.allow_unauthenticated ? "requests without the job secret allowed: --insecure-store" : "job secret required");
  if (pending_cap < opts.max_pending) {
    spdlog::debug("rendezvous store: at most {} unauthenticated connections (RLIMIT_NOFILE leaves few descriptors)",
                  pending_cap);
  }
}

void HttpStoreServer::Impl::do_accept() {
  if (stopping) return;
  acceptor.async_wait(tcp::acceptor::wait_read, [this](const error_code& ec) {
    if (stopping || ec == asio::error::operation_aborted) return;
    if (ec) {
      if (accept_log.admit(std::chrono::steady_clock::now())) {
        spdlog::warn("rendezvous store: waiting for connections failed: {}", ec.message());
      }
      return accept_later(std::chrono::milliseconds(100));
    }
    // accept4: close-on-exec from the start, never a window in which a
    // concurrent fork could inherit the socket.
    for (int i = 0; i < 64 && !stopping; ++i) {
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      const int fd =
          ::accept4(acceptor.native_handle(), reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd >= 0) {
        adopt(fd);
        continue;
      }
      const int err = errno;
      if (err == EAGAIN || err == EWOULDBLOCK) break;
      if (err == EINTR || err == ECONNABORTED || err == EPROTO) continue;
      if (err == EMFILE || err == ENFILE) return out_of_descriptors(err);
      if (accept_log.admit(std::chrono::steady_clock::now())) {
        spdlog::warn("rendezvous store: accept failed: {}", std::strerror(err));
      }
      return accept_later(std::chrono::milliseconds(100));
    }
    do_accept();
  });
}

void HttpStoreServer::Impl::accept_later(std::chrono::milliseconds delay) {
  accept_backoff.expires_after(delay);
  accept_backoff.async_wait([this](const error_code& e) {
    if (!e) do_accept();
  });
}

void HttpStoreServer::Impl::out_of_descriptors(int err) {
  std::shared_ptr<Connection> victim;
  {
    std::lock_guard<std::mutex> l(conns_mu);
    victim = take_oldest_pending_locked("");
  }
  if (victim) {
    // The stranger that has waited longest gives its descriptor to the
    // connection waiting in the backlog (perhaps a worker).
    if (evicted_log.admit(std::chrono::steady_clock::now())) {
      spdlog::warn(
          "rendezvous store: out of file descriptors ({}): closed the oldest unauthenticated connection ({}) to "
          "accept a new one",
          std::strerror(err), victim->peer());
    }
    victim->close();
    return accept_later(std::chrono::milliseconds(2));
  }
  // Nothing of ours to give up: the connection waits in the backlog.
  if (accept_log.admit(std::chrono::steady_clock::now())) {
    spdlog::warn("rendezvous store: accept failed: {} (retrying every 100 ms)", std::strerror(err));
  }
  accept_later(std::chrono::milliseconds(100));
}

void HttpStoreServer::Impl::adopt(int fd) {
  std::shared_ptr<Connection> conn;
  try {
    error_code ec;
    tcp::socket socket(asio::make_strand(io));
    socket.assign(protocol, fd, ec);
    if (ec) {
      ::close(fd);
      return;
    }
    socket.set_option(tcp::no_delay(true), ec);
    conn = std::make_shared<Connection>(*this, std::move(socket));
  } catch (const std::exception& e) {
    spdlog::warn("rendezvous store: cannot set up a connection: {}", e.what());
    return;
  }
  std::vector<std::shared_ptr<Connection>> victims;
  if (register_connection(conn, victims)) conn->start();
  // else conn's destructor closes the socket.
  for (auto& v : victims) {
    if (evicted_log.admit(std::chrono::steady_clock::now())) {
      spdlog::warn(
          "rendezvous store: closed the oldest unauthenticated connection ({}) to make room: at most {} connections "
          "without the job secret, {} per source address (further ones are counted and reported every {})",
          v->peer(), pending_cap, opts.max_pending_per_source, LogLimiter::window_text(opts.log_period));
    }
    v->close();
  }
}

std::shared_ptr<Connection> HttpStoreServer::Impl::take_oldest_pending_locked(const std::string& source) {
  for (auto it = pending.begin(); it != pending.end(); ++it) {
    Connection* c = *it;
    if (!source.empty() && c->source != source) continue;
    pending.erase(it);
    c->in_pool = false;
    auto n = pending_per_source.find(c->source);
    if (n != pending_per_source.end() && --n->second == 0) pending_per_source.erase(n);
    auto found = conns.find(c);
    return found == conns.end() ? nullptr : found->second.lock();
  }
  return nullptr;
}

bool HttpStoreServer::Impl::register_connection(const std::shared_ptr<Connection>& c,
                                                std::vector<std::shared_ptr<Connection>>& victims) {
  std::lock_guard<std::mutex> lock(conns_mu);
  if (stopping) return false;
  auto per_source = pending_per_source.find(c->source);
  if (per_source != pending_per_source.end() && per_source->second >= opts.max_pending_per_source) {
    if (auto v = take_oldest_pending_locked(c->source)) victims.push_back(std::move(v));
  }
  while (!pending.empty() && pending.size() >= pending_cap) {
    if (auto v = take_oldest_pending_locked("")) victims.push_back(std::move(v));
  }
  c->pool_pos = pending.insert(pending.end(), c.get());
  c->in_pool = true;
  ++pending_per_source[c->source];
  conns.emplace(c.get(), c);
  return true;
}

bool HttpStoreServer::Impl::promote(Connection* c) {
  std::lock_guard<std::mutex> lock(conns_mu);
  if (authenticated >= opts.max_connections) return false;
  if (c->in_pool) {
    pending.erase(c->pool_pos);
    c->in_pool = false;
    auto n = pending_per_source.find(c->source);
    if (n != pending_per_source.end() && --n->second == 0) pending_per_source.erase(n);
  }
  c->counted_authenticated = true;
  ++authenticated;
  return true;
}

void HttpStoreServer::Impl::unregister_connection(Connection* c) {
  std::lock_guard<std::mutex> lock(conns_mu);
  if (c->in_pool) {
    pending.erase(c->pool_pos);
    c->in_pool = false;
    auto n = pending_per_source.find(c->source);
    if (n != pending_per_source.end() && --n->second == 0) pending_per_source.erase(n);
  }
  if (c->counted_authenticated) {
    c->counted_authenticated = false;
    --authenticated;
  }
  if (conns.erase(c) > 0 && conns.empty()) conns_cv.notify_all();
}

void HttpStoreServer::Impl::flush_logs(bool force) {
  const auto now = std::chrono::steady_clock::now();
  if (auto s = rejected_log.take(now, force)) {
    spdlog::warn("rendezvous store: {} more unauthenticated requests rejected in the last {}", s->suppressed,
                 LogLimiter::window_text(s->window));
  }
  if (auto s = evicted_log.take(now, force)) {
    spdlog::warn("rendezvous store: {} more unauthenticated connections closed to make room in the last {}",
                 s->suppressed, LogLimiter::window_text(s->window));
  }
  if (auto s = refused_log.take(now, force)) {
    spdlog::warn("rendezvous store: {} more requests refused (too many connections) in the last {}", s->suppressed,
                 LogLimiter::window_text(s->window));
  }
  if (auto s = accept_log.take(now, force)) {
    spdlog::warn("rendezvous store: {} more failed accepts in the last {}", s->suppressed,
                 LogLimiter::window_text(s->window));
  }
}

void HttpStoreServer::Impl::arm_log_timer() {
  if (stopping) return;
  log_timer.expires_after(opts.log_period);
  log_timer.async_wait([this](const error_code& ec) {
    if (ec || stopping) return;
    flush_logs(false);
    arm_log_timer();
  });
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
    log_timer.cancel();
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
  // io.stop() may have won the race against the close posted above: the
  // listening socket must not outlive stop() (no thread touches it now).
  error_code ignored;
  acceptor.close(ignored);
  flush_logs(true);
  spdlog::debug("rendezvous store on {}:{} stopped", bound_address, bound_port);
}

// ---- public API -------------------------------------------------------------

HttpStoreServer::HttpStoreServer(ServerOptions options) {
  if (options.secret.empty() && !options.allow_unauthenticated) {
    throw InvalidArgument("rendezvous store: a job secret is required (or allow_unauthenticated, --insecure-store)");
  }
  if (options.threads < 1) throw InvalidArgument("rendezvous store: threads must be >= 1");
  if (options.max_connections < 1) throw InvalidArgument("rendezvous store: max_connections must be >= 1");
  if (options.max_pending < 1) throw InvalidArgument("rendezvous store: max_pending must be >= 1");
  if (options.max_pending_per_source < 1) {
    throw InvalidArgument("rendezvous store: max_pending_per_source must be >= 1");
  }
  if (options.pending_timeout.count() < 1) throw InvalidArgument("rendezvous store: pending_timeout must be positive");
  if (options.log_period.count() < 1) throw InvalidArgument("rendezvous store: log_period must be positive");
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

std::size_t HttpStoreServer::pending_count() const {
  std::lock_guard<std::mutex> lock(impl_->conns_mu);
  return impl_->pending.size();
}

std::size_t HttpStoreServer::pending_limit() const { return impl_->pending_cap; }

}  // namespace hvd::store
