#include "hvd/store/memory_store.h"

#include "store_detail.h"

#include "hvd/common/error.h"

namespace hvd::store {

std::vector<std::function<void()>> InMemoryStore::take_watchers_locked(const std::string& key) {
  std::vector<std::function<void()>> fired;
  auto range = watchers_by_key_.equal_range(key);
  for (auto it = range.first; it != range.second; ++it) {
    auto w = watchers_.find(it->second);
    if (w != watchers_.end()) {
      fired.push_back(std::move(w->second.second));
      watchers_.erase(w);
    }
  }
  watchers_by_key_.erase(range.first, range.second);
  return fired;
}

void InMemoryStore::set(const std::string& key, const Bytes& value) {
  std::vector<std::function<void()>> fired;
  {
    std::lock_guard<std::mutex> lock(mu_);
    data_[key] = value;
    fired = take_watchers_locked(key);
  }
  cv_.notify_all();
  for (auto& f : fired) f();
}

Bytes InMemoryStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  const auto deadline = detail::deadline_after(timeout);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    auto it = data_.find(key);
    if (it != data_.end()) return it->second;
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !data_.count(key)) {
      detail::throw_timeout({key}, timeout);
    }
  }
}

std::optional<Bytes> InMemoryStore::try_get(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

int64_t InMemoryStore::add(const std::string& key, int64_t delta) {
  std::vector<std::function<void()>> fired;
  int64_t result = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = data_.find(key);
    const int64_t current = it == data_.end() ? 0 : detail::parse_counter(key, it->second);
    result = detail::checked_add(key, current, delta);
    data_[key] = detail::counter_bytes(result);
    fired = take_watchers_locked(key);
  }
  cv_.notify_all();
  for (auto& f : fired) f();
  return result;
}

bool InMemoryStore::erase(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.erase(key) > 0;
}

std::size_t InMemoryStore::erase_prefix(const std::string& prefix) {
  if (prefix.empty()) throw InvalidArgument("InMemoryStore::erase_prefix: the prefix must not be empty");
  std::lock_guard<std::mutex> lock(mu_);
  std::size_t erased = 0;
  for (auto it = data_.begin(); it != data_.end();) {
    if (it->first.compare(0, prefix.size(), prefix) == 0) {
      it = data_.erase(it);
      ++erased;
    } else {
      ++it;
    }
  }
  return erased;
}

void InMemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  const auto deadline = detail::deadline_after(timeout);
  std::unique_lock<std::mutex> lock(mu_);
  auto missing = [&] {
    std::vector<std::string> out;
    for (const auto& k : keys)
      if (!data_.count(k)) out.push_back(k);
    return out;
  };
  for (;;) {
    auto m = missing();
    if (m.empty()) return;
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      m = missing();
      if (m.empty()) return;
      detail::throw_timeout(m, timeout);
    }
  }
}

std::size_t InMemoryStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return data_.size();
}

std::optional<Bytes> InMemoryStore::try_get_or_watch(const std::string& key, std::function<void()> on_set,
                                                     WatchId& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  if (it != data_.end()) {
    id = 0;
    return it->second;
  }
  id = next_watch_id_++;
  watchers_.emplace(id, std::make_pair(key, std::move(on_set)));
  watchers_by_key_.emplace(key, id);
  return std::nullopt;
}

bool InMemoryStore::unwatch(WatchId id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = watchers_.find(id);
  if (it == watchers_.end()) return false;
  auto range = watchers_by_key_.equal_range(it->second.first);
  for (auto k = range.first; k != range.second; ++k) {
    if (k->second == id) {
      watchers_by_key_.erase(k);
      break;
    }
  }
  watchers_.erase(it);
  return true;
}

std::size_t InMemoryStore::watcher_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return watchers_.size();
}

}  // namespace hvd::store
