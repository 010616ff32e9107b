// The wire half of a negotiation cycle (lib/collective/src/engine/negotiation.h):
// ranks as threads over real Comms (loopback TCP or shared memory through
// an InMemoryStore), every rank's RankMessage to every rank.
#include "engine/message.h"
#include "engine/negotiation.h"

#include "comm_world.h"

#include "hvd/common/error.h"
#include "hvd/store/memory_store.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <exception>
#include <string>
#include <thread>
#include <vector>

using namespace hvd::collective;
using namespace hvd::collective::detail;

namespace {

RankMessage message_with(const std::string& prefix, int count, std::size_t name_len = 8) {
  RankMessage m;
  for (int i = 0; i < count; ++i) {
    Request q;
    q.name = fmt::format("{}.{}", prefix, i);
    q.name.resize(std::max(q.name.size(), name_len), 'x');
    q.shape = {i + 1, 3};
    m.requests.push_back(q);
  }
  return m;
}

/// Each rank's exchange() on its own thread; the outcome or the error text per rank.
struct Round {
  std::vector<std::vector<RankMessage>> got;
  std::vector<std::string> errors;
};

Round round(hvd_test::Comms& comms, std::vector<Exchange>& wires, const std::vector<RankMessage>& mine) {
  const int n = static_cast<int>(comms.size());
  Round out{std::vector<std::vector<RankMessage>>(n), std::vector<std::string>(n)};
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      try {
        out.got[r] = wires[r].exchange(*comms[r], mine[r]);
      } catch (const std::exception& e) {
        out.errors[r] = e.what();
        comms[r]->abort(e.what());  // as the background loop does: peers then fail too
      }
    });
  }
  for (auto& t : ts) t.join();
  return out;
}

void require_everyone_got(const Round& res, const std::vector<RankMessage>& sent) {
  for (std::size_t r = 0; r < res.got.size(); ++r) {
    INFO("rank " << r);
    REQUIRE(res.errors[r].empty());
    REQUIRE(res.got[r].size() == sent.size());
    for (std::size_t from = 0; from < sent.size(); ++from) {
      REQUIRE(res.got[r][from].requests == sent[from].requests);
      REQUIRE(res.got[r][from].shutdown == sent[from].shutdown);
      REQUIRE(res.got[r][from].stalled == sent[from].stalled);
    }
  }
}

}  // namespace

TEST_CASE("exchange: small messages fit the slots, one all-gather, rank order", "[negotiation][exchange]") {
  hvd::store::InMemoryStore st;
  auto comms = hvd_test::make_world(st, 3, "xsmall/");
  std::vector<Exchange> wires(3);
  std::vector<RankMessage> sent = {message_with("a", 1), message_with("b", 1), RankMessage{}};
  sent[2].shutdown = true;
  REQUIRE(encode(sent[1]).size() <= Exchange::kSlotPayload);
  auto res = round(comms, wires, sent);
  require_everyone_got(res, sent);
  for (auto& w : wires) REQUIRE(w.spilled_cycles() == 0);
}

TEST_CASE("exchange: long messages spill into a second all-gather, short ones stay in their slots",
          "[negotiation][exchange]") {
  hvd::store::InMemoryStore st;
  auto comms = hvd_test::make_world(st, 4, "xspill/");
  std::vector<Exchange> wires(4);
  // Ranks 0 and 2 long (different lengths), 1 exactly one slot, 3 empty.
  std::vector<RankMessage> sent = {message_with("long", 40, 60), RankMessage{}, message_with("other", 3, 200),
                                   RankMessage{}};
  for (std::size_t len = 0; len < 2 * Exchange::kSlot && encode(sent[1]).size() != Exchange::kSlotPayload; ++len) {
    sent[1].stalled = {std::string(len, 's')};
  }
  REQUIRE(encode(sent[1]).size() == Exchange::kSlotPayload);  // the longest message that needs no spill
  REQUIRE(encode(sent[0]).size() > 1000);
  auto res = round(comms, wires, sent);
  require_everyone_got(res, sent);
  for (auto& w : wires) REQUIRE(w.spilled_cycles() == 1);
  // The buffers are reused: a short cycle after a long one.
  std::vector<RankMessage> next = {message_with("n", 1), message_with("n", 1), message_with("n", 1), RankMessage{}};
  res = round(comms, wires, next);
  require_everyone_got(res, next);
  for (auto& w : wires) REQUIRE(w.spilled_cycles() == 1);
}

TEST_CASE("exchange: one rank alone decodes its own message, no Comm traffic", "[negotiation][exchange]") {
  hvd::store::InMemoryStore st;
  auto comms = hvd_test::make_world(st, 1, "xone/");
  Exchange w(16);  // the limit does not apply to a world of one
  RankMessage m = message_with("solo", 5);
  auto got = w.exchange(*comms[0], m);
  REQUIRE(got.size() == 1);
  REQUIRE(got[0].requests == m.requests);
}

TEST_CASE("exchange: a message over the limit is refused before anything is sent", "[negotiation][exchange]") {
  hvd::store::InMemoryStore st;
  auto comms = hvd_test::make_world(st, 2, "xbig/");
  Exchange w(200);
  RankMessage m = message_with("big", 10, 40);
  REQUIRE(encode(m).size() > 200);
  REQUIRE_THROWS_WITH(w.exchange(*comms[0], m), Catch::Contains("negotiation message of") &&
                                                    Catch::Contains("bytes is too large"));
  // Nothing was sent: the pair still exchanges normally afterwards.
  std::vector<Exchange> wires(2);
  std::vector<RankMessage> sent = {message_with("ok", 1), message_with("ok", 2)};
  require_everyone_got(round(comms, wires, sent), sent);
}

TEST_CASE("exchange: a peer announcing more than the limit is an IoError naming it", "[negotiation][exchange]") {
  hvd::store::InMemoryStore st;
  auto comms = hvd_test::make_world(st, 3, "xpeer/");
  std::vector<Exchange> wires;
  wires.emplace_back(300);
  wires.emplace_back();  // rank 1 accepts (and sends) more than its peers accept
  wires.emplace_back(300);
  std::vector<RankMessage> sent = {RankMessage{}, message_with("huge", 20, 30), RankMessage{}};
  const auto len = encode(sent[1]).size();
  REQUIRE(len > 300);
  auto res = round(comms, wires, sent);
  for (int r : {0, 2}) {
    INFO("rank " << r);
    REQUIRE(res.errors[r] == fmt::format("rank 1 sent a negotiation message of {} bytes", len));
  }
  // Rank 1 may finish this round (the second all-gather needs nothing from
  // its peers); its next collective meets their aborted Comms.
}
