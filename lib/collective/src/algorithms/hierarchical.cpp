// Two-level allreduce and allgather (hierarchical.h).
#include "hierarchical.h"

#include "algorithms/reduce.h"
#include "common.h"

#include "hvd/collective/algorithms.h"

#include <fmt/format.h>

namespace hvd::collective::detail {

void hierarchical_allreduce(Comm& local, Comm& cross, void* data, std::size_t count, DataType dtype, ReduceOp op,
                            double prescale, double postscale) {
  if (static_cast<int>(op) < 0 || static_cast<int>(op) > static_cast<int>(ReduceOp::Product)) {
    throw InvalidArgument(fmt::format("allreduce: unknown reduce op {}", static_cast<int>(op)));
  }
  if (count > 0 && data == nullptr) throw InvalidArgument("allreduce: null buffer with a non-zero count");
  if (count == 0) return;
  const int L = local.size();
  const int lr = local.rank();
  const int n = L * cross.size();
  const std::size_t es = dtype_size(dtype);
  // The partial steps sum; the one division by the job size comes last.
  const ReduceOp partial = op == ReduceOp::Average ? ReduceOp::Sum : op;
  std::vector<std::size_t> elems(L), bytes(L);
  for (int i = 0; i < L; ++i) {
    elems[i] = count / L + (static_cast<std::size_t>(i) < count % L ? 1 : 0);
    bytes[i] = elems[i] * es;
  }
  const std::vector<std::size_t> off = offsets_of(bytes);
  char* buf = static_cast<char*>(data);
  char* mine = buf + off[lr];
  if (L > 1) {
    reducescatter(local, buf, mine, elems, dtype, partial, prescale, 1.0);
  } else {
    scale(dtype, buf, count, prescale);
  }
  if (elems[lr] > 0) {
    allreduce(cross, mine, elems[lr], dtype, partial, 1.0, 1.0);
    finalize(dtype, op, mine, elems[lr], n, postscale);
  }
  if (L > 1) allgatherv(local, mine, bytes[lr], buf, bytes);
}

void hierarchical_allgatherv(Comm& local, Comm* leaders, int host, int hosts, const void* send, std::size_t send_bytes,
                             void* recv, const std::vector<std::size_t>& recv_bytes) {
  const int L = local.size();
  if (recv_bytes.size() != static_cast<std::size_t>(L) * hosts) {
    throw InvalidArgument(fmt::format("allgatherv: recv_bytes has {} entries, the job has {} hosts of {} ranks",
                                      recv_bytes.size(), hosts, L));
  }
  if ((local.rank() == 0) != (leaders != nullptr)) {
    throw InvalidArgument("hierarchical allgatherv: the leaders' group is for local rank 0 only");
  }
  const std::vector<std::size_t> off = offsets_of(recv_bytes);
  if (off.back() > 0 && recv == nullptr) throw InvalidArgument("allgatherv: null receive buffer");
  char* out = static_cast<char*>(recv);
  std::vector<std::size_t> host_bytes(hosts);
  for (int h = 0; h < hosts; ++h) host_bytes[h] = off[(h + 1) * L] - off[h * L];
  const std::size_t first = off[host * L];
  const std::size_t last = off[(host + 1) * L];
  const std::vector<std::size_t> mine(recv_bytes.begin() + host * L, recv_bytes.begin() + (host + 1) * L);
  allgatherv(local, send, send_bytes, out + first, mine);
  if (leaders) allgatherv(*leaders, out + first, host_bytes[host], out, host_bytes);
  if (L > 1) {
    if (first > 0) broadcast(local, out, first, 0);
    if (off.back() > last) broadcast(local, out + last, off.back() - last, 0);
  }
}

}  // namespace hvd::collective::detail
