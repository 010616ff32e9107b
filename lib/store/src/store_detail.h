#pragma once
/// Helpers shared by the store implementations (not installed).
#include "hvd/common/io.h"
#include "hvd/store/store.h"

#include <chrono>
#include <string>
#include <vector>

namespace hvd::store::detail {

/// now + timeout, clamped so that huge timeouts (milliseconds::max) never
/// overflow the clock; negative timeouts mean "now".
Clock::time_point deadline_after(std::chrono::milliseconds timeout);

/// "a, b, c" (each key quoted) for error messages.
std::string join_keys(const std::vector<std::string>& keys);

/// The one TimeoutError message every store throws, so callers and tests see
/// the same wording: "rendezvous store: timed out after 500 ms waiting for key(s) 'a', 'b'".
[[noreturn]] void throw_timeout(const std::vector<std::string>& missing, std::chrono::milliseconds timeout);

/// Parses a stored counter (decimal text, optional sign); InvalidArgument
/// naming the key otherwise.
int64_t parse_counter(const std::string& key, const Bytes& value);
/// a + b; InvalidArgument on int64 overflow.
int64_t checked_add(const std::string& key, int64_t a, int64_t b);
Bytes counter_bytes(int64_t v);

}  // namespace hvd::store::detail
