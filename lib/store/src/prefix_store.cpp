#include "hvd/store/prefix_store.h"

#include "hvd/common/error.h"

namespace hvd::store {

PrefixStore::PrefixStore(Store& base, std::string prefix) : base_(base), prefix_(std::move(prefix)) {
  if (prefix_.empty()) throw InvalidArgument("PrefixStore needs a non-empty prefix such as \"gen3\"");
  if (prefix_.back() != '/') prefix_.push_back('/');
}

void PrefixStore::set(const std::string& key, const Bytes& value) { base_.set(full_key(key), value); }

Bytes PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return base_.get(full_key(key), timeout);
}

std::optional<Bytes> PrefixStore::try_get(const std::string& key) { return base_.try_get(full_key(key)); }

int64_t PrefixStore::add(const std::string& key, int64_t delta) { return base_.add(full_key(key), delta); }

bool PrefixStore::erase(const std::string& key) { return base_.erase(full_key(key)); }

void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::vector<std::string> full;
  full.reserve(keys.size());
  for (const auto& k : keys) full.push_back(full_key(k));
  base_.wait(full, timeout);
}

}  // namespace hvd::store
