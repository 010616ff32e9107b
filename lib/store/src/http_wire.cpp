#include "http_wire.h"

#include <cctype>
#include <charconv>
#include <vector>

namespace hvd::store::http {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

/// Splits on "\r\n"; a bare '\n' is tolerated (some tools send it).
std::vector<std::string_view> split_lines(std::string_view head) {
  std::vector<std::string_view> lines;
  while (!head.empty()) {
    std::size_t nl = head.find('\n');
    std::string_view line = head.substr(0, nl);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    if (nl == std::string_view::npos) break;
    head.remove_prefix(nl + 1);
  }
  return lines;
}

bool is_token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool parse_size(std::string_view text, std::size_t& out) {
  text = trim(text);
  if (text.empty() || text.size() > 19) return false;
  for (char c : text)
    if (c < '0' || c > '9') return false;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && p == text.data() + text.size();
}

bool contains_token(std::string_view value, std::string_view token) {
  while (!value.empty()) {
    std::size_t comma = value.find(',');
    if (iequals(trim(value.substr(0, comma)), token)) return true;
    if (comma == std::string_view::npos) break;
    value.remove_prefix(comma + 1);
  }
  return false;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

int parse_request_head(std::string_view head, RequestHead& out, std::string& why) {
  out = RequestHead{};
  auto lines = split_lines(head);
  if (lines.empty() || lines[0].empty()) {
    why = "empty request line";
    return 400;
  }
  // Request line: METHOD SP target SP HTTP/1.x
  std::string_view rl = lines[0];
  std::size_t sp1 = rl.find(' ');
  std::size_t sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
  if (sp1 == std::string_view::npos || sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos) {
    why = "malformed request line";
    return 400;
  }
  std::string_view method = rl.substr(0, sp1);
  std::string_view target = rl.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = rl.substr(sp2 + 1);
  if (method.empty()) {
    why = "empty method";
    return 400;
  }
  for (char c : method) {
    if (!is_token_char(c)) {
      why = "malformed method";
      return 400;
    }
  }
  if (version.size() != 8 || version.substr(0, 7) != "HTTP/1." || (version[7] != '0' && version[7] != '1')) {
    why = "unsupported HTTP version";
    return version.substr(0, 5) == "HTTP/" ? 505 : 400;
  }
  out.method = std::string(method);
  out.minor_version = version[7] - '0';
  out.keep_alive = out.minor_version == 1;

  // Absolute-form targets ("http://host:port/scope/key") are allowed by RFC 7230.
  if (target.substr(0, 7) == "http://") {
    std::size_t slash = target.find('/', 7);
    target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
  }
  if (target.empty() || target[0] != '/') {
    why = "request target must start with '/'";
    return 400;
  }
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      why = "request target contains control or non-ASCII bytes";
      return 400;
    }
  }
  std::size_t q = target.find('?');
  std::string_view raw_path = target.substr(1, q == std::string_view::npos ? std::string_view::npos : q - 1);
  if (q != std::string_view::npos) out.query = std::string(target.substr(q + 1));
  auto decoded = percent_decode(raw_path);
  if (!decoded) {
    why = "malformed percent-escape in path";
    return 400;
  }
  out.path = std::move(*decoded);

  for (std::size_t i = 1; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    if (line.empty()) continue;
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos || colon == 0) {
      why = "malformed header line";
      return 400;
    }
    std::string_view name = line.substr(0, colon);
    for (char c : name) {
      if (!is_token_char(c)) {
        why = "malformed header name";
        return 400;
      }
    }
    std::string_view value = trim(line.substr(colon + 1));
    if (iequals(name, "Content-Length")) {
      std::size_t n = 0;
      if (!parse_size(value, n) || (out.content_length && *out.content_length != n)) {
        why = "invalid Content-Length";
        return 400;
      }
      out.content_length = n;
    } else if (iequals(name, "Transfer-Encoding")) {
      why = "Transfer-Encoding is not supported; send Content-Length";
      return 501;
    } else if (iequals(name, "Connection")) {
      if (contains_token(value, "close")) out.keep_alive = false;
      if (contains_token(value, "keep-alive")) out.keep_alive = true;
    } else if (iequals(name, "Expect")) {
      out.expect_continue = iequals(value, "100-continue");
    } else if (iequals(name, kSecretHeader)) {
      out.secret = std::string(value);
    }
  }
  return 0;
}

bool parse_response_head(std::string_view head, ResponseHead& out, std::string& why) {
  out = ResponseHead{};
  auto lines = split_lines(head);
  if (lines.empty()) {
    why = "empty response";
    return false;
  }
  std::string_view sl = lines[0];
  if (sl.size() < 12 || sl.substr(0, 7) != "HTTP/1." || sl[8] != ' ') {
    why = "not an HTTP/1.x response";
    return false;
  }
  out.keep_alive = sl[7] == '1';
  std::string_view code = sl.substr(9, 3);
  int status = 0;
  auto [p, ec] = std::from_chars(code.data(), code.data() + 3, status);
  if (ec != std::errc() || p != code.data() + 3 || status < 100 || status > 599) {
    why = "malformed status code";
    return false;
  }
  out.status = status;
  bool have_length = false;
  for (std::size_t i = 1; i < lines.size(); ++i) {
    std::string_view line = lines[i];
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string_view name = line.substr(0, colon);
    std::string_view value = trim(line.substr(colon + 1));
    if (iequals(name, "Content-Length")) {
      if (!parse_size(value, out.content_length)) {
        why = "invalid Content-Length in response";
        return false;
      }
      have_length = true;
    } else if (iequals(name, "Connection")) {
      if (contains_token(value, "close")) out.keep_alive = false;
    } else if (iequals(name, "Transfer-Encoding")) {
      why = "chunked responses are not supported";
      return false;
    }
  }
  if (!have_length) {
    why = "response without Content-Length";
    return false;
  }
  return true;
}

std::string percent_encode_path(std::string_view key) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  return out;
}

std::optional<std::string> percent_decode(std::string_view text) {
  auto hexval = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    int hi = hexval(text[i + 1]), lo = hexval(text[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

std::optional<std::string> query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    std::size_t amp = query.find('&');
    std::string_view part = query.substr(0, amp);
    std::size_t eq = part.find('=');
    if (part.substr(0, eq) == name) {
      return std::string(eq == std::string_view::npos ? std::string_view() : part.substr(eq + 1));
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

const char* reason_phrase(int status) {
  switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Payload Too Large";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

}  // namespace hvd::store::http
