// The elastic membership contract (hvd/store/elastic_world.h).
#include "hvd/common/error.h"
#include "hvd/store/elastic_world.h"

#include <catch2/catch.hpp>

using namespace hvd::store::elastic;

TEST_CASE("elastic keys are stable and versioned", "[elastic_world]") {
  CHECK(world_key(3) == "elastic/world/3");
  CHECK(ready_key("w7") == "elastic/ready/w7");
  CHECK(comm_prefix(12) == "elastic/gen12/");
  CHECK(std::string(kVersionKey) == "elastic/version");
  CHECK(drain_failed_key("w4") == "elastic/drain-failed/w4");
  CHECK(left_key("w4") == "elastic/left/w4");
  CHECK(synced_key("w4") == "elastic/synced/w4");
}

TEST_CASE("a world survives an encode/decode round trip", "[elastic_world]") {
  World w;
  w.version = 4;
  w.reason = "w2 on node1 failed";
  // Every field set to a value of its own, so a field lost or swapped in the
  // JSON shows up. (Rank rules are the launcher's: tests/unit/launcher/plan.)
  w.members = {Member{"w1", "node1", 0, 1, 2, 3, 4}, Member{"w3", "::1", 1, 0, 5, 6, 7}};
  World back = decode_world(encode_world(w));
  CHECK(back.version == 4);
  CHECK(back.reason == w.reason);
  CHECK_FALSE(back.final);
  CHECK(back.members == w.members);
  REQUIRE(back.find("w3") != nullptr);
  CHECK(back.find("w3")->rank == 1);
  CHECK(back.find("w2") == nullptr);
  CHECK(back.draining.empty());
  CHECK(encode_world(w).find("draining") == std::string::npos);  // older readers see the same JSON
  w.final = true;
  CHECK(decode_world(encode_world(w)).final);
  w.draining = {"w2", "w5"};
  CHECK(decode_world(encode_world(w)).draining == std::vector<std::string>{"w2", "w5"});
  CHECK_FALSE(decode_world(encode_world(w)).hold);
  CHECK(encode_world(w).find("hold") == std::string::npos);
  w.hold = true;
  CHECK(decode_world(encode_world(w)).hold);
  CHECK(encode_world(w).find("holders") == std::string::npos);
  CHECK(decode_world(encode_world(w)).holders.empty());
  w.holders = {"w3"};
  CHECK(decode_world(encode_world(w)).holders == std::vector<std::string>{"w3"});
}

TEST_CASE("malformed worlds are refused with a reason", "[elastic_world]") {
  CHECK_THROWS_AS(decode_world(""), hvd::InvalidArgument);
  CHECK_THROWS_AS(decode_world("{\"version\": 1}"), hvd::InvalidArgument);
  CHECK_THROWS_WITH(decode_world("garbage\x01\x02"), Catch::Contains("malformed elastic world"));
  // ranks must be 0..n-1 in order
  CHECK_THROWS_WITH(decode_world(R"({"version":1,"members":[{"id":"w1","host":"a","rank":1,"local_rank":0,
      "local_size":1,"cross_rank":0,"cross_size":1}]})"),
                    Catch::Contains("rank 1, expected 0"));
  CHECK_THROWS_WITH(decode_world(R"({"version":1,"members":[
      {"id":"w1","host":"a","rank":0,"local_rank":0,"local_size":1,"cross_rank":0,"cross_size":1},
      {"id":"w1","host":"a","rank":1,"local_rank":0,"local_size":1,"cross_rank":0,"cross_size":1}]})"),
                    Catch::Contains("listed twice"));
  CHECK_THROWS_AS(decode_world(R"({"version":"x","members":[]})"), hvd::InvalidArgument);
  const std::string one_member =
      R"({"version":2,"members":[{"id":"w1","host":"a","rank":0,"local_rank":0,"local_size":1,"cross_rank":0,)"
      R"("cross_size":1}],"draining":)";
  CHECK(decode_world(one_member + R"(["w2"]})").draining == std::vector<std::string>{"w2"});
  CHECK_THROWS_WITH(decode_world(one_member + R"(["w1"]})"), Catch::Contains("both a member and draining"));
  CHECK_THROWS_WITH(decode_world(one_member + R"(["w2","w2"]})"), Catch::Contains("listed twice"));
  CHECK_THROWS_WITH(decode_world(one_member + R"([""]})"), Catch::Contains("empty id"));
  CHECK_THROWS_AS(decode_world(one_member + R"([3]})"), hvd::InvalidArgument);
  const std::string holders = one_member + R"([],"holders":)";
  CHECK(decode_world(holders + R"(["w1"]})").holders == std::vector<std::string>{"w1"});
  CHECK_THROWS_WITH(decode_world(holders + R"(["w2"]})"), Catch::Contains("holder w2 is not a member"));
  CHECK_THROWS_WITH(decode_world(holders + R"(["w1","w1"]})"), Catch::Contains("holder w1 listed twice"));
}
