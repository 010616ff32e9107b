// GroupComm (comm.h): a view of some ranks of a connected Comm.
#include "hvd/collective/comm.h"
#include "hvd/collective/errors.h"

#include <fmt/format.h>

#include <algorithm>

namespace hvd::collective {

GroupComm::GroupComm(Comm& parent, std::vector<int> members) : parent_(parent), members_(std::move(members)) {
  if (members_.empty()) throw InvalidArgument("hvd: a group of ranks needs at least one member");
  std::vector<int> sorted = members_;
  std::sort(sorted.begin(), sorted.end());
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end() || sorted.front() < 0 ||
      sorted.back() >= parent_.size()) {
    throw InvalidArgument(fmt::format("hvd: group [{}] is not a set of distinct ranks of a job of size {}",
                                      fmt::join(members_, ","), parent_.size()));
  }
  const auto me = std::find(members_.begin(), members_.end(), parent_.rank());
  if (me == members_.end()) {
    throw InvalidArgument(
        fmt::format("hvd: rank {} is not a member of group [{}]", parent_.rank(), fmt::join(members_, ",")));
  }
  rank_ = static_cast<int>(me - members_.begin());
}

transport::Link& GroupComm::link(int peer) {
  if (peer < 0 || peer >= size() || peer == rank_) {
    throw InvalidArgument(fmt::format("hvd: group rank {} has no link to group rank {}", rank_, peer));
  }
  return parent_.link(members_[peer]);
}

}  // namespace hvd::collective
