// Reducescatter: the send buffer is cut into one segment per rank
// (recv_counts[r] elements for rank r, back to back); rank r receives the
// reduction of every rank's segment r.
//
// Small inputs on small worlds: each rank sends segment p straight to rank p
// and reduces the size contributions to its own segment in rank order (one
// round). Otherwise: the ring reduce-scatter (ring.cpp) on a working copy of
// the input (the input is const), after which the own chunk is copied out.
// Uneven counts, including zero, are fine: chunk boundaries follow
// recv_counts exactly.
#include "hvd/collective/algorithms.h"

#include "algorithms/reduce.h"
#include "common.h"
#include "ring.h"

#include "hvd/transport/link.h"

#include <algorithm>
#include <cstring>

namespace hvd::collective {

void reducescatter(Comm& comm, const void* send, void* recv, const std::vector<std::size_t>& recv_counts,
                   DataType dtype, ReduceOp op, double prescale, double postscale) {
  detail::check_per_rank(comm, recv_counts, "reducescatter", "recv_counts");
  const std::size_t es = dtype_size(dtype);
  if (op == ReduceOp::Adasum) throw InvalidArgument("reducescatter: Adasum is an allreduce-only operation");
  if (static_cast<int>(op) < 0 || static_cast<int>(op) > static_cast<int>(ReduceOp::Product)) {
    throw InvalidArgument(fmt::format("reducescatter: unknown reduce op {}", static_cast<int>(op)));
  }
  const int n = comm.size();
  const int r = comm.rank();
  std::vector<std::size_t> bytes(n);
  for (int p = 0; p < n; ++p) bytes[p] = recv_counts[p] * es;
  const std::vector<std::size_t> off = detail::offsets_of(bytes);
  if (off[n] > 0 && send == nullptr) throw InvalidArgument("reducescatter: null send buffer");
  if (bytes[r] > 0 && recv == nullptr) throw InvalidArgument("reducescatter: null receive buffer");
  detail::guarded(comm, "reducescatter", [&] {
    if (off[n] == 0) return;
    const char* in = static_cast<const char*>(send);
    char* out = static_cast<char*>(recv);
    if (n == 1) {
      std::memmove(out, in, bytes[0]);
      detail::scale(dtype, out, recv_counts[0], prescale);
      detail::finalize(dtype, op, out, recv_counts[0], 1, postscale);
      return;
    }
    if (off[n] <= detail::kSmallBytes && n <= detail::kSmallMaxRanks) {
      // work: the prescaled input; slots: every peer's copy of our segment.
      char* work = comm.scratch(1, off[n]);
      std::memcpy(work, in, off[n]);
      detail::scale(dtype, work, off[n] / es, prescale);
      char* slots = comm.scratch(0, bytes[r] * n);
      std::vector<transport::Transfer> ts;
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        ts.push_back(transport::Transfer::send(comm.link(p), work + off[p], bytes[p]));
        ts.push_back(transport::Transfer::recv(comm.link(p), slots + bytes[r] * p, bytes[r]));
      }
      transport::progress(ts.data(), ts.size());
      std::memcpy(slots + bytes[r] * r, work + off[r], bytes[r]);
      std::memcpy(out, slots, bytes[r]);
      for (int p = 1; p < n; ++p) detail::reduce_into(dtype, op, out, slots + bytes[r] * p, recv_counts[r]);
      detail::finalize(dtype, op, out, recv_counts[r], n, postscale);
      return;
    }
    char* work = comm.scratch(1, off[n]);
    std::memcpy(work, in, off[n]);
    detail::scale(dtype, work, off[n] / es, prescale);
    char* tmp = comm.scratch(0, std::min(detail::kSegmentBytes, *std::max_element(bytes.begin(), bytes.end())));
    detail::ring_reduce_scatter(comm, work, recv_counts, dtype, op, tmp);
    std::memcpy(out, work + off[r], bytes[r]);
    detail::finalize(dtype, op, out, recv_counts[r], n, postscale);
  });
}

}  // namespace hvd::collective
