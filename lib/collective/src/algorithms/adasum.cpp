// Adasum allreduce (docs/collective.md, "Adasum"): Horovod's
// vector-halving distance-doubling (VHDD) algorithm, for a power-of-two
// number of ranks.
//
// Adasum combines two gradients a and b as
//     (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b
// (a coefficient stays 1 when its squared norm is below sqrt(DBL_MIN)), and
// many gradients as a binary tree: at level 1 ranks 2k and 2k+1 combine, at
// level 2 the results of {4k, 4k+1} and {4k+2, 4k+3}, and so on. The dot
// product and norms are per tensor: a fused buffer of several tensors is
// combined tensor by tensor, each with its own coefficients.
//
// Reduction phase (distance doubling, vector halving): at level L (1, 2, 4,
// ...) every rank holds a segment of its group's partial result and
// exchanges half of it with rank ^ L: the rank with bit L clear keeps the
// first half, its neighbour the second. Each then holds its own half (a)
// and the neighbour's matching half (b); per tensor, the partial dot
// product and squared norms over that slice are summed across the 2L ranks
// of the block (rank & ~(2L-1) ...) by recursive doubling, which yields the
// full-vector values of the left and right subtrees; both sides then apply
// the same coefficients to their slice. After log2(size) levels each rank
// owns 1/size of the result; the allgather phase (distance halving) sends
// the pieces back along the same pairs in reverse order.
//
// Prescale multiplies the input first, postscale the result (Adasum is
// homogeneous of degree 1, so either could be moved through it). Every rank
// ends with bit-identical data: each element is computed once, by its
// owner, from coefficients every member of the block computed identically
// (the recursive-doubling sums add the lower block's partial first).
#include "hvd/collective/algorithms.h"

#include "algorithms/half.h"
#include "algorithms/reduce.h"
#include "common.h"

#include "hvd/transport/link.h"

#include <cfloat>
#include <cmath>
#include <cstring>
#include <utility>

namespace hvd::collective {

namespace {

struct Half {
  uint16_t bits;
};

template <class T>
struct Io {
  static double load(T v) { return static_cast<double>(v); }
  static T store(double v) { return static_cast<T>(v); }
};
template <>
struct Io<Half> {
  static double load(Half v) { return detail::half_to_float(v.bits); }
  static Half store(double v) { return Half{detail::float_to_half(static_cast<float>(v))}; }
};

template <class T>
void dot_and_norms(const void* a_v, const void* b_v, std::size_t n, double* out) {
  const T* a = static_cast<const T*>(a_v);
  const T* b = static_cast<const T*>(b_v);
  double dot = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const double x = Io<T>::load(a[i]);
    const double y = Io<T>::load(b[i]);
    dot += x * y;
    aa += x * x;
    bb += y * y;
  }
  out[0] = dot;
  out[1] = aa;
  out[2] = bb;
}

template <class T>
void scaled_add(void* a_v, const void* b_v, std::size_t n, double ca, double cb) {
  T* a = static_cast<T*>(a_v);
  const T* b = static_cast<const T*>(b_v);
  for (std::size_t i = 0; i < n; ++i) a[i] = Io<T>::store(ca * Io<T>::load(a[i]) + cb * Io<T>::load(b[i]));
}

struct Kernels {
  void (*dot_and_norms)(const void*, const void*, std::size_t, double*);
  void (*scaled_add)(void*, const void*, std::size_t, double, double);
};

Kernels kernels_for(DataType dtype) {
  switch (dtype) {
    case DataType::Float16: return {dot_and_norms<Half>, scaled_add<Half>};
    case DataType::Float32: return {dot_and_norms<float>, scaled_add<float>};
    case DataType::Float64: return {dot_and_norms<double>, scaled_add<double>};
    default: break;
  }
  throw InvalidArgument(
      fmt::format("Adasum supports float16, float32 and float64 tensors (got {})", dtype_name(dtype)));
}

/// Sum of `v` (n doubles) over the `block` ranks whose rank shares every
/// bit above log2(block) with ours, by recursive doubling; the lower
/// partner's partial is always the left operand, so every member gets the
/// same bits.
void block_sum(Comm& comm, double* v, std::size_t n, int block, double* tmp) {
  const int r = comm.rank();
  const std::size_t bytes = n * sizeof(double);
  for (int s = 1; s < block; s <<= 1) {
    transport::Link& link = comm.link(r ^ s);
    transport::Transfer ts[2] = {transport::Transfer::send(link, v, bytes),
                                 transport::Transfer::recv(link, tmp, bytes)};
    transport::progress(ts, 2);
    const bool lower = (r & s) == 0;
    for (std::size_t i = 0; i < n; ++i) v[i] = lower ? v[i] + tmp[i] : tmp[i] + v[i];
  }
}

}  // namespace

bool adasum_supported_size(int size) { return size > 0 && (size & (size - 1)) == 0; }

void adasum_allreduce(Comm& comm, void* data, const std::vector<std::size_t>& tensor_counts, DataType dtype,
                      double prescale, double postscale) {
  const Kernels k = kernels_for(dtype);
  const int n = comm.size();
  if (!adasum_supported_size(n)) {
    throw InvalidArgument(
        fmt::format("Adasum needs a power-of-two number of ranks (as Horovod's); this communicator has {}", n));
  }
  std::vector<std::size_t> toff(tensor_counts.size() + 1, 0);
  for (std::size_t i = 0; i < tensor_counts.size(); ++i) toff[i + 1] = toff[i] + tensor_counts[i];
  const std::size_t count = toff.back();
  if (count > 0 && data == nullptr) throw InvalidArgument("adasum: null buffer with a non-zero count");
  detail::guarded(comm, "adasum allreduce", [&] {
    if (count == 0) return;
    char* buf = static_cast<char*>(data);
    const std::size_t es = dtype_size(dtype);
    detail::scale(dtype, buf, count, prescale);
    const int r = comm.rank();
    const std::size_t m = tensor_counts.size();
    // scratch 0: the neighbour's half; 1: per-tensor (dot, |left|^2,
    // |right|^2); 2: the partner's copy of those during block_sum.
    char* recv = comm.scratch(0, (count - count / 2) * es);
    double* nd = reinterpret_cast<double*>(comm.scratch(1, 3 * m * sizeof(double)));
    double* nd_tmp = reinterpret_cast<double*>(comm.scratch(2, 3 * m * sizeof(double)));
    std::vector<std::pair<std::size_t, std::size_t>> segs;  // [lo, hi) held before each level
    std::size_t lo = 0, hi = count;
    for (int level = 1; level < n; level <<= 1) {
      segs.emplace_back(lo, hi);
      const std::size_t mid = lo + (hi - lo) / 2;
      const bool left = (r & level) == 0;
      const std::size_t keep_lo = left ? lo : mid, keep_hi = left ? mid : hi;
      const std::size_t send_lo = left ? mid : lo, send_hi = left ? hi : mid;
      transport::Link& link = comm.link(r ^ level);
      transport::Transfer ts[2] = {transport::Transfer::send(link, buf + send_lo * es, (send_hi - send_lo) * es),
                                   transport::Transfer::recv(link, recv, (keep_hi - keep_lo) * es)};
      transport::progress(ts, 2);
      lo = keep_lo;
      hi = keep_hi;
      // Per tensor: (dot, |left subtree|^2, |right subtree|^2) over this slice.
      for (std::size_t t = 0; t < m; ++t) {
        const std::size_t a = std::max(lo, toff[t]), b = std::min(hi, toff[t + 1]);
        double* v = nd + 3 * t;
        if (a >= b) {
          v[0] = v[1] = v[2] = 0;
          continue;
        }
        k.dot_and_norms(buf + a * es, recv + (a - lo) * es, b - a, v);
        if (!left) std::swap(v[1], v[2]);
      }
      block_sum(comm, nd, 3 * m, 2 * level, nd_tmp);
      static const double kTiny = std::sqrt(DBL_MIN);
      for (std::size_t t = 0; t < m; ++t) {
        const std::size_t a = std::max(lo, toff[t]), b = std::min(hi, toff[t + 1]);
        if (a >= b) continue;
        const double dot = nd[3 * t];
        const double mine = left ? nd[3 * t + 1] : nd[3 * t + 2];
        const double theirs = left ? nd[3 * t + 2] : nd[3 * t + 1];
        const double ca = mine >= kTiny ? 1.0 - dot / mine * 0.5 : 1.0;
        const double cb = theirs >= kTiny ? 1.0 - dot / theirs * 0.5 : 1.0;
        k.scaled_add(buf + a * es, recv + (a - lo) * es, b - a, ca, cb);
      }
    }
    // Allgather phase: the pieces go back along the same pairs, last level first.
    for (int level = n >> 1; level > 0; level >>= 1) {
      const auto [plo, phi] = segs.back();
      segs.pop_back();
      const bool left = (r & level) == 0;
      const std::size_t other_lo = left ? hi : plo, other_hi = left ? phi : lo;
      transport::Link& link = comm.link(r ^ level);
      transport::Transfer ts[2] = {transport::Transfer::send(link, buf + lo * es, (hi - lo) * es),
                                   transport::Transfer::recv(link, buf + other_lo * es, (other_hi - other_lo) * es)};
      transport::progress(ts, 2);
      lo = plo;
      hi = phi;
    }
    detail::scale(dtype, buf, count, postscale);
  });
}

}  // namespace hvd::collective
