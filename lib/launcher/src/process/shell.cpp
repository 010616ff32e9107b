#include "hvd/launcher/process/shell.h"

#include <cctype>
#include <cstring>

namespace hvd::launcher {

std::string shell_quote(const std::string& word) {
  if (word.empty()) return "''";
  bool safe = true;
  for (unsigned char c : word) {
    if (!(std::isalnum(c) || std::strchr("@%+=:,./-_^", c) != nullptr)) {
      safe = false;
      break;
    }
  }
  if (safe) return word;
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  out += '\'';
  return out;
}

std::string shell_join(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    if (!out.empty()) out += ' ';
    out += shell_quote(w);
  }
  return out;
}

}  // namespace hvd::launcher
