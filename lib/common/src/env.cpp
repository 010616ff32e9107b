#include "hvd/common/env.h"

#include "hvd/common/error.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

namespace hvd::env {

std::optional<std::string> get(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

std::string get_or(const std::string& name, const std::string& fallback) {
  auto v = get(name);
  return v ? *v : fallback;
}

std::optional<int64_t> parse_int(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end == text.c_str() || *end != '\0') return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<double> parse_double(const std::string& text) {
  if (text.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (errno != 0 || end == text.c_str() || *end != '\0') return std::nullopt;
  return v;
}

std::optional<int64_t> get_int(const std::string& name) {
  auto v = get(name);
  if (!v) return std::nullopt;
  auto parsed = parse_int(*v);
  if (!parsed) throw InvalidArgument(fmt::format("{}='{}' is not an integer", name, *v));
  return parsed;
}

int64_t get_int_or(const std::string& name, int64_t fallback) {
  auto v = get_int(name);
  return v ? *v : fallback;
}

std::optional<double> get_double(const std::string& name) {
  auto v = get(name);
  if (!v) return std::nullopt;
  auto parsed = parse_double(*v);
  if (!parsed) throw InvalidArgument(fmt::format("{}='{}' is not a number", name, *v));
  return parsed;
}

double get_double_or(const std::string& name, double fallback) {
  auto v = get_double(name);
  return v ? *v : fallback;
}

bool get_bool_or(const std::string& name, bool fallback) {
  auto v = get(name);
  if (!v) return fallback;
  std::string t = *v;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off" || t.empty()) return false;
  throw InvalidArgument(fmt::format("{}='{}' is not a boolean (use 1/0, true/false)", name, *v));
}

}  // namespace hvd::env
