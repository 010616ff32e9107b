// HttpStoreClient: blocking requests over one kept-alive, non-blocking socket
// whose waits are bounded with poll() deadlines; Boost.Beast writes the
// request heads and parses the responses.
#include "http_wire.h"
#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/io.h"
#include "hvd/common/net.h"
#include "hvd/common/secret.h"
#include "hvd/store/http_store.h"
#include "store_detail.h"

#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sstream>
#include <thread>

namespace hvd::store {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

namespace {

constexpr std::size_t kMaxResponseHead = 64 << 10;
constexpr std::size_t kMaxResponseBody = std::size_t(1) << 30;
/// Bodies above this ask the server first ("Expect: 100-continue").
constexpr std::size_t kExpectContinueBytes = 1u << 20;
constexpr std::chrono::milliseconds kContinueWait{3000};

/// Appends what is available (at least one byte) to `buf`; false at EOF.
bool recv_some(int fd, std::string& buf, Deadline deadline) {
  char tmp[65536];
  for (;;) {
    ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n > 0) {
      buf.append(tmp, static_cast<std::size_t>(n));
      return true;
    }
    if (n == 0) return false;
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) throw IoError(std::strerror(errno));
    struct pollfd p {
      fd, POLLIN, 0
    };
    int rc = ::poll(&p, 1, deadline.poll_timeout_ms());
    if (rc == 0) throw TimeoutError("no response");
    if (rc < 0 && errno != EINTR) throw IoError(std::strerror(errno));
  }
}

std::string trim_body(const std::string& body) {
  std::string s = body.substr(0, 300);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

}  // namespace

HttpStoreClient::HttpStoreClient(ClientOptions options) : options_(std::move(options)) {
  if (options_.host.empty()) throw InvalidArgument("rendezvous store client: host must not be empty");
  if (options_.port == 0) throw InvalidArgument("rendezvous store client: port must not be 0");
  if (options_.poll_slice.count() < 1) options_.poll_slice = std::chrono::milliseconds(1);
}

HttpStoreClient::~HttpStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

std::string HttpStoreClient::endpoint() const {
  const bool v6 = options_.host.find(':') != std::string::npos;
  return (v6 ? "[" + options_.host + "]" : options_.host) + ":" + std::to_string(options_.port);
}

void HttpStoreClient::connect() {
  std::lock_guard<std::mutex> lock(mu_);
  if (fd_ < 0) connect_locked(true);
}

void HttpStoreClient::connect_locked(bool retry_until_timeout) {
  using Status = net::ConnectResult::Status;
  const Deadline deadline = Deadline::after(options_.connect_timeout);
  std::chrono::milliseconds backoff(20);
  std::string why;
  for (;;) {
    net::ConnectResult r = net::connect_tcp(options_.host, options_.port, deadline);
    if (r.ok()) {
      fd_ = r.fd.release();
      ever_connected_ = true;
      inbuf_.clear();
      return;
    }
    if (r.status == Status::ResolveFailed) why = "cannot resolve host: " + r.resolve_error;
    if (r.status == Status::Failed) why = std::strerror(r.error);
    if (r.status == Status::TimedOut) why = "connect timed out";
    if (!retry_until_timeout || deadline.expired()) break;
    std::this_thread::sleep_for(std::min(backoff, deadline.remaining()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
  throw IoError(fmt::format("rendezvous store {} unreachable: {}", endpoint(), why));
}

HttpStoreClient::Response HttpStoreClient::read_response_locked(Deadline deadline) {
  bhttp::response_parser<bhttp::string_body> parser;
  parser.header_limit(kMaxResponseHead);
  parser.body_limit(kMaxResponseBody);
  parser.eager(true);
  for (;;) {
    if (!inbuf_.empty()) {
      beast::error_code ec;
      inbuf_.erase(0, parser.put(asio::buffer(inbuf_), ec));
      if (parser.is_done()) break;
      if (ec && ec != bhttp::error::need_more) throw IoError("malformed response: " + ec.message());
    }
    if (!recv_some(fd_, inbuf_, deadline)) {
      // A response without Content-Length ends with the connection.
      beast::error_code ec;
      if (parser.got_some()) parser.put_eof(ec);
      if (!parser.is_done() || ec) throw IoError("connection closed by the store");
      break;
    }
  }
  Response r;
  r.status = static_cast<int>(parser.get().result_int());
  r.keep_alive = parser.get().keep_alive() && !parser.need_eof();
  r.body = std::move(parser.get().body());
  return r;
}

HttpStoreClient::Response HttpStoreClient::exchange_locked(const std::string& head, const std::string& body,
                                                           std::chrono::milliseconds server_wait) {
  const bool expect_continue = body.size() > kExpectContinueBytes;
  for (int attempt = 0;; ++attempt) {
    bool fresh = false;
    if (fd_ < 0) {
      // Only the very first connection waits for a server that is still starting.
      connect_locked(!ever_connected_);
      fresh = true;
    }
    const auto budget = server_wait + options_.request_timeout;
    const Deadline deadline = Deadline::after(budget);
    try {
      write_all(fd_, head.data(), head.size(), deadline);
      bool body_sent = !expect_continue;
      if (!expect_continue) write_all(fd_, body.data(), body.size(), deadline);
      Response r;
      if (expect_continue) {
        // RFC 9110: do not wait forever for an interim answer a server may not send.
        try {
          r = read_response_locked(Deadline::after(std::min<std::chrono::milliseconds>(budget, kContinueWait)));
        } catch (const TimeoutError&) {
          r.status = 100;
        }
      } else {
        r = read_response_locked(deadline);
      }
      if (r.status == 100) {
        try {
          write_all(fd_, body.data(), body.size(), deadline);
        } catch (const IoError&) {
          // A loaded server may refuse (413) after our 100-continue wait ran
          // out and close while the body is in flight: its answer is still
          // in our receive buffer and says more than "broken pipe".
          Response refusal = read_response_locked(Deadline::after(std::chrono::milliseconds(500)));
          ::close(fd_);
          fd_ = -1;
          return refusal;
        }
        body_sent = true;
        r = read_response_locked(deadline);
      }
      // A final answer before the body went out leaves the stream out of step.
      if (!r.keep_alive || !body_sent) {
        ::close(fd_);
        fd_ = -1;
      }
      return r;
    } catch (const TimeoutError&) {
      ::close(fd_);
      fd_ = -1;
      throw IoError(fmt::format("rendezvous store {} did not answer within {} ms", endpoint(), budget.count()));
    } catch (const IoError& e) {
      ::close(fd_);
      fd_ = -1;
      // A kept-alive connection may have been closed by the server while idle.
      if (fresh || attempt > 0) {
        throw IoError(fmt::format("rendezvous store {}: connection lost: {}", endpoint(), e.what()));
      }
    }
  }
}

HttpStoreClient::Response HttpStoreClient::request(const std::string& method, const std::string& key,
                                                   const std::string& query, const std::string& body,
                                                   std::chrono::milliseconds server_wait) {
  if (key.empty()) throw InvalidArgument("rendezvous store: keys must not be empty");
  bhttp::request_header<> head;
  head.method_string(method);
  head.target(http::target_for(key, query));
  head.version(11);
  head.set(bhttp::field::host, endpoint());
  head.set(bhttp::field::content_length, std::to_string(body.size()));
  if (!options_.secret.empty()) head.set(http::kSecretHeader, options_.secret);
  if (body.size() > kExpectContinueBytes) head.set(bhttp::field::expect, "100-continue");
  std::ostringstream text;
  text << head;  // request line, fields and the blank line
  std::lock_guard<std::mutex> lock(mu_);
  return exchange_locked(text.str(), body, server_wait);
}

void HttpStoreClient::throw_for_status(const Response& r, const std::string& method, const std::string& key) {
  if (r.status == 401) {
    throw Error(fmt::format("rendezvous store {} rejected the job secret (HTTP 401); is {} the launcher's?", endpoint(),
                            kSecretEnv));
  }
  if (r.status == 400 || r.status == 413) {
    throw InvalidArgument(fmt::format("rendezvous store {} refused {} '{}' (HTTP {}): {}", endpoint(), method, key,
                                      r.status, trim_body(r.body)));
  }
  throw IoError(fmt::format("rendezvous store {} answered HTTP {} to {} '{}': {}", endpoint(), r.status, method, key,
                            trim_body(r.body)));
}

void HttpStoreClient::set(const std::string& key, const Bytes& value) {
  auto r = request("PUT", key, "", std::string(value.begin(), value.end()), std::chrono::milliseconds(0));
  if (r.status != 200) throw_for_status(r, "PUT", key);
}

std::optional<Bytes> HttpStoreClient::try_get(const std::string& key) {
  auto r = request("GET", key, "", "", std::chrono::milliseconds(0));
  if (r.status == 404) return std::nullopt;
  if (r.status != 200) throw_for_status(r, "GET", key);
  return Bytes(r.body.begin(), r.body.end());
}

Bytes HttpStoreClient::get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto deadline = detail::deadline_after(timeout);
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() < 0) left = std::chrono::milliseconds(0);
    const auto slice = std::min(left, options_.poll_slice);
    auto r = request("GET", key, "wait_ms=" + std::to_string(slice.count()), "", slice);
    if (r.status == 200) return Bytes(r.body.begin(), r.body.end());
    if (r.status != 404) throw_for_status(r, "GET", key);
    if (Clock::now() >= deadline) detail::throw_timeout({key}, timeout);
  }
}

int64_t HttpStoreClient::add(const std::string& key, int64_t delta) {
  auto r = request("POST", key, "add=" + std::to_string(delta), "", std::chrono::milliseconds(0));
  if (r.status != 200) throw_for_status(r, "POST", key);
  auto v = env::parse_int(r.body);
  if (!v) throw IoError(fmt::format("rendezvous store {} answered add on '{}' with a non-integer", endpoint(), key));
  return *v;
}

bool HttpStoreClient::erase(const std::string& key) {
  auto r = request("DELETE", key, "", "", std::chrono::milliseconds(0));
  if (r.status == 200) return true;
  if (r.status == 404) return false;
  throw_for_status(r, "DELETE", key);
}

void HttpStoreClient::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = detail::deadline_after(timeout);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    try {
      get(keys[i], std::max(left, std::chrono::milliseconds(0)));
    } catch (const TimeoutError&) {
      std::vector<std::string> missing{keys[i]};
      for (std::size_t j = i + 1; j < keys.size(); ++j)
        if (!try_get(keys[j])) missing.push_back(keys[j]);
      detail::throw_timeout(missing, timeout);
    }
  }
}

std::unique_ptr<Store> make_store_from_env(std::chrono::milliseconds timeout) {
  auto addr = env::get(job_env::kRendezvousAddr);
  if (!addr || addr->empty()) return nullptr;
  auto port = env::get_int(job_env::kRendezvousPort);
  if (!port) {
    throw InvalidArgument(
        fmt::format("HOROVOD_GLOO_RENDEZVOUS_ADDR={} is set but HOROVOD_GLOO_RENDEZVOUS_PORT is not", *addr));
  }
  if (*port < 1 || *port > 65535) {
    throw InvalidArgument(fmt::format("HOROVOD_GLOO_RENDEZVOUS_PORT={} is not a TCP port (1..65535)", *port));
  }
  ClientOptions opts;
  opts.host = *addr;
  opts.port = static_cast<uint16_t>(*port);
  opts.secret = env::get_or(kSecretEnv, "");
  opts.connect_timeout = timeout;
  // A store that accepted the connection but does not answer (its listen
  // backlog full of strangers, out of descriptors) must not stretch a
  // worker's start-up past its own limit: each answer is awaited no longer
  // than `timeout` either (long-polls add their own wait on top).
  opts.request_timeout = std::min(opts.request_timeout, std::max(timeout, std::chrono::milliseconds(1000)));
  auto client = std::make_unique<HttpStoreClient>(std::move(opts));
  client->connect();
  return client;
}

}  // namespace hvd::store
