#include "hvd/common/text.h"

#include <fmt/format.h>

namespace hvd {

namespace {

std::string escape(std::string_view text, std::size_t max_bytes, bool escape_backslash) {
  const std::size_t n = std::min(text.size(), max_bytes);
  std::string out;
  out.reserve(n + 16);
  for (std::size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c == '\\' && escape_backslash) {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c >= 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  if (text.size() > n) out += fmt::format("... ({} bytes)", text.size());
  return out;
}

}  // namespace

std::string shown(std::string_view text, std::size_t max_bytes) { return escape(text, max_bytes, true); }

std::string one_line(std::string_view message, std::size_t max_bytes) { return escape(message, max_bytes, false); }

}  // namespace hvd
