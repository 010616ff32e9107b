#pragma once
/// PrefixStore: a namespace inside another store, e.g. one per elastic
/// generation ("gen3/" + key) so a restarted job never reads stale keys
/// (cf. c10d::PrefixStore). Does not own the wrapped store, which must
/// outlive it.
#include "hvd/store/store.h"

namespace hvd::store {

class PrefixStore : public Store {
 public:
  /// `prefix` "gen3" and "gen3/" both give keys "gen3/<key>".
  /// An empty prefix is rejected (InvalidArgument): it would silently share
  /// the parent's namespace.
  PrefixStore(Store& base, std::string prefix);

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  std::optional<Bytes> try_get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  bool erase(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;

  /// The full key in the wrapped store.
  std::string full_key(const std::string& key) const { return prefix_ + key; }
  Store& base() { return base_; }

 private:
  Store& base_;
  std::string prefix_;  ///< always ends with '/'
};

}  // namespace hvd::store
