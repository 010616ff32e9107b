#include "store_detail.h"

#include "hvd/common/env.h"
#include "hvd/common/error.h"

#include <fmt/format.h>

namespace hvd::store::detail {

Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  const auto now = Clock::now();
  if (timeout.count() <= 0) return now;
  // A year is "forever" for a rendezvous and keeps arithmetic far from overflow.
  constexpr std::chrono::milliseconds kForever = std::chrono::hours(24 * 365);
  return now + (timeout > kForever ? kForever : timeout);
}

std::string join_keys(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) {
    if (!out.empty()) out += ", ";
    out += "'" + k + "'";
  }
  return out;
}

void throw_timeout(const std::vector<std::string>& missing, std::chrono::milliseconds timeout) {
  throw TimeoutError(fmt::format("rendezvous store: timed out after {} ms waiting for key(s) {}", timeout.count(),
                                 join_keys(missing)));
}

int64_t parse_counter(const std::string& key, const Bytes& value) {
  std::string text(value.begin(), value.end());
  auto v = text.find('\0') == std::string::npos ? env::parse_int(text) : std::nullopt;
  if (!v) {
    throw InvalidArgument(
        fmt::format("rendezvous store: key '{}' holds {} bytes that are not a decimal integer; add() needs a counter",
                    key, value.size()));
  }
  return *v;
}

int64_t checked_add(const std::string& key, int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    throw InvalidArgument(fmt::format("rendezvous store: add({}) to key '{}' holding {} overflows int64", b, key, a));
  }
  return out;
}

Bytes counter_bytes(int64_t v) {
  std::string s = std::to_string(v);
  return Bytes(s.begin(), s.end());
}

}  // namespace hvd::store::detail
