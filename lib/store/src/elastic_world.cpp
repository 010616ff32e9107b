// The elastic membership contract: key names and the world's JSON form.
#include "hvd/store/elastic_world.h"

#include "hvd/common/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <set>

namespace hvd::store::elastic {

std::string world_key(uint64_t version) { return fmt::format("elastic/world/{}", version); }

std::string ready_key(const std::string& worker_id) { return "elastic/ready/" + worker_id; }

std::string comm_prefix(uint64_t version) { return fmt::format("elastic/gen{}/", version); }

std::string formed_key(uint64_t version) { return comm_prefix(version) + "formed"; }

std::string reset_key(uint64_t version, const std::string& worker_id) {
  return comm_prefix(version) + "reset/" + worker_id;
}

std::string failure_key(uint64_t version) { return comm_prefix(version) + "failure/first"; }

std::string drain_failed_key(const std::string& worker_id) { return "elastic/drain-failed/" + worker_id; }

std::string left_key(const std::string& worker_id) { return "elastic/left/" + worker_id; }

std::string synced_key(const std::string& worker_id) { return "elastic/synced/" + worker_id; }

const Member* World::find(const std::string& worker_id) const {
  for (const auto& m : members) {
    if (m.worker_id == worker_id) return &m;
  }
  return nullptr;
}

std::string encode_world(const World& world) {
  nlohmann::json j;
  j["version"] = world.version;
  j["reason"] = world.reason;
  j["final"] = world.final;
  nlohmann::json members = nlohmann::json::array();
  for (const auto& m : world.members) {
    members.push_back({{"id", m.worker_id},
                       {"host", m.host},
                       {"rank", m.rank},
                       {"local_rank", m.local_rank},
                       {"local_size", m.local_size},
                       {"cross_rank", m.cross_rank},
                       {"cross_size", m.cross_size}});
  }
  j["members"] = std::move(members);
  if (!world.draining.empty()) j["draining"] = world.draining;
  if (world.hold) j["hold"] = true;
  if (!world.holders.empty()) j["holders"] = world.holders;
  return j.dump();
}

World decode_world(const std::string& text) {
  World w;
  try {
    auto j = nlohmann::json::parse(text);
    w.version = j.at("version").get<uint64_t>();
    w.reason = j.value("reason", std::string());
    w.final = j.value("final", false);
    w.hold = j.value("hold", false);
    std::set<std::string> ids;
    for (const auto& jm : j.at("members")) {
      Member m;
      m.worker_id = jm.at("id").get<std::string>();
      m.host = jm.at("host").get<std::string>();
      m.rank = jm.at("rank").get<int>();
      m.local_rank = jm.at("local_rank").get<int>();
      m.local_size = jm.at("local_size").get<int>();
      m.cross_rank = jm.at("cross_rank").get<int>();
      m.cross_size = jm.at("cross_size").get<int>();
      if (m.worker_id.empty()) throw InvalidArgument("a member has an empty id");
      if (m.rank != static_cast<int>(w.members.size())) {
        throw InvalidArgument(fmt::format("member {} has rank {}, expected {}", m.worker_id, m.rank, w.members.size()));
      }
      if (!ids.insert(m.worker_id).second) throw InvalidArgument("worker id " + m.worker_id + " listed twice");
      w.members.push_back(std::move(m));
    }
    if (j.contains("draining")) {
      std::set<std::string> draining;
      for (const auto& jd : j.at("draining")) {
        std::string id = jd.get<std::string>();
        if (id.empty()) throw InvalidArgument("a draining worker has an empty id");
        if (ids.count(id)) throw InvalidArgument("worker " + id + " is both a member and draining");
        if (!draining.insert(id).second) throw InvalidArgument("draining worker " + id + " listed twice");
        w.draining.push_back(std::move(id));
      }
    }
    if (j.contains("holders")) {
      std::set<std::string> holders;
      for (const auto& jh : j.at("holders")) {
        std::string id = jh.get<std::string>();
        if (!ids.count(id)) throw InvalidArgument("holder " + id + " is not a member");
        if (!holders.insert(id).second) throw InvalidArgument("holder " + id + " listed twice");
        w.holders.push_back(std::move(id));
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw InvalidArgument(fmt::format("malformed elastic world: {}", e.what()));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(fmt::format("malformed elastic world: {}", e.what()));
  }
  return w;
}

}  // namespace hvd::store::elastic
