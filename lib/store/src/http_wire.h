#pragma once
/// The one HTTP/1.1 framing module shared by the store server and client:
/// parsing of request/response heads, percent-encoding of keys into paths,
/// and the few status codes the protocol uses (see docs/store.md).
/// Only what the rendezvous protocol needs: no chunked bodies, no trailers.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace hvd::store::http {

/// Header carrying the job secret on every request.
inline constexpr const char* kSecretHeader = "X-Hvdrun-Secret";

struct RequestHead {
  std::string method;   ///< "GET", "PUT", ...
  std::string path;     ///< percent-decoded, without the leading '/' and the query
  std::string query;    ///< raw text after '?', may be empty
  int minor_version = 1;
  std::optional<std::size_t> content_length;
  bool keep_alive = true;          ///< HTTP/1.1 default, "Connection: close" clears it
  std::optional<std::string> secret;
  bool expect_continue = false;    ///< "Expect: 100-continue" (curl sends it for big bodies)
};

/// Parses the bytes before the blank line (excluding the final "\r\n\r\n").
/// Returns 0 on success or the HTTP status to answer with (400 malformed,
/// 501 Transfer-Encoding, 505 unknown version) and sets `why`.
int parse_request_head(std::string_view head, RequestHead& out, std::string& why);

struct ResponseHead {
  int status = 0;
  std::size_t content_length = 0;
  bool keep_alive = true;
};

/// Parses a response head; false (with `why`) when it is not a response we understand.
bool parse_response_head(std::string_view head, ResponseHead& out, std::string& why);

/// Encodes every byte outside [A-Za-z0-9-._~/] as %XX.
std::string percent_encode_path(std::string_view key);
/// nullopt on a malformed escape.
std::optional<std::string> percent_decode(std::string_view text);

/// Value of `name` in "a=1&b=2"; nullopt when absent.
std::optional<std::string> query_param(std::string_view query, std::string_view name);

const char* reason_phrase(int status);

/// Case-insensitive ASCII comparison (header names).
bool iequals(std::string_view a, std::string_view b);

}  // namespace hvd::store::http
