#pragma once
/// InMemoryStore: a thread-safe map guarded by one mutex; blocking get/wait
/// sleep on a condition variable (cf. gloo::rendezvous::HashStore).
///
/// It is also the store behind HttpStoreServer, which is why it offers
/// one-shot watchers: the server answers long-polls from an event loop and
/// must be told when a key appears without parking a thread per request.
#include "hvd/store/store.h"

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>

namespace hvd::store {

class InMemoryStore : public Store {
 public:
  using WatchId = uint64_t;

  InMemoryStore() = default;
  InMemoryStore(const InMemoryStore&) = delete;
  InMemoryStore& operator=(const InMemoryStore&) = delete;

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<Bytes> try_get(const std::string& key) override;
  /// Throws InvalidArgument when the stored value is not a decimal integer.
  int64_t add(const std::string& key, int64_t delta) override;
  bool erase(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

  /// Removes every key that starts with `prefix` (not empty); returns how
  /// many there were. The store's owner uses it to drop a finished
  /// generation's keys ("elastic/gen3/"); it is not part of the wire
  /// protocol. Linear in the number of keys.
  std::size_t erase_prefix(const std::string& prefix);

  /// Number of keys (for tests and diagnostics).
  std::size_t size() const;

  /// Atomically: returns the value if `key` exists; otherwise registers
  /// `on_set`, to be called exactly once, without the store's lock held and
  /// on the thread that creates the key (set or add), and stores its id in
  /// `id`. The callback must be cheap and must not throw (post work elsewhere).
  std::optional<Bytes> try_get_or_watch(const std::string& key, std::function<void()> on_set, WatchId& id);
  /// Drops a watcher that has not fired yet; returns whether it was pending.
  bool unwatch(WatchId id);
  /// Pending watchers (for tests: a server must not leak them).
  std::size_t watcher_count() const;

 private:
  /// Collects and unregisters the watchers of `key`; caller holds mu_.
  std::vector<std::function<void()>> take_watchers_locked(const std::string& key);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::unordered_map<std::string, Bytes> data_;
  WatchId next_watch_id_ = 1;
  std::map<WatchId, std::pair<std::string, std::function<void()>>> watchers_;
  std::unordered_multimap<std::string, WatchId> watchers_by_key_;
};

}  // namespace hvd::store
