// HTTPS to the Kubernetes API server with Boost.Beast + Asio SSL, and the
// pure helpers around it (kube_client.h).
#include "hvd/launcher/discovery/kubernetes/kube_client.h"

#include <fmt/format.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <cctype>
#include <fstream>
#include <sstream>

#include "hvd/common/error.h"
#include "hvd/common/text.h"

namespace hvd::launcher::kube {

namespace net = boost::asio;
namespace ssl = boost::asio::ssl;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using Clock = std::chrono::steady_clock;

std::string url_encode(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out.push_back(static_cast<char>(c));
    } else {
      out += fmt::format("%{:02X}", c);
    }
  }
  return out;
}

std::string pods_target(const std::string& base_path, const std::string& namespace_name, const std::string& selector,
                        const std::optional<std::string>& watch_from, int timeout_seconds) {
  std::string t = base_path + "/api/v1/namespaces/" + url_encode(namespace_name) + "/pods";
  std::string sep = "?";
  if (!selector.empty()) {
    t += sep + "labelSelector=" + url_encode(selector);
    sep = "&";
  }
  if (watch_from) {
    t += sep + "watch=1&allowWatchBookmarks=true";
    if (!watch_from->empty()) t += "&resourceVersion=" + url_encode(*watch_from);
    if (timeout_seconds > 0) t += "&timeoutSeconds=" + std::to_string(timeout_seconds);
  }
  return t;
}

// One escaping rule for every outside text (hvd::shown, docs/security.md);
// quoted, a single quote is escaped too.
std::string escape_server_text(std::string_view text, std::size_t max_bytes) { return hvd::shown(text, max_bytes); }

std::string quote_server_text(std::string_view text, std::size_t max_bytes) {
  std::string out = "'";
  for (char c : hvd::shown(text, max_bytes)) {
    if (c == '\'') out += '\\';
    out += c;
  }
  return out + "'";
}

bool WatchStreamParser::feed(const char* data, size_t size, const std::function<void(WatchEvent)>& on_event) {
  if (!error_.empty()) return false;
  pending_.append(data, size);
  size_t start = 0;
  for (size_t nl = pending_.find('\n', start); nl != std::string::npos; nl = pending_.find('\n', start)) {
    const std::string line = pending_.substr(start, nl - start);
    start = nl + 1;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("type") || !j["type"].is_string() || !j.contains("object")) {
      error_ = "a watch event that is not JSON {type, object}: " + quote_server_text(line);
      pending_.clear();
      return false;
    }
    on_event(WatchEvent{j["type"].get<std::string>(), std::move(j["object"])});
  }
  pending_.erase(0, start);
  if (pending_.size() > (64u << 20)) {
    error_ = "a watch event longer than 64 MiB";
    pending_.clear();
    return false;
  }
  return true;
}

std::chrono::milliseconds Backoff::next() {
  std::chrono::milliseconds d = initial_;
  for (int i = 0; i < attempts_ && d < max_; ++i) d *= 2;
  ++attempts_;
  return std::min(d, max_);
}

std::string describe_http_failure(int status, const std::string& body, const std::string& verb, const std::string& ns,
                                  const std::string& server) {
  std::string message, reason;
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_object()) {
    if (j.contains("message") && j["message"].is_string()) message = j["message"].get<std::string>();
    if (j.contains("reason") && j["reason"].is_string()) reason = j["reason"].get<std::string>();
  }
  if (message.empty()) {
    message = body;
    while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) message.pop_back();
  }
  reason = escape_server_text(reason, 60);
  if (status == 401) {
    return fmt::format(
        "the Kubernetes API server at {} refused the credentials (401 Unauthorized): the token is missing, invalid "
        "or expired",
        server);
  }
  if (status == 403) {
    std::string who = "these credentials";
    const std::string tag = "User \"";
    if (const size_t at = message.find(tag); at != std::string::npos) {
      const size_t end = message.find('"', at + tag.size());
      const std::string user = escape_server_text(message.substr(at + tag.size(), end - at - tag.size()), 120);
      const std::string sa = "system:serviceaccount:";
      if (user.rfind(sa, 0) == 0) {
        std::string rest = user.substr(sa.size());
        const size_t colon = rest.find(':');
        who = colon == std::string::npos
                  ? "the service account " + rest
                  : "the service account '" + rest.substr(colon + 1) + "' (namespace '" + rest.substr(0, colon) + "')";
      } else {
        who = "user '" + user + "'";
      }
    }
    return fmt::format(
        "{} may not '{}' pods in namespace '{}' (403 Forbidden): add the verb to its Role (pod discovery needs list "
        "and watch on pods)",
        who, verb, ns);
  }
  message = escape_server_text(message);
  if (status == 404) {
    return fmt::format("the Kubernetes API server at {} answered 404 Not Found to {} pods in namespace '{}': {}",
                       server, verb, ns, message);
  }
  return fmt::format("the Kubernetes API server at {} answered {}{} to {} pods in namespace '{}': {}", server, status,
                     reason.empty() ? "" : " " + reason, verb, ns, message);
}

// ---- the client ----------------------------------------------------------------

struct KubeClient::Impl {
  ssl::context ctx{ssl::context::tls_client};
  std::mutex mu;
  net::io_context* current = nullptr;  // the request in progress (stop() stops it)
};

namespace {

std::string file_stamp(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return "";
  return fmt::format("{}:{}:{}:{}", st.st_ino, st.st_mtim.tv_sec, st.st_mtim.tv_nsec, st.st_size);
}

std::string openssl_error(const boost::system::error_code& ec) {
  std::string what = ec.message();
  if (ec.category() == net::error::get_ssl_category()) {
    char buf[256];
    ERR_error_string_n(static_cast<unsigned long>(ec.value()), buf, sizeof buf);
    what = buf;
  }
  return what;
}

}  // namespace

KubeClient::KubeClient(KubeConfig config) : config_(std::move(config)), impl_(std::make_unique<Impl>()) {
  auto& ctx = impl_->ctx;
  ctx.set_options(ssl::context::default_workarounds | ssl::context::no_sslv2 | ssl::context::no_sslv3 |
                  ssl::context::no_tlsv1 | ssl::context::no_tlsv1_1);
  boost::system::error_code ec;
  if (config_.insecure_skip_tls_verify) {
    ctx.set_verify_mode(ssl::verify_none);
  } else {
    ctx.set_verify_mode(ssl::verify_peer);
    if (!config_.ca_pem.empty()) {
      ctx.add_certificate_authority(net::buffer(config_.ca_pem), ec);
      if (ec) {
        throw InvalidArgument(
            fmt::format("the CA certificate {} is not a PEM certificate: {}", config_.ca_origin, openssl_error(ec)));
      }
    } else {
      ctx.set_default_verify_paths(ec);
    }
  }
  if (!config_.client_cert_pem.empty()) {
    ctx.use_certificate_chain(net::buffer(config_.client_cert_pem), ec);
    if (ec)
      throw InvalidArgument(
          fmt::format("{}: the client certificate is not usable: {}", config_.origin, openssl_error(ec)));
    ctx.use_private_key(net::buffer(config_.client_key_pem), ssl::context::pem, ec);
    if (ec)
      throw InvalidArgument(fmt::format("{}: the client key is not usable: {}", config_.origin, openssl_error(ec)));
  }
}

KubeClient::~KubeClient() = default;

void KubeClient::stop() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  stopped_ = true;
  if (impl_->current) impl_->current->stop();
}

std::string KubeClient::token(bool force) {
  if (!config_.token.empty()) return config_.token;
  if (config_.exec) {  // run the plugin when there is no token yet, it expired (30 s early) or on a 401
    std::lock_guard<std::mutex> lock(token_mu_);
    const auto now = std::chrono::system_clock::now();
    if (force || token_.empty() || (exec_expires_ && now + std::chrono::seconds(30) >= *exec_expires_)) {
      try {
        const ExecCredential c = run_exec_plugin(*config_.exec, std::chrono::seconds(30));
        token_ = c.token;
        exec_expires_ = c.expires;
      } catch (const std::runtime_error& e) {
        token_.clear();
        throw KubeError(ApiFailure{0, e.what(), false});
      }
    }
    return token_;
  }
  if (config_.token_file.empty()) return "";
  std::lock_guard<std::mutex> lock(token_mu_);
  const std::string stamp = file_stamp(config_.token_file);
  if (force || stamp != token_stamp_ || stamp.empty()) {
    std::ifstream in(config_.token_file);
    if (!in) throw KubeError(ApiFailure{0, fmt::format("cannot read the token file {}", config_.token_file), false});
    std::ostringstream text;
    text << in.rdbuf();
    std::string t = text.str();
    while (!t.empty() && (t.back() == '\n' || t.back() == '\r' || t.back() == ' ')) t.pop_back();
    token_ = t;
    token_stamp_ = stamp;
  }
  return token_;
}

KubeClient::Response KubeClient::get(const std::string& target, std::chrono::milliseconds timeout,
                                     std::size_t max_body) {
  return request(target, timeout, timeout, max_body, [](int) { return false; }, {});
}

KubeClient::Response KubeClient::stream(const std::string& target, std::chrono::milliseconds timeout,
                                        std::chrono::milliseconds total, const std::function<bool(int)>& on_status,
                                        const std::function<bool(const char*, size_t)>& on_data) {
  return request(target, timeout, std::max(timeout, total), kMaxErrorBody, on_status, on_data);
}

namespace {

/// "5 s", "300 ms", "1.5 s": a limit as the user gave it.
std::string duration_text(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return fmt::format("{} s", d.count() / 1000);
  if (d.count() > 1000) return fmt::format("{:.1f} s", static_cast<double>(d.count()) / 1000.0);
  return fmt::format("{} ms", d.count());
}

std::string size_text(std::size_t bytes) {
  if (bytes % (std::size_t(1) << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes % 1024 == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} bytes", bytes);
}

}  // namespace

KubeClient::Response KubeClient::request(const std::string& target, std::chrono::milliseconds timeout,
                                         std::chrono::milliseconds total, std::size_t max_body,
                                         const std::function<bool(int)>& on_status,
                                         const std::function<bool(const char*, size_t)>& on_data) {
  const std::string server = config_.server.text();
  auto fail = [&](std::string message, bool certificate = false) -> KubeError {
    return KubeError(ApiFailure{0, std::move(message), certificate});
  };
  const std::string bearer = token();  // before connecting: a token file problem is its own message
  net::io_context ioc;  // declared first: destroyed after everything that uses it
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (stopped_) throw fail("stopped");
    impl_->current = &ioc;
  }
  struct Unregister {
    Impl& impl;
    ~Unregister() {
      std::lock_guard<std::mutex> lock(impl.mu);
      impl.current = nullptr;
    }
  } unregister{*impl_};

  // ONE deadline for everything up to the headers, one for the whole
  // exchange (the same for a plain GET): no read restarts the clock, so a
  // server that sends a byte now and then cannot stretch it.
  const auto start = Clock::now();
  const auto answer_deadline = start + timeout;
  const auto total_deadline = start + total;
  std::size_t body_bytes = 0;
  // Runs the io_context until `done`, the deadline or stop().
  auto run = [&](const bool& done, Clock::time_point deadline, const char* what) {
    while (!done) {
      if (stopped_) throw fail("stopped");
      const auto now = Clock::now();
      if (now >= deadline) {
        const bool answer = deadline == answer_deadline || total == timeout;
        std::string where = what;
        if (body_bytes > 0) where += fmt::format(" ({} bytes so far)", body_bytes);
        ApiFailure f{0,
                     fmt::format("the Kubernetes API server at {} did not complete the request within {} ({}): it "
                                 "stalled {}",
                                 server, duration_text(answer ? timeout : total),
                                 answer ? "--discovery-timeout" : "the watch's limit", where),
                     false};
        f.timed_out = true;
        throw KubeError(std::move(f));
      }
      ioc.restart();
      ioc.run_for(std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(100)));
    }
  };

  tcp::resolver resolver(ioc);
  beast::ssl_stream<beast::tcp_stream> stream(ioc, impl_->ctx);
  boost::system::error_code ec;
  bool done = false;
  tcp::resolver::results_type endpoints;
  resolver.async_resolve(config_.server.host, config_.server.port,
                         [&](const boost::system::error_code& e, tcp::resolver::results_type r) {
                           ec = e;
                           endpoints = std::move(r);
                           done = true;
                         });
  run(done, answer_deadline, "while resolving its name");
  if (ec) throw fail(fmt::format("cannot resolve the Kubernetes API server {}: {}", server, ec.message()));

  done = false;
  beast::get_lowest_layer(stream).async_connect(endpoints,
                                                [&](const boost::system::error_code& e, const tcp::endpoint&) {
                                                  ec = e;
                                                  done = true;
                                                });
  run(done, answer_deadline, "while connecting");
  if (ec) throw fail(fmt::format("cannot connect to the Kubernetes API server at {}: {}", server, ec.message()));

  SSL* ssl_handle = stream.native_handle();
  // The name the certificate must carry: tls-server-name, else the server's host.
  const std::string& expected = config_.tls_server_name.empty() ? config_.server.host : config_.tls_server_name;
  boost::system::error_code addr_ec;
  const auto address = net::ip::make_address(expected, addr_ec);
  if (addr_ec) SSL_set_tlsext_host_name(ssl_handle, expected.c_str());  // SNI for names only
  if (!config_.insecure_skip_tls_verify) {
    X509_VERIFY_PARAM* param = SSL_get0_param(ssl_handle);
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    const int ok = addr_ec ? X509_VERIFY_PARAM_set1_host(param, expected.c_str(), 0)
                           : X509_VERIFY_PARAM_set1_ip_asc(param, address.to_string().c_str());
    if (ok != 1) throw fail(fmt::format("cannot set up certificate verification for {}", server));
  }
  done = false;
  stream.async_handshake(ssl::stream_base::client, [&](const boost::system::error_code& e) {
    ec = e;
    done = true;
  });
  run(done, answer_deadline, "during the TLS handshake");
  if (ec) {
    const long verify = SSL_get_verify_result(ssl_handle);
    if (!config_.insecure_skip_tls_verify && verify != X509_V_OK) {
      throw fail(fmt::format("TLS certificate verification failed for the Kubernetes API server at {}: {} (trusted "
                             "CA: {})",
                             server, X509_verify_cert_error_string(verify), config_.ca_origin),
                 true);
    }
    throw fail(fmt::format("TLS handshake with the Kubernetes API server at {} failed: {}", server, openssl_error(ec)));
  }

  http::request<http::empty_body> req{http::verb::get, target, 11};
  const bool v6 = config_.server.host.find(':') != std::string::npos;
  req.set(http::field::host, (v6 ? "[" + config_.server.host + "]" : config_.server.host) + ":" + config_.server.port);
  req.set(http::field::user_agent, "hvdrun");
  req.set(http::field::accept, "application/json");
  if (!bearer.empty()) req.set(http::field::authorization, "Bearer " + bearer);
  done = false;
  http::async_write(stream, req, [&](const boost::system::error_code& e, size_t) {
    ec = e;
    done = true;
  });
  run(done, answer_deadline, "while sending the request");
  if (ec)
    throw fail(fmt::format("sending a request to the Kubernetes API server at {} failed: {}", server, ec.message()));

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);  // counted below: the limit depends on the status
  done = false;
  http::async_read_header(stream, buffer, parser, [&](const boost::system::error_code& e, size_t) {
    ec = e;
    done = true;
  });
  run(done, answer_deadline, "waiting for the answer's headers");
  if (ec)
    throw fail(fmt::format("reading the answer of the Kubernetes API server at {} failed: {}", server, ec.message()));

  Response response;
  response.status = static_cast<int>(parser.get().result_int());
  const bool streaming = on_status(response.status);
  const std::size_t limit = response.status == 200 ? max_body : std::min(max_body, kMaxErrorBody);
  auto too_large = [&]() -> KubeError {
    ApiFailure f{
        response.status,
        fmt::format("the answer of the Kubernetes API server at {} is larger than {}", server, size_text(limit)),
        false};
    f.too_large = true;
    return KubeError(std::move(f));
  };
  if (!streaming && parser.content_length() && *parser.content_length() > limit) throw too_large();
  char piece[16384];
  while (!parser.is_done()) {
    parser.get().body().data = piece;
    parser.get().body().size = sizeof piece;
    done = false;
    // read_some: hand over each piece as it arrives (a watch event must not
    // wait for the buffer to fill).
    http::async_read_some(stream, buffer, parser, [&](const boost::system::error_code& e, size_t) {
      ec = e;
      done = true;
    });
    run(done, total_deadline, "while reading the body");
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      throw fail(fmt::format("the connection to the Kubernetes API server at {} broke: {}", server, ec.message()));
    }
    const size_t got = sizeof piece - parser.get().body().size;
    body_bytes += got;
    if (streaming) {
      if (got && !on_data(piece, got)) break;
    } else {
      if (body_bytes > limit) throw too_large();
      response.body.append(piece, got);
    }
  }
  // Close politely but without waiting long: the connection is ours alone.
  beast::get_lowest_layer(stream).socket().close(ec);
  return response;
}

}  // namespace hvd::launcher::kube
