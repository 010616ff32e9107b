#pragma once
/// The rendezvous Store: the only thing transport and collective code know
/// about how peers find each other (cf. gloo::rendezvous::Store, c10d::Store).
///
/// Keys are '/'-free-at-the-edges strings such as "global/rank_3/addr"; on the
/// HTTP wire the first path segment is Horovod's "scope" (PUT /<scope>/<key>).
/// Values are opaque bytes.
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hvd::store {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  virtual ~Store() = default;

  /// Creates or overwrites `key`. Wakes every waiter on it.
  virtual void set(const std::string& key, const Bytes& value) = 0;

  /// Blocks until `key` exists, then returns its value.
  /// Throws hvd::TimeoutError naming the key after `timeout`,
  /// hvd::IoError when the store cannot be reached.
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout) = 0;

  /// Returns the value if the key exists now; never blocks on the key.
  virtual std::optional<Bytes> try_get(const std::string& key) = 0;

  /// Atomically adds `delta` to the integer stored at `key` (a missing key
  /// counts as 0; the value is stored as decimal text) and returns the result.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  /// Removes `key`; returns whether it existed.
  virtual bool erase(const std::string& key) = 0;

  /// Blocks until every key exists; TimeoutError naming the missing keys.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;

  // Convenience for text values.
  void set_string(const std::string& key, const std::string& value) { set(key, Bytes(value.begin(), value.end())); }
  std::string get_string(const std::string& key, std::chrono::milliseconds timeout) {
    Bytes b = get(key, timeout);
    return std::string(b.begin(), b.end());
  }
};

}  // namespace hvd::store
