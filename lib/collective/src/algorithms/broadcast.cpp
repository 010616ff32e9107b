// Broadcast: the root's buffer is copied to every rank, in place.
//
// Ranks are renumbered relative to the root (vrank = rank - root mod size).
//  * binomial tree (small messages, or two ranks): in round k a vrank below
//    2^k sends to vrank + 2^k, so the data reaches everyone in ceil(log2
//    size) rounds. A rank receives once from its parent (its vrank with the
//    lowest set bit cleared) and then sends to its children concurrently.
//  * pipelined chain (large messages): vrank v receives from v-1 and forwards
//    every byte to v+1 as soon as it arrives (the send transfer's `ready`
//    follows the receive), so the total time approaches one message transfer
//    plus (size-2) pipeline fill delays instead of log2(size) full transfers.
#include "hvd/collective/algorithms.h"

#include "common.h"

#include "hvd/transport/link.h"

namespace hvd::collective {

namespace {

constexpr std::size_t kChainBytes = 256 * 1024;

void binomial_broadcast(Comm& comm, char* data, std::size_t bytes, int root) {
  const int n = comm.size();
  const int vr = detail::mod(comm.rank() - root, n);
  int mask = 1;
  while (mask < n) {
    if (vr & mask) {
      comm.link(detail::mod(vr - mask + root, n)).recv(data, bytes);
      break;
    }
    mask <<= 1;
  }
  std::vector<transport::Transfer> ts;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (vr + mask < n)
      ts.push_back(transport::Transfer::send(comm.link(detail::mod(vr + mask + root, n)), data, bytes));
  }
  transport::progress(ts.data(), ts.size());
}

void chain_broadcast(Comm& comm, char* data, std::size_t bytes, int root) {
  const int n = comm.size();
  const int vr = detail::mod(comm.rank() - root, n);
  transport::Link* prev = vr > 0 ? &comm.link(detail::mod(comm.rank() - 1, n)) : nullptr;
  transport::Link* next = vr < n - 1 ? &comm.link(detail::mod(comm.rank() + 1, n)) : nullptr;
  if (!prev) {
    next->send(data, bytes);
  } else if (!next) {
    prev->recv(data, bytes);
  } else {
    transport::Transfer ts[2] = {transport::Transfer::recv(*prev, data, bytes),
                                 transport::Transfer::send(*next, data, bytes)};
    ts[1].ready = 0;
    transport::progress(ts, 2, Deadline::never(), [&] { ts[1].ready = ts[0].done; });
  }
}

}  // namespace

void broadcast(Comm& comm, void* data, std::size_t bytes, int root) {
  if (root < 0 || root >= comm.size()) {
    throw InvalidArgument(fmt::format("broadcast: root {} is outside [0, {})", root, comm.size()));
  }
  if (bytes > 0 && data == nullptr) throw InvalidArgument("broadcast: null buffer with a non-zero size");
  detail::guarded(comm, "broadcast", [&] {
    if (comm.size() == 1 || bytes == 0) return;
    if (bytes < kChainBytes || comm.size() <= 2) {
      binomial_broadcast(comm, static_cast<char*>(data), bytes, root);
    } else {
      chain_broadcast(comm, static_cast<char*>(data), bytes, root);
    }
  });
}

}  // namespace hvd::collective
