// Allreduce: every rank ends with the element-wise reduction of all ranks'
// buffers, in place.
//
// Two algorithms, chosen by message size:
//  * direct exchange (small messages, at most kSmallMaxRanks ranks): every
//    rank sends its whole buffer to every peer and receives theirs, all at
//    once, then reduces the size contributions locally in rank order. One
//    round trip instead of 2(size-1) ring steps; the rank-order reduction
//    makes every rank compute bit-identical results.
//  * ring (large messages): reduce-scatter then allgather (ring.cpp), which
//    moves 2(size-1)/size of the buffer per rank -- bandwidth optimal.
// Prescale is applied to the local input before anything is sent; average
// and postscale are applied once to the finished result (in the ring, only
// to the chunk this rank owns, before the allgather spreads it).
#include "hvd/collective/algorithms.h"

#include "algorithms/reduce.h"
#include "common.h"
#include "ring.h"

#include "hvd/transport/link.h"

#include <algorithm>
#include <cstring>

namespace hvd::collective {

namespace {

void direct_allreduce(Comm& comm, char* data, std::size_t count, DataType dtype, ReduceOp op, double postscale) {
  const int n = comm.size();
  const int r = comm.rank();
  const std::size_t bytes = count * dtype_size(dtype);
  char* slots = comm.scratch(0, bytes * static_cast<std::size_t>(n));
  std::vector<transport::Transfer> ts;
  ts.reserve(2 * static_cast<std::size_t>(n));
  for (int p = 0; p < n; ++p) {
    if (p == r) continue;
    ts.push_back(transport::Transfer::send(comm.link(p), data, bytes));
    ts.push_back(transport::Transfer::recv(comm.link(p), slots + bytes * p, bytes));
  }
  transport::progress(ts.data(), ts.size());
  if (r != 0) {
    std::memcpy(slots + bytes * r, data, bytes);
    std::memcpy(data, slots, bytes);
  }
  for (int p = 1; p < n; ++p) detail::reduce_into(dtype, op, data, slots + bytes * p, count);
  detail::finalize(dtype, op, data, count, n, postscale);
}

void ring_allreduce(Comm& comm, char* data, std::size_t count, DataType dtype, ReduceOp op, double postscale) {
  const int n = comm.size();
  const int r = comm.rank();
  const std::size_t es = dtype_size(dtype);
  std::vector<std::size_t> elems(n);
  for (int c = 0; c < n; ++c) elems[c] = count / n + (static_cast<std::size_t>(c) < count % n ? 1 : 0);
  char* tmp = comm.scratch(0, std::min(detail::kSegmentBytes, elems[0] * es));
  detail::ring_reduce_scatter(comm, data, elems, dtype, op, tmp);
  std::vector<std::size_t> bytes(n);
  std::size_t own_off = 0;
  for (int c = 0; c < n; ++c) {
    bytes[c] = elems[c] * es;
    if (c < r) own_off += bytes[c];
  }
  detail::finalize(dtype, op, data + own_off, elems[r], n, postscale);
  detail::ring_allgather(comm, data, bytes);
}

}  // namespace

void allreduce(Comm& comm, void* data, std::size_t count, DataType dtype, ReduceOp op, double prescale,
               double postscale) {
  if (op == ReduceOp::Adasum) {
    adasum_allreduce(comm, data, {count}, dtype, prescale, postscale);
    return;
  }
  const std::size_t es = dtype_size(dtype);
  (void)reduce_op_name(op);
  if (static_cast<int>(op) < 0 || static_cast<int>(op) > static_cast<int>(ReduceOp::Product)) {
    throw InvalidArgument(fmt::format("allreduce: unknown reduce op {}", static_cast<int>(op)));
  }
  if (count > 0 && data == nullptr) throw InvalidArgument("allreduce: null buffer with a non-zero count");
  detail::guarded(comm, "allreduce", [&] {
    if (count == 0) return;
    char* buf = static_cast<char*>(data);
    detail::scale(dtype, buf, count, prescale);
    const int n = comm.size();
    if (n == 1) {
      detail::finalize(dtype, op, buf, count, 1, postscale);
    } else if (n <= detail::kSmallMaxRanks && count * es <= detail::direct_allreduce_limit(comm)) {
      if (detail::pair_allreduce_in_ring(comm, buf, count, dtype, op)) {  // 2 ranks over shared memory
        detail::finalize(dtype, op, buf, count, n, postscale);
      } else {
        direct_allreduce(comm, buf, count, dtype, op, postscale);
      }
    } else {
      ring_allreduce(comm, buf, count, dtype, op, postscale);
    }
  });
}

}  // namespace hvd::collective
