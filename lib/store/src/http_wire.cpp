#include "http_wire.h"

#include <cctype>

namespace hvd::store::http {

namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> percent_decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    const int hi = hex_value(text[i + 1]), lo = hex_value(text[i + 2]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return out;
}

}  // namespace

std::string target_for(std::string_view key, std::string_view query) {
  static const char* hex = "0123456789ABCDEF";
  std::string out = "/";
  out.reserve(key.size() + query.size() + 2);
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
      out.push_back(static_cast<char>(c));
    } else {
      out.push_back('%');
      out.push_back(hex[c >> 4]);
      out.push_back(hex[c & 15]);
    }
  }
  if (!query.empty()) {
    out.push_back('?');
    out.append(query);
  }
  return out;
}

std::optional<Target> parse_target(std::string_view target, std::string& why) {
  if (target.substr(0, 7) == "http://") {
    const std::size_t slash = target.find('/', 7);
    target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
  }
  if (target.empty() || target[0] != '/') {
    why = "request target must start with '/'";
    return std::nullopt;
  }
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      why = "request target contains control or non-ASCII bytes";
      return std::nullopt;
    }
  }
  const std::size_t q = target.find('?');
  auto key = percent_decode(target.substr(1, q == std::string_view::npos ? std::string_view::npos : q - 1));
  if (!key) {
    why = "malformed percent-escape in path";
    return std::nullopt;
  }
  Target out;
  out.key = std::move(*key);
  if (q != std::string_view::npos) out.query = std::string(target.substr(q + 1));
  return out;
}

std::optional<std::string> query_param(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view part = query.substr(0, amp);
    const std::size_t eq = part.find('=');
    if (part.substr(0, eq) == name) {
      return std::string(eq == std::string_view::npos ? std::string_view() : part.substr(eq + 1));
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

}  // namespace hvd::store::http
