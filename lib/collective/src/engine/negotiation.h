#pragma once
// The wire half of a negotiation cycle: every rank's RankMessage to every
// rank (the message format is message.h; what the messages mean is
// controller.h). Kept apart from the background loop (context.cpp) so that
// it has tests of its own (tests/unit/collective/engine/test_exchange.cpp).
#include "engine/message.h"

#include "hvd/collective/comm.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hvd::collective::detail {

/// Each rank sends a fixed slot -- a 4-byte little-endian length and the
/// first kSlotPayload bytes of its encoded message -- in one all-gather, so
/// the common cycle (small messages) costs one collective. Only when some
/// rank's message is longer does a second all-gatherv carry the rest of the
/// long ones; every rank learns that from the slots, so all ranks make the
/// same calls. Buffers are kept between cycles.
class Exchange {
 public:
  static constexpr std::size_t kSlot = 128;
  static constexpr std::size_t kSlotPayload = kSlot - 4;
  static constexpr std::size_t kMaxMessage = 256u << 20;

  /// max_message: the longest message sent or accepted (tests lower it).
  explicit Exchange(std::size_t max_message = kMaxMessage) : max_message_(max_message) {}

  /// Every rank's message in rank order (this rank's included, decoded from
  /// its own bytes as the others decode it). Throws hvd::Error before
  /// sending a message over max_message, and hvd::IoError when a peer
  /// announces one or sends bytes that do not decode; the Comm's own errors
  /// (a peer gone) propagate.
  std::vector<RankMessage> exchange(Comm& comm, const RankMessage& mine);

  /// Cycles that needed the second all-gather.
  uint64_t spilled_cycles() const { return spilled_; }

 private:
  std::size_t max_message_;
  uint64_t spilled_ = 0;
  // Reused every cycle (the loop runs one exchange per cycle time).
  std::vector<uint8_t> slot_, all_slots_, overflow_, joined_;
  std::vector<std::size_t> slot_sizes_, lens_, spill_;
};

}  // namespace hvd::collective::detail
