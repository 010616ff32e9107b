#pragma once
/// What the store's server and client share beyond HTTP/1.1 itself, which
/// Boost.Beast parses and writes for both: how a key becomes a request target
/// and back, the query parameters of the two extensions, and the header that
/// carries the job secret. Protocol: docs/store.md.
#include <optional>
#include <string>
#include <string_view>

namespace hvd::store::http {

/// Header carrying the job secret on every request.
inline constexpr const char* kSecretHeader = "X-Hvdrun-Secret";

/// "/" + the key with every byte outside [A-Za-z0-9-._~/] as %XX, then
/// "?" + query when there is one.
std::string target_for(std::string_view key, std::string_view query);

/// A request target taken apart: the percent-decoded key (the path without
/// its leading '/') and the raw query after '?'.
struct Target {
  std::string key;
  std::string query;
};

/// Accepts origin form ("/scope/key?wait_ms=5") and absolute form
/// ("http://host:port/scope/key", RFC 7230). nullopt with `why` for a target
/// that does not start with '/', holds control or non-ASCII bytes, or has a
/// malformed %-escape.
std::optional<Target> parse_target(std::string_view target, std::string& why);

/// Value of `name` in "a=1&b=2"; nullopt when absent.
std::optional<std::string> query_param(std::string_view query, std::string_view name);

}  // namespace hvd::store::http
