#include "hvd/launcher/process/shell.h"

#include <fmt/format.h>

#include "hvd/common/error.h"

#include <cctype>
#include <cstdlib>
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

std::vector<std::string> split_shell_words(const std::string& text, const std::string& flag) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(word));
      word.clear();
      in_word = false;
    } else if (c == '\'') {
      std::size_t end = text.find('\'', i + 1);
      if (end == std::string::npos) {
        throw InvalidArgument(fmt::format("{} '{}': unterminated single quote", flag, text));
      }
      word += text.substr(i + 1, end - i - 1);
      in_word = true;
      i = end;
    } else if (c == '"') {
      std::size_t j = i + 1;
      for (; j < text.size() && text[j] != '"'; ++j) {
        // Inside double quotes a backslash escapes only $ ` " \ and newline.
        if (text[j] == '\\' && j + 1 < text.size() && std::string("$`\"\\\n").find(text[j + 1]) != std::string::npos) {
          ++j;
        }
        word += text[j];
      }
      if (j >= text.size()) {
        throw InvalidArgument(fmt::format("{} '{}': unterminated double quote", flag, text));
      }
      in_word = true;
      i = j;
    } else if (c == '\\') {
      if (i + 1 < text.size()) word += text[++i];
      in_word = true;
    } else {
      word += c;
      in_word = true;
    }
  }
  if (in_word) words.push_back(std::move(word));
  return words;
}

std::vector<std::string> user_shell_argv(const std::string& command) {
  const char* sh = std::getenv("SHELL");
  return {sh != nullptr && *sh != '\0' ? sh : "/bin/sh", "-c", command};
}

}  // namespace hvd::launcher
