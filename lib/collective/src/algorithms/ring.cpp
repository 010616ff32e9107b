// The ring, as in Gloo and Baidu's ring-allreduce.
//
// Ranks form a ring: each sends to its right neighbour (rank + 1) and
// receives from its left neighbour (rank - 1), both at once. The buffer is
// cut into one chunk per rank.
//
// Reduce-scatter: in step s (0 .. size-2) rank r sends chunk (r - 1 - s) and
// receives chunk (r - 2 - s), which it reduces into its own copy of that
// chunk. Every chunk thus travels once around the ring collecting one
// contribution per hop, and after size-1 steps rank r holds the complete
// reduction of chunk r. Each chunk is reduced in one fixed order, so all
// ranks end with bit-identical results.
//
// Allgather: in step s rank r sends block (r - s) and receives block
// (r - s - 1) straight into place; after size-1 steps every rank has every
// block.
//
// Within a step, received data lands in a segment-sized scratch buffer
// (kSegmentBytes, small enough to stay in L2) and is reduced into place as
// soon as a segment is complete: the freshly received bytes are still in
// cache when the reduction reads them, and a large chunk never needs a
// chunk-sized (cache-thrashing) staging buffer.
//
// Over a shared-memory link (SharedMemoryLink::supports_recv_view) there is no staging
// at all: the reduction reads the peer's bytes straight out of the shared
// ring, saving one copy per received byte (the order of the reduction, and
// so the result, is the same).
#include "ring.h"

#include "algorithms/reduce.h"
#include "common.h"

#include "hvd/transport/link.h"
#include "hvd/transport/shared_memory_link.h"

#include <algorithm>

namespace hvd::collective::detail {

namespace {

struct ReduceSink {
  char* target;
  std::size_t reduced;
  std::size_t es;
  DataType dtype;
  ReduceOp op;
};

void reduce_sink(void* ctx, const char* data, std::size_t n) {
  auto* s = static_cast<ReduceSink*>(ctx);
  reduce_into(s->dtype, s->op, s->target + s->reduced, data, n / s->es);
  s->reduced += n;
}

}  // namespace

void ring_reduce_scatter(Comm& comm, char* work, const std::vector<std::size_t>& chunk_elems, DataType dtype,
                         ReduceOp op, char* tmp) {
  const int n = comm.size();
  const int r = comm.rank();
  if (n == 1) return;
  const std::size_t es = dtype_size(dtype);
  std::vector<std::size_t> chunk_bytes(chunk_elems.size());
  for (std::size_t i = 0; i < chunk_elems.size(); ++i) chunk_bytes[i] = chunk_elems[i] * es;
  const std::vector<std::size_t> off = offsets_of(chunk_bytes);
  transport::Link& right = comm.link(mod(r + 1, n));
  transport::Link& left = comm.link(mod(r - 1, n));
  const transport::SharedMemoryLink* left_shm = left.shared_memory();

  for (int s = 0; s < n - 1; ++s) {
    const int send_chunk = mod(r - 1 - s, n);
    const int recv_chunk = mod(r - 2 - s, n);
    char* target = work + off[recv_chunk];
    const std::size_t recv_bytes = chunk_bytes[recv_chunk];
    if (left_shm && left_shm->supports_recv_view() && es <= 16 && (es & (es - 1)) == 0) {
      ReduceSink sink{target, 0, es, dtype, op};
      transport::Transfer ts[2] = {transport::Transfer::send(right, work + off[send_chunk], chunk_bytes[send_chunk]),
                                   transport::Transfer::recv_view(left, recv_bytes, es, &reduce_sink, &sink)};
      transport::progress(ts, 2);
      HVD_ENFORCE(sink.reduced == recv_bytes, "ring reduce-scatter reduced {} of {} bytes", sink.reduced, recv_bytes);
      continue;
    }
    // The receive lands segment by segment in the small (cache-resident)
    // tmp buffer; each full segment is reduced into place and tmp reused.
    std::size_t reduced = 0;
    transport::Transfer ts[2] = {transport::Transfer::send(right, work + off[send_chunk], chunk_bytes[send_chunk]),
                                 transport::Transfer::recv(left, tmp, std::min(kSegmentBytes, recv_bytes))};
    auto consume = [&] {
      if (!ts[1].complete() || ts[1].size == 0) return;
      reduce_into(dtype, op, target + reduced, tmp, ts[1].size / es);
      reduced += ts[1].size;
      ts[1].size = std::min(kSegmentBytes, recv_bytes - reduced);
      ts[1].done = 0;
    };
    transport::progress(ts, 2, Deadline::never(), consume);
    HVD_ENFORCE(reduced == recv_bytes, "ring reduce-scatter reduced {} of {} bytes", reduced, recv_bytes);
  }
}

std::size_t direct_allreduce_limit(Comm& comm) {
  const int n = comm.size();
  if (n <= 2) return kSmallBytes;
  // Beyond the direct exchange's ranks the answer does not matter, and
  // asking every link would form every link (comm.h: links form at first
  // use).
  if (n > kSmallMaxRanks) return 0;
  for (int p = 0; p < n; ++p) {
    if (p == comm.rank()) continue;
    // A property both ends of a link share (shared memory or not), so
    // every rank picks the same algorithm.
    const transport::SharedMemoryLink* shm = comm.link(p).shared_memory();
    if (!shm || shm->send_window() == 0) return kSmallBytes;
  }
  return kSmallBytes / static_cast<std::size_t>(n - 1);
}

bool pair_allreduce_in_ring(Comm& comm, char* data, std::size_t count, DataType dtype, ReduceOp op) {
  if (comm.size() != 2) return false;
  if (op != ReduceOp::Sum && op != ReduceOp::Average && op != ReduceOp::Product) return false;
  const std::size_t es = dtype_size(dtype);
  const std::size_t bytes = count * es;
  transport::Link& peer = comm.link(1 - comm.rank());
  transport::SharedMemoryLink* shm = peer.shared_memory();
  if (!shm || !shm->supports_recv_view() || bytes > shm->send_window() || es > 16 || (es & (es - 1)) != 0) {
    return false;
  }
  // The whole send fits in the ring, so it completes without the peer (whose
  // earlier receives from us have all completed) and `data` may change after.
  // One try each way before progress()'s loop: the send fits unless the
  // peer is far behind, and the late rank of the pair finds the peer's whole
  // buffer already there (a 4 KiB allreduce takes ~1 us; the loop's set-up
  // was a tenth of it).
  const std::size_t sent = peer.try_send(data, bytes);
  if (sent < bytes) peer.send(data + sent, bytes - sent);
  ReduceSink sink{data, 0, es, dtype, op};
  const std::size_t got = shm->try_recv_view(bytes, es, &reduce_sink, &sink);
  if (got < bytes) {
    transport::Transfer t = transport::Transfer::recv_view(peer, bytes - got, es, &reduce_sink, &sink);
    transport::progress(&t, 1);
  }
  HVD_ENFORCE(sink.reduced == bytes, "pair allreduce reduced {} of {} bytes", sink.reduced, bytes);
  return true;
}

void ring_allgather(Comm& comm, char* buf, const std::vector<std::size_t>& block_bytes) {
  const int n = comm.size();
  const int r = comm.rank();
  if (n == 1) return;
  const std::vector<std::size_t> off = offsets_of(block_bytes);
  transport::Link& right = comm.link(mod(r + 1, n));
  transport::Link& left = comm.link(mod(r - 1, n));
  for (int s = 0; s < n - 1; ++s) {
    const int send_block = mod(r - s, n);
    const int recv_block = mod(r - s - 1, n);
    transport::sendrecv(right, buf + off[send_block], block_bytes[send_block], left, buf + off[recv_block],
                        block_bytes[recv_block]);
  }
}

}  // namespace hvd::collective::detail
