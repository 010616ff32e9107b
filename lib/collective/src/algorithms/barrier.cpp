// Barrier: no rank leaves before every rank has entered.
//
// Dissemination barrier: in round k (distance d = 2^k < size) rank r sends a
// token to r+d and waits for one from r-d. After ceil(log2 size) rounds every
// rank has heard, directly or transitively, from every other rank.
#include "hvd/collective/algorithms.h"

#include "common.h"

#include "hvd/transport/link.h"

namespace hvd::collective {

void barrier(Comm& comm) {
  detail::guarded(comm, "barrier", [&] {
    const int n = comm.size();
    const int r = comm.rank();
    for (int d = 1; d < n; d <<= 1) {
      char token = 'b';
      char got = 0;
      transport::sendrecv(comm.link(detail::mod(r + d, n)), &token, 1, comm.link(detail::mod(r - d, n)), &got, 1);
      if (got != 'b') throw IoError(fmt::format("barrier: unexpected byte {} from a peer", int(got)));
    }
  });
}

}  // namespace hvd::collective
