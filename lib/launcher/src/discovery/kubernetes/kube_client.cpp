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
      error_ = "a watch event that is not JSON {type, object}: '" + line.substr(0, 120) + "'";
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
    message = body.substr(0, 200);
    while (!message.empty() && (message.back() == '\n' || message.back() == '\r')) message.pop_back();
  }
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
      const std::string user = message.substr(at + tag.size(), end - at - tag.size());
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
        "{} may not '{}' pods in namespace '{}' (403 Forbidden): add the verb to its Role (pod discovery needs get, "
        "list and watch on pods)",
        who, verb, ns);
  }
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

KubeClient::Response KubeClient::get(const std::string& target, std::chrono::milliseconds timeout) {
  return stream(
      target, timeout, timeout, [](int) { return false; }, [](const char*, size_t) { return true; });
}

KubeClient::Response KubeClient::stream(const std::string& target, std::chrono::milliseconds timeout,
                                        std::chrono::milliseconds idle, const std::function<bool(int)>& on_status,
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

  // Runs the io_context until `done`, the deadline or stop().
  auto run = [&](const bool& done, Clock::time_point deadline, const char* what) {
    while (!done) {
      if (stopped_) throw fail("stopped");
      const auto now = Clock::now();
      if (now >= deadline) {
        throw fail(fmt::format("the Kubernetes API server at {} did not answer in time ({})", server, what));
      }
      ioc.restart();
      ioc.run_for(std::min<Clock::duration>(deadline - now, std::chrono::milliseconds(100)));
    }
  };
  const auto deadline = Clock::now() + timeout;

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
  run(done, deadline, "resolving its name");
  if (ec) throw fail(fmt::format("cannot resolve the Kubernetes API server {}: {}", server, ec.message()));

  done = false;
  beast::get_lowest_layer(stream).async_connect(endpoints,
                                                [&](const boost::system::error_code& e, const tcp::endpoint&) {
                                                  ec = e;
                                                  done = true;
                                                });
  run(done, deadline, "connecting");
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
  run(done, deadline, "TLS handshake");
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
  run(done, deadline, "sending the request");
  if (ec)
    throw fail(fmt::format("sending a request to the Kubernetes API server at {} failed: {}", server, ec.message()));

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);
  done = false;
  http::async_read_header(stream, buffer, parser, [&](const boost::system::error_code& e, size_t) {
    ec = e;
    done = true;
  });
  run(done, deadline, "waiting for the answer");
  if (ec)
    throw fail(fmt::format("reading the answer of the Kubernetes API server at {} failed: {}", server, ec.message()));

  Response response;
  response.status = static_cast<int>(parser.get().result_int());
  const bool streaming = on_status(response.status);
  char piece[16384];
  constexpr size_t kMaxWholeBody = 256u << 20;
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
    run(done, Clock::now() + (streaming ? idle : std::max(idle, timeout)), "reading the body");
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      throw fail(fmt::format("the connection to the Kubernetes API server at {} broke: {}", server, ec.message()));
    }
    const size_t got = sizeof piece - parser.get().body().size;
    if (streaming) {
      if (got && !on_data(piece, got)) break;
    } else {
      response.body.append(piece, got);
      if (response.body.size() > kMaxWholeBody) throw fail("an answer larger than 256 MiB");
    }
  }
  // Close politely but without waiting long: the connection is ours alone.
  beast::get_lowest_layer(stream).socket().close(ec);
  return response;
}

}  // namespace hvd::launcher::kube
