#pragma once
/// The part of the Kubernetes API pod discovery needs: HTTPS GET and a
/// streaming watch, over Boost.Beast and Boost.Asio SSL (OpenSSL) with
/// certificate verification (the server's name or IP must match the
/// certificate). Plus the pure pieces around it, unit-tested on their own:
/// the pods URL, the watch stream's line framing, bounded backoff, and the
/// one-line wording of API errors.
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "hvd/launcher/discovery/kubernetes/kube_config.h"

namespace hvd::launcher::kube {

/// Percent-encoding of a query value (RFC 3986 unreserved characters kept):
/// "app in (a,b)" -> "app%20in%20%28a%2Cb%29".
std::string url_encode(const std::string& text);

/// /api/v1/namespaces/NS/pods?labelSelector=...: a list, or (rv set) a watch
/// from that resourceVersion with bookmarks and a server-side timeout.
std::string pods_target(const std::string& base_path, const std::string& namespace_name, const std::string& selector,
                        const std::optional<std::string>& watch_from = std::nullopt, int timeout_seconds = 0);

/// One event of a watch stream.
struct WatchEvent {
  std::string type;  ///< ADDED, MODIFIED, DELETED, BOOKMARK, ERROR
  nlohmann::json object;
};

/// Server bytes for a log line: printable ASCII kept, backslash, quote and
/// every other byte (control characters, escape sequences, non-ASCII)
/// written as \\, \' and \xNN; cut after `max_bytes` of the input with
/// "..." and the full length: "'\x1b[31mbad...' (320 bytes)". Short text
/// is just quoted: "'bad'".
std::string quote_server_text(std::string_view text, std::size_t max_bytes = 120);
/// The same without the quotes: "\x1b[31mbad... (320 bytes)".
std::string escape_server_text(std::string_view text, std::size_t max_bytes = 200);

/// Splits a watch response body, received in arbitrary pieces, into events
/// (one JSON object per line). feed() returns false and sets error() on a
/// line that is not an event; a partial last line waits for the next piece.
class WatchStreamParser {
 public:
  bool feed(const char* data, size_t size, const std::function<void(WatchEvent)>& on_event);
  const std::string& error() const { return error_; }
  size_t buffered() const { return pending_.size(); }

 private:
  std::string pending_;
  std::string error_;
};

/// Bounded exponential backoff: initial, doubling, at most max; reset()
/// after a success.
class Backoff {
 public:
  Backoff(std::chrono::milliseconds initial, std::chrono::milliseconds max) : initial_(initial), max_(max) {}
  std::chrono::milliseconds next();
  void reset() { attempts_ = 0; }
  int attempts() const { return attempts_; }

 private:
  std::chrono::milliseconds initial_, max_;
  int attempts_ = 0;
};

/// A failed request, worded for one log line.
struct ApiFailure {
  int status = 0;  ///< HTTP status; 0 when no answer (connection, TLS, timeout)
  std::string message;
  bool certificate = false;  ///< TLS certificate verification failed
  bool too_large = false;  ///< the body passed the request's size bound
  bool timed_out = false;  ///< the exchange's deadline passed
};

/// The one-line reason for an HTTP error answer to `verb` ("list", "watch")
/// of pods in `ns`; `body` is the API's Status object when it sent one.
/// 403: "<who> may not 'watch' pods in namespace 'ns' (403 Forbidden): add
/// the verb to its Role (pod discovery needs list and watch on pods)".
std::string describe_http_failure(int status, const std::string& body, const std::string& verb, const std::string& ns,
                                  const std::string& server);

/// An HTTPS client for one API server. Each request is its own connection
/// (a watch holds it for minutes; lists are rare). Thread-safe for one
/// request at a time per object; stop() from any thread ends the request in
/// progress within ~100 ms and makes further ones fail at once.
class KubeClient {
 public:
  explicit KubeClient(KubeConfig config);
  ~KubeClient();

  struct Response {
    int status = 0;
    std::string body;
  };

  /// An error answer's body (a Status object) is read up to this much.
  static constexpr std::size_t kMaxErrorBody = std::size_t(1) << 20;

  /// GET `target` with ONE deadline for the whole exchange: resolving,
  /// connecting, the TLS handshake, the headers and the whole body within
  /// `timeout` (a server that drips bytes cannot stretch it), and a body of
  /// at most `max_body` bytes (refused as it arrives, or at once from its
  /// Content-Length). Throws KubeError (timed_out, too_large, or no answer).
  Response get(const std::string& target, std::chrono::milliseconds timeout, std::size_t max_body);

  /// GET `target` and hand the body to `on_data` as it arrives. The answer's
  /// status goes to `on_status` first (return false to stop there: the body
  /// is then read whole, at most kMaxErrorBody, and returned). Everything up
  /// to the headers is bounded by `timeout`, the whole exchange by `total`
  /// (>= timeout): a stream that trickles still ends then. Returns the
  /// status and, for a non-streamed answer, its body; throws KubeError
  /// without an answer, when the stream breaks or `total` passes.
  Response stream(const std::string& target, std::chrono::milliseconds timeout, std::chrono::milliseconds total,
                  const std::function<bool(int)>& on_status, const std::function<bool(const char*, size_t)>& on_data);

  /// Ends the request in progress (from any thread); later ones fail.
  void stop();
  bool stopped() const { return stopped_; }

  /// The bearer token the next request sends: the fixed one, the token
  /// file's content (re-read when the file changed), or the exec plugin's
  /// (run again 30 s before it expires); `force` re-reads or re-runs (a 401).
  /// Throws KubeError when the file or the plugin fails.
  std::string token(bool force = false);
  const KubeConfig& config() const { return config_; }

 private:
  /// get() and stream(): `timeout` up to the headers, `total` for the
  /// whole exchange, `max_body` for a non-streamed body.
  Response request(const std::string& target, std::chrono::milliseconds timeout, std::chrono::milliseconds total,
                   std::size_t max_body, const std::function<bool(int)>& on_status,
                   const std::function<bool(const char*, size_t)>& on_data);

  struct Impl;
  KubeConfig config_;
  std::unique_ptr<Impl> impl_;
  std::atomic<bool> stopped_{false};
  std::mutex token_mu_;
  std::string token_;
  std::string token_stamp_;
  std::optional<std::chrono::system_clock::time_point> exec_expires_;
};

/// Thrown by KubeClient when a request gets no HTTP answer.
class KubeError : public std::runtime_error {
 public:
  explicit KubeError(ApiFailure f) : std::runtime_error(f.message), failure(std::move(f)) {}
  ApiFailure failure;
};

}  // namespace hvd::launcher::kube
