// Alltoallv: rank r sends block p of its send buffer to rank p and receives
// block q of its receive buffer from rank q (sizes may differ per pair).
//
// Pairwise exchange: in step s (1 .. size-1) rank r sends to r+s and
// receives from r-s at the same time, so every rank is in exactly one send
// and one receive per step and no link is oversubscribed. Small exchanges
// post all transfers at once instead (one round, latency bound).
#include "hvd/collective/algorithms.h"

#include "common.h"

#include "hvd/transport/link.h"

#include <cstring>

namespace hvd::collective {

void alltoallv(Comm& comm, const void* send, const std::vector<std::size_t>& send_bytes, void* recv,
               const std::vector<std::size_t>& recv_bytes) {
  detail::check_per_rank(comm, send_bytes, "alltoallv", "send_bytes");
  detail::check_per_rank(comm, recv_bytes, "alltoallv", "recv_bytes");
  const int n = comm.size();
  const int r = comm.rank();
  if (send_bytes[r] != recv_bytes[r]) {
    throw InvalidArgument(
        fmt::format("alltoallv: rank {} sends itself {} bytes but expects {}", r, send_bytes[r], recv_bytes[r]));
  }
  const std::vector<std::size_t> soff = detail::offsets_of(send_bytes);
  const std::vector<std::size_t> roff = detail::offsets_of(recv_bytes);
  if (soff[n] > 0 && send == nullptr) throw InvalidArgument("alltoallv: null send buffer");
  if (roff[n] > 0 && recv == nullptr) throw InvalidArgument("alltoallv: null receive buffer");
  {
    const char* s0 = static_cast<const char*>(send);
    const char* r0 = static_cast<const char*>(recv);
    if (soff[n] > 0 && roff[n] > 0 && s0 < r0 + roff[n] && r0 < s0 + soff[n]) {
      throw InvalidArgument("alltoallv: send and receive buffers overlap (in-place alltoall is not supported)");
    }
  }
  detail::guarded(comm, "alltoallv", [&] {
    const char* in = static_cast<const char*>(send);
    char* out = static_cast<char*>(recv);
    if (recv_bytes[r] > 0) std::memmove(out + roff[r], in + soff[r], recv_bytes[r]);
    if (n == 1) return;
    if (soff[n] + roff[n] <= 2 * detail::kSmallBytes) {
      std::vector<transport::Transfer> ts;
      ts.reserve(2 * static_cast<std::size_t>(n));
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        ts.push_back(transport::Transfer::send(comm.link(p), in + soff[p], send_bytes[p]));
        ts.push_back(transport::Transfer::recv(comm.link(p), out + roff[p], recv_bytes[p]));
      }
      transport::progress(ts.data(), ts.size());
      return;
    }
    for (int s = 1; s < n; ++s) {
      const int to = detail::mod(r + s, n);
      const int from = detail::mod(r - s, n);
      transport::sendrecv(comm.link(to), in + soff[to], send_bytes[to], comm.link(from), out + roff[from],
                          recv_bytes[from]);
    }
  });
}

}  // namespace hvd::collective
