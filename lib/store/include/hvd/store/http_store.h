#pragma once
/// The network store: an HTTP/1.1 key-value server that hvdrun runs for each
/// job, and the client workers use. The wire protocol is Horovod's Gloo HTTP
/// rendezvous store (PUT/GET/DELETE /<scope>/<key>, 404 until a key exists),
/// so unmodified Horovod workers can rendezvous through hvdrun, plus two
/// extensions: long-poll GET ?wait_ms=N and atomic POST ?add=N.
/// Every request must carry the job secret in X-Hvdrun-Secret unless the
/// server was started with allow_unauthenticated. Protocol and security model:
/// docs/store.md.
#include "hvd/common/io.h"
#include "hvd/store/memory_store.h"
#include "hvd/store/store.h"

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace hvd::store {

struct ServerOptions {
  /// Address to listen on (IPv4/IPv6 literal or resolvable name).
  std::string bind_address = "0.0.0.0";
  /// 0 picks an ephemeral port; port() tells which.
  uint16_t port = 0;
  /// The job secret. Must be non-empty unless allow_unauthenticated.
  std::string secret;
  /// hvdrun's --insecure-store: serve requests without the secret header, for
  /// unmodified Horovod workers. A request that does carry the header must
  /// still carry the right secret.
  bool allow_unauthenticated = false;
  /// Bigger bodies get 413 and the connection is closed before the body is read.
  std::size_t max_body_bytes = std::size_t(64) << 20;
  /// Request line + headers; bigger heads get 431 and the connection is closed.
  std::size_t max_header_bytes = 16 << 10;
  /// Time a client has to deliver one complete request, counted from its
  /// first byte (or from the previous response on a kept-alive connection).
  /// Slow-loris and half-open clients are dropped when it passes; idle
  /// keep-alive clients too (the client reconnects transparently).
  std::chrono::milliseconds read_timeout{30000};
  /// Authenticated connections (those that have made a request with the
  /// right secret, or any well-formed request with allow_unauthenticated);
  /// a request that would make one more gets 503 and a close.
  std::size_t max_connections = 8192;
  /// Connections that have not yet authenticated (just accepted, idle,
  /// part-way through their first head, or being closed after a 401) are
  /// kept in a bounded pool of their own, so that strangers never take the
  /// job's capacity: when the pool is full, the oldest one in it is closed
  /// to make room. The server also keeps this pool within a quarter of the
  /// descriptors left under RLIMIT_NOFILE when it starts (at least 16).
  std::size_t max_pending = 256;
  /// At most this many of the pool per source address; the source's own
  /// oldest connection is closed to make room.
  std::size_t max_pending_per_source = 64;
  /// Time a new connection has, from accept, to deliver the head of its
  /// first (authenticated) request; the job's clients send it at once.
  /// Also capped by read_timeout.
  std::chrono::milliseconds pending_timeout{3000};
  /// Warnings an outsider can trigger (rejected requests, connections
  /// closed to make room, failed accepts) are logged once, then counted and
  /// reported once per this period.
  std::chrono::milliseconds log_period{5000};
  /// Cap on a long-poll's wait_ms; longer requests wait this long.
  std::chrono::milliseconds max_wait{60000};
  /// Event-loop threads. One is plenty for a rendezvous.
  int threads = 1;
};

class HttpStoreServer {
 public:
  /// Validates options (InvalidArgument); does not listen yet.
  explicit HttpStoreServer(ServerOptions options);
  /// Stops the server.
  ~HttpStoreServer();
  HttpStoreServer(const HttpStoreServer&) = delete;
  HttpStoreServer& operator=(const HttpStoreServer&) = delete;

  /// Binds, listens and starts the event-loop threads; returns once the port
  /// accepts connections. IoError ("cannot listen on 0.0.0.0:80: ...") on failure.
  void start();
  /// Closes the listener and every connection (pending long-polls included),
  /// then joins the threads. Prompt (well under a second); idempotent. Must
  /// not be called from a store watcher callback.
  void stop();

  /// The bound port (valid after start()).
  uint16_t port() const;
  /// The bound address as text ("0.0.0.0", "127.0.0.1", "::1").
  std::string address() const;

  /// The store the server serves; usable in-process (hvdrun publishes
  /// membership through it). Writes through it wake pending long-polls.
  InMemoryStore& store();

  /// Currently open client connections (for tests and diagnostics).
  std::size_t connection_count() const;
  /// Of those, the ones not yet authenticated (the pending pool).
  std::size_t pending_count() const;
  /// The pending pool's limit in effect (max_pending, lowered to fit the
  /// descriptors available when the server started).
  std::size_t pending_limit() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

struct ClientOptions {
  std::string host;
  uint16_t port = 0;
  /// Sent in X-Hvdrun-Secret on every request; empty sends no header.
  std::string secret;
  /// How long the first connect() keeps retrying (with backoff) before
  /// giving up with IoError. A reconnect after a working connection broke
  /// tries once, so a dead server is reported quickly.
  std::chrono::milliseconds connect_timeout{30000};
  /// How long to wait for a response beyond any long-poll time; a server that
  /// accepted but does not answer is reported as IoError after this.
  std::chrono::milliseconds request_timeout{60000};
  /// Long-polls are issued in slices of at most this much (the server caps
  /// each at its max_wait anyway).
  std::chrono::milliseconds poll_slice{30000};
};

/// A Store over HTTP. Thread-safe (one mutex around one kept-alive
/// connection). A request that fails on a reused connection is retried once
/// on a fresh one (the server may have closed an idle connection).
/// Errors: IoError when the server cannot be reached or the connection
/// breaks; hvd::Error when the server rejects the secret (HTTP 401);
/// InvalidArgument for requests the server refuses (400, 413); TimeoutError
/// naming the key when get()/wait() time out.
class HttpStoreClient : public Store {
 public:
  /// Does not connect; the first request (or connect()) does.
  explicit HttpStoreClient(ClientOptions options);
  ~HttpStoreClient() override;

  /// Connects now, retrying until connect_timeout; IoError
  /// ("rendezvous store 10.0.0.1:4321 unreachable: Connection refused").
  void connect();

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<Bytes> try_get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool erase(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

  /// "host:port" for messages.
  std::string endpoint() const;

 private:
  struct Response {
    int status = 0;
    std::string body;
    bool keep_alive = true;
  };
  Response request(const std::string& method, const std::string& key, const std::string& query, const std::string& body,
                   std::chrono::milliseconds server_wait);
  /// Sends `head` then `body`; bodies above 1 MiB first wait
  /// for "100 Continue", so a refused value (413, 401) is reported as such
  /// instead of as a reset connection.
  Response exchange_locked(const std::string& head, const std::string& body, std::chrono::milliseconds server_wait);
  Response read_response_locked(Deadline deadline);
  void connect_locked(bool retry_until_timeout);
  [[noreturn]] void throw_for_status(const Response& r, const std::string& method, const std::string& key);

  ClientOptions options_;
  std::mutex mu_;
  int fd_ = -1;
  bool ever_connected_ = false;
  std::string inbuf_;
};

/// The store a worker uses: an HttpStoreClient for
/// HOROVOD_GLOO_RENDEZVOUS_ADDR / HOROVOD_GLOO_RENDEZVOUS_PORT with the secret
/// from HVDRUN_SECRET, connected (retrying up to `timeout`) before it is
/// returned. nullptr when HOROVOD_GLOO_RENDEZVOUS_ADDR is not set (a program
/// run without hvdrun). InvalidArgument for a missing or bad port; IoError
/// when the store cannot be reached within `timeout`. Its request_timeout is
/// at most `timeout` (at least 1 s), so a store that accepts but does not
/// answer cannot hold a starting worker for long.
std::unique_ptr<Store> make_store_from_env(std::chrono::milliseconds timeout);

}  // namespace hvd::store
