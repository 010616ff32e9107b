// The wire half of a negotiation cycle (negotiation.h).
#include "engine/negotiation.h"

#include "hvd/collective/algorithms.h"
#include "hvd/common/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>

namespace hvd::collective::detail {

std::vector<RankMessage> Exchange::exchange(Comm& comm, const RankMessage& mine) {
  std::vector<uint8_t> bytes = encode(mine);
  const int size = comm.size();
  if (size == 1) return {decode(bytes.data(), bytes.size())};
  if (bytes.size() > max_message_) {
    throw Error(fmt::format("negotiation message of {} bytes is too large", bytes.size()));
  }

  slot_.assign(kSlot, 0);
  const auto len = static_cast<uint32_t>(bytes.size());
  for (int i = 0; i < 4; ++i) slot_[i] = static_cast<uint8_t>(len >> (8 * i));
  std::memcpy(slot_.data() + 4, bytes.data(), std::min(bytes.size(), kSlotPayload));
  all_slots_.resize(kSlot * static_cast<std::size_t>(size));
  slot_sizes_.assign(static_cast<std::size_t>(size), kSlot);
  allgatherv(comm, slot_.data(), kSlot, all_slots_.data(), slot_sizes_);

  std::vector<std::size_t>& lens = lens_;
  std::vector<std::size_t>& spill = spill_;
  lens.assign(static_cast<std::size_t>(size), 0);
  spill.assign(static_cast<std::size_t>(size), 0);
  std::size_t spill_total = 0;
  for (int r = 0; r < size; ++r) {
    const uint8_t* s = all_slots_.data() + static_cast<std::size_t>(r) * kSlot;
    uint32_t l = 0;
    for (int i = 0; i < 4; ++i) l |= static_cast<uint32_t>(s[i]) << (8 * i);
    if (l > max_message_) throw IoError(fmt::format("rank {} sent a negotiation message of {} bytes", r, l));
    lens[r] = l;
    spill[r] = l > kSlotPayload ? l - kSlotPayload : 0;
    spill_total += spill[r];
  }
  if (spill_total > 0) {
    ++spilled_;
    overflow_.resize(spill_total);
    const uint8_t* my_spill = bytes.size() > kSlotPayload ? bytes.data() + kSlotPayload : nullptr;
    allgatherv(comm, my_spill, spill[comm.rank()], overflow_.data(), spill);
  }
  std::vector<RankMessage> out;
  out.reserve(size);
  std::size_t spill_offset = 0;
  for (int r = 0; r < size; ++r) {
    const uint8_t* s = all_slots_.data() + static_cast<std::size_t>(r) * kSlot + 4;
    if (spill[r] == 0) {
      out.push_back(decode(s, lens[r]));
    } else {
      joined_.assign(s, s + kSlotPayload);
      joined_.insert(joined_.end(), overflow_.begin() + static_cast<std::ptrdiff_t>(spill_offset),
                     overflow_.begin() + static_cast<std::ptrdiff_t>(spill_offset + spill[r]));
      spill_offset += spill[r];
      out.push_back(decode(joined_.data(), joined_.size()));
    }
  }
  return out;
}

}  // namespace hvd::collective::detail
