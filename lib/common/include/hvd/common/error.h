#pragma once
/// Error rules (see docs/design.md):
///  * Recoverable failures throw a typed exception derived from hvd::Error.
///    IoError means "a peer or connection failed; the communicator is in an
///    unknown state and must be rebuilt" -- elastic recovery keys on it.
///  * Broken invariants go through HVD_ENFORCE*, which throws hvd::Error with
///    both values and the source location.
///  * Only main() turns outcomes into exit codes; library code never exits.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace hvd {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A peer died, a connection dropped, or bytes on the wire made no sense.
class IoError : public Error {
 public:
  using Error::Error;
};

/// A deadline passed before the awaited thing happened.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

/// The caller passed something that cannot work (bad flag, malformed host,
/// mismatched tensors). The message says what and, where known, where.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

[[noreturn]] void throw_enforce(const char* file, int line, const std::string& what);

}  // namespace hvd

#define HVD_ENFORCE(cond, ...)                                                                       \
  do {                                                                                               \
    if (!(cond)) {                                                                                   \
      ::hvd::throw_enforce(__FILE__, __LINE__,                                                       \
                           std::string("enforce failed: " #cond ": ") + ::fmt::format(__VA_ARGS__)); \
    }                                                                                                \
  } while (0)

#define HVD_ENFORCE_EQ(a, b)                                                                              \
  do {                                                                                                    \
    const auto& hvd_a_ = (a);                                                                             \
    const auto& hvd_b_ = (b);                                                                             \
    if (!(hvd_a_ == hvd_b_)) {                                                                            \
      ::hvd::throw_enforce(__FILE__, __LINE__,                                                            \
                           ::fmt::format("enforce failed: {} == {} ({} vs {})", #a, #b, hvd_a_, hvd_b_)); \
    }                                                                                                     \
  } while (0)
