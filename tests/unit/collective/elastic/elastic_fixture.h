#pragma once
// A fake hvdrun for elastic tests: an authenticated HttpStoreServer on
// 127.0.0.1 that publishes worlds the way the driver does (world_key first,
// then the version key), and MemberOptions for workers that meet there.
#include "hvd/collective/elastic.h"
#include "hvd/collective/elastic_member.h"
#include "hvd/store/elastic_world.h"
#include "hvd/store/http_store.h"

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace hvd::elastic::testing {

inline constexpr const char* kSecret = "elastic-test-secret";

/// Options for worker `id` of a job whose store listens on 127.0.0.1:`port`.
inline MemberOptions member_options(uint16_t port, const std::string& id,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  MemberOptions o;
  o.worker_id = id;
  o.open_store = [port]() -> std::shared_ptr<store::Store> {
    store::ClientOptions c;
    c.host = "127.0.0.1";
    c.port = port;
    c.secret = kSecret;
    c.connect_timeout = std::chrono::seconds(5);
    return std::make_shared<store::HttpStoreClient>(c);
  };
  o.settings.secret = kSecret;
  o.settings.bind_address = "127.0.0.1";
  o.settings.hostname = "localhost";
  o.settings.start_timeout = std::chrono::seconds(10);
  o.timeout = timeout;
  o.ready_value = "localhost " + id;
  return o;
}

class FakeDriver {
 public:
  FakeDriver() : server_(make_options()) { server_.start(); }

  uint16_t port() const { return server_.port(); }
  store::InMemoryStore& store() { return server_.store(); }

  /// Publishes world `version` with `ids` in rank order, all on one host
  /// (so local rank = rank and there is one cross rank); `holders`: the
  /// members hvdrun knows to hold the trained state (World::holders).
  void publish(uint64_t version, const std::vector<std::string>& ids, bool final = false,
               const std::string& reason = "test", const std::vector<std::string>& draining = {},
               bool hold = false, const std::vector<std::string>& holders = {}) {
    store::elastic::World w;
    w.draining = draining;
    w.hold = hold;
    w.holders = holders;
    w.version = version;
    const int size = static_cast<int>(ids.size());
    for (int rank = 0; rank < size; ++rank) {
      w.members.push_back(store::elastic::Member{ids[static_cast<size_t>(rank)], "localhost", rank, rank, size, 0, 1});
    }
    w.reason = reason;
    w.final = final;
    store().set_string(store::elastic::world_key(version), store::elastic::encode_world(w));
    store().set_string(store::elastic::kVersionKey, std::to_string(version));
  }

  std::shared_ptr<store::Store> client() const {
    store::ClientOptions o;
    o.host = "127.0.0.1";
    o.port = server_.port();
    o.secret = kSecret;
    o.connect_timeout = std::chrono::seconds(5);
    return std::make_shared<store::HttpStoreClient>(o);
  }

  MemberOptions options(const std::string& id, std::chrono::milliseconds timeout = std::chrono::seconds(20)) const {
    return member_options(server_.port(), id, timeout);
  }

 private:
  static store::ServerOptions make_options() {
    store::ServerOptions o;
    o.bind_address = "127.0.0.1";
    o.secret = kSecret;
    o.max_wait = std::chrono::seconds(5);
    return o;
  }
  store::HttpStoreServer server_;
};

}  // namespace hvd::elastic::testing
