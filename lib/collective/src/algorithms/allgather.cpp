// Allgatherv: every rank contributes a block (sizes may differ per rank) and
// every rank ends with all blocks back to back in rank order.
//
// Small totals on small worlds use a direct exchange (send our block to every
// peer, receive every peer's block straight into place, all at once: one
// round). Otherwise the ring allgather (ring.cpp) forwards one block per step
// around the ring, size-1 steps, each link busy in both directions.
#include "hvd/collective/algorithms.h"

#include "common.h"
#include "ring.h"

#include "hvd/transport/link.h"

#include <cstring>

namespace hvd::collective {

void allgatherv(Comm& comm, const void* send, std::size_t send_bytes, void* recv,
                const std::vector<std::size_t>& recv_bytes) {
  detail::check_per_rank(comm, recv_bytes, "allgatherv", "recv_bytes");
  const int n = comm.size();
  const int r = comm.rank();
  if (recv_bytes[r] != send_bytes) {
    throw InvalidArgument(
        fmt::format("allgatherv: rank {} sends {} bytes but recv_bytes[{}] is {}", r, send_bytes, r, recv_bytes[r]));
  }
  const std::vector<std::size_t> off = detail::offsets_of(recv_bytes);
  if (off[n] > 0 && recv == nullptr) throw InvalidArgument("allgatherv: null receive buffer");
  if (send_bytes > 0 && send == nullptr) throw InvalidArgument("allgatherv: null send buffer");
  detail::guarded(comm, "allgatherv", [&] {
    char* out = static_cast<char*>(recv);
    if (send_bytes > 0 && send != out + off[r]) std::memmove(out + off[r], send, send_bytes);
    if (n == 1 || off[n] == 0) return;
    if (off[n] <= detail::kSmallBytes * 2 && n <= detail::kSmallMaxRanks) {
      std::vector<transport::Transfer> ts;
      ts.reserve(2 * static_cast<std::size_t>(n));
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        ts.push_back(transport::Transfer::send(comm.link(p), out + off[r], send_bytes));
        ts.push_back(transport::Transfer::recv(comm.link(p), out + off[p], recv_bytes[p]));
      }
      transport::progress(ts.data(), ts.size());
    } else {
      detail::ring_allgather(comm, out, recv_bytes);
    }
  });
}

}  // namespace hvd::collective
