// GPU checks of the CUDA component (label gpu). Modes:
//   cuda_check --probe       exit 77 with "SKIPPED: no CUDA device" when no
//                            device is usable, else 0
//   cuda_check --kernels     one process: the reduce kernel for every dtype x
//                            op x input count x size x alignment, and the
//                            batched copy, against a float64 CPU reference
//   cuda_check --allreduce   under hvdrun: DeviceAllreducer across the ranks
//                            of this host (all ranks may share one GPU), and
//                            StagedAllreducer (the cross-host path) over a
//                            TCP Comm of all ranks
//   cuda_check --hvd         under hvdrun: device buffers through the public
//                            API (hvd::init, hvd::allreduce_async,
//                            hvd::broadcast, device allgather/alltoall/
//                            reducescatter): every dtype x op x size, in
//                            place and out of place, fused groups, host and
//                            device tensors in one cycle, kAutoDevice,
//                            broadcast from every root. With
//                            HVD_CUDA_ALLREDUCE_PATH=staged the Context takes
//                            the cross-host (staged) path on one host.
//   cuda_check --psets       under hvdrun -np 3: device allreduce, broadcast
//                            and allgather on the process sets {0,2} and
//                            {1,2}; rank 1 refused on {0,2}
//   cuda_check --sync-loop   a 4 KiB device operation + synchronize, timed
//                            (run several at once to see time slicing)
//   cuda_check --reduce-bandwidth
//                            one process: the reduce kernel's bandwidth in
//                            the shared-GPU leader's shape (2 and 4 buffers,
//                            1/2/4 packs per thread) against cudaMemcpy D2D
// Inputs are random and never zero; outputs (and guard elements past the
// end) are poisoned before every check; NaN never passes.
#include "hvd/collective/algorithms.h"
#include "hvd/collective/comm.h"
#include "hvd/collective/cuda.h"
#include "hvd/collective/hvd.h"
#include "hvd/collective/types.h"
#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/store/http_store.h"
#include "hvd/store/memory_store.h"
#include "kernels.h"
#include "nccl.h"
#include "reference.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace hvd::collective;
using namespace hvd::collective::testref;

namespace {

constexpr int kSkip = 77;

void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw hvd::Error(std::string(call) + ": " + cudaGetErrorString(e));
}
#define CK(x) check_cuda((x), #x)

int probe() {
  const int n = cuda::device_count();
  if (!cuda::cuda_built() || n == 0) {
    std::cout << "SKIPPED: no CUDA device (cudaGetDeviceCount reports none; built with CUDA: "
              << (cuda::cuda_built() ? "yes" : "no") << ")" << std::endl;
    return kSkip;
  }
  std::cout << "CUDA devices: " << n << ", NCCL built: " << (cuda::nccl_built() ? cuda::nccl_version() : "no")
            << std::endl;
  // NCCL tests need one GPU per rank and a loadable libnccl.
  if (auto need = hvd::env::get("HVD_CUDA_TEST_NEED_NCCL_GPUS")) {
    const int gpus = std::stoi(*need);
    if (!cuda::nccl_built() || n < gpus) {
      std::cout << "SKIPPED: needs libnccl (>= 2.10, loadable: " << (cuda::nccl_built() ? "yes" : "no") << ") and "
                << gpus << " GPUs (" << n << " visible)" << std::endl;
      return kSkip;
    }
  }
  return 0;
}

/// Device buffer with its size, freed on scope exit.
struct DeviceBuffer {
  explicit DeviceBuffer(std::size_t bytes) : bytes(bytes) { CK(cudaMalloc(&ptr, bytes)); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  uint8_t* data() const { return static_cast<uint8_t*>(ptr); }
  void* ptr = nullptr;
  std::size_t bytes;
};

int run_kernels() {
  if (int rc = probe(); rc != 0) return rc;
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));  // blocking: after the legacy-stream cudaMemcpy of the inputs
  int failures = 0, checks = 0;
  uint64_t seed = 1;
  for (DataType t : kTypes) {
    const std::size_t es = dtype_size(t);
    for (ReduceOp op : kOps) {
      for (int n : {1, 2, 3, 4, 16}) {
        for (std::size_t count :
             {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{65539}, std::size_t{1} << 20}) {
          if (n == 16 && count > 1000) continue;
          for (int misalign : {0, 1}) {  // element offset: 1 forces the scalar path
            for (bool alias : {false, true}) {  // out == inputs[0]
              // The largest size only in the main configurations (CPU time
              // for inputs and the reference dominates the test).
              if (count >= (std::size_t{1} << 20) && (misalign || alias || (n != 2 && n != 4))) continue;
              const bool scaled = (count == 1000 && !alias);
              const double pre = scaled ? (is_float(t) ? 0.5 : 2.0) : 1.0;
              const double post = scaled ? (is_float(t) ? 0.25 : 3.0) : 1.0;
              std::vector<Tensor> host;
              std::vector<std::unique_ptr<DeviceBuffer>> dev;
              std::vector<const void*> ins;
              for (int j = 0; j < n; ++j) {
                host.push_back(random_tensor(t, op, count, seed++));
                dev.push_back(std::make_unique<DeviceBuffer>((count + kGuard + 1) * es));
                uint8_t* p = dev.back()->data() + misalign * es;
                CK(cudaMemcpy(p, host.back().bytes.data(), count * es, cudaMemcpyHostToDevice));
                ins.push_back(p);
              }
              DeviceBuffer out_buf((count + kGuard + 1) * es);
              uint8_t* out = alias ? static_cast<uint8_t*>(const_cast<void*>(ins[0])) : out_buf.data() + misalign * es;
              const auto guard = poison_bytes(t, kGuard * es);
              if (!alias) {
                const auto poison = poison_bytes(t, count * es);
                CK(cudaMemcpy(out, poison.data(), poison.size(), cudaMemcpyHostToDevice));
              }
              CK(cudaMemcpy(out + count * es, guard.data(), guard.size(), cudaMemcpyHostToDevice));
              cuda::reduce(ins, out, count, t, op, pre, post, stream);
              CK(cudaStreamSynchronize(stream));
              std::vector<uint8_t> got((count + kGuard) * es);
              CK(cudaMemcpy(got.data(), out, got.size(), cudaMemcpyDeviceToHost));
              std::vector<const Tensor*> refs;
              for (auto& h : host) refs.push_back(&h);
              const std::string err = verify(t, op, refs, got.data(), count, pre, post, n, guard);
              ++checks;
              if (!err.empty()) {
                if (++failures <= 20)
                  std::cout << "FAIL reduce (misalign " << misalign << ", alias " << alias << "): " << err << "\n";
              }
            }
          }
        }
      }
    }
  }
  // One reduce writing every output in the same pass (the shared-GPU
  // leader's call): in place over every input, or into separate poisoned
  // outputs, one of them misaligned (the scalar path) or none; with 1, 2
  // and 4 packs per thread per pass (ReduceLaunch::unroll).
  for (int unroll : {1, 2, 4}) {
    for (DataType t : kTypes) {
      const std::size_t es = dtype_size(t);
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average, ReduceOp::Max}) {
        for (int n : {2, 4}) {
          for (std::size_t count : {std::size_t{7}, std::size_t{65539}, std::size_t{1} << 20}) {
            for (bool in_place : {true, false}) {
              if (count >= (std::size_t{1} << 20) && (n != 2 || unroll == 2)) continue;
              const bool misaligned_copy = !in_place && count == 65539;
              std::vector<Tensor> host;
              std::vector<std::unique_ptr<DeviceBuffer>> dev;
              cuda::detail::ReduceLaunch l;
              std::vector<uint8_t*> outs;
              const auto guard = poison_bytes(t, kGuard * es);
              const auto poison = poison_bytes(t, count * es);
              for (int j = 0; j < n; ++j) {
                host.push_back(random_tensor(t, op, count, seed++));
                dev.push_back(std::make_unique<DeviceBuffer>((count + kGuard + 1) * es));
                CK(cudaMemcpy(dev.back()->data(), host.back().bytes.data(), count * es, cudaMemcpyHostToDevice));
                l.inputs[j] = dev.back()->data();
              }
              for (int j = 0; j < n; ++j) {
                uint8_t* o = dev[j]->data();
                if (!in_place) {
                  dev.push_back(std::make_unique<DeviceBuffer>((count + kGuard + 1) * es));
                  o = dev.back()->data() + (misaligned_copy && j == 1 ? es : 0);
                  CK(cudaMemcpy(o, poison.data(), poison.size(), cudaMemcpyHostToDevice));
                }
                CK(cudaMemcpy(o + count * es, guard.data(), guard.size(), cudaMemcpyHostToDevice));
                outs.push_back(o);
              }
              l.num_inputs = n;
              l.out = outs[0];
              for (int c = 1; c < n; ++c) l.copies[c - 1] = outs[c];
              l.num_copies = n - 1;
              l.count = count;
              l.dtype = t;
              l.op = op;
              l.average_divisor = n;
              l.unroll = unroll;
              cuda::detail::launch_reduce(l, stream);
              CK(cudaStreamSynchronize(stream));
              std::vector<const Tensor*> refs;
              for (auto& h : host) refs.push_back(&h);
              for (int j = 0; j < n; ++j) {
                std::vector<uint8_t> got((count + kGuard) * es);
                CK(cudaMemcpy(got.data(), outs[j], got.size(), cudaMemcpyDeviceToHost));
                const std::string err = verify(t, op, refs, got.data(), count, 1.0, 1.0, n, guard);
                ++checks;
                if (!err.empty() && ++failures <= 20) {
                  std::cout << "FAIL reduce with " << n - 1 << " further outputs (in place " << in_place << ", unroll "
                            << unroll << "), output " << j << ": " << err << "\n";
                }
              }
            }
          }
        }
      }
    }
  }
  // Batched copy: many items of odd sizes and alignments, one call.
  {
    std::mt19937_64 rng(99);
    const std::size_t items = 150;  // > one launch's worth
    std::vector<std::size_t> sizes(items);
    std::size_t total = 0;
    for (auto& s : sizes) total += (s = rng() % 70000);
    DeviceBuffer src(total + 16 * items), dst(total + 16 * items + 64);
    std::vector<uint8_t> pattern(src.bytes);
    for (auto& b : pattern) b = static_cast<uint8_t>(rng());
    CK(cudaMemcpy(src.data(), pattern.data(), pattern.size(), cudaMemcpyHostToDevice));
    CK(cudaMemset(dst.ptr, 0xee, dst.bytes));
    std::vector<cuda::CopyItem> list;
    std::size_t so = 0, doff = 0;
    for (std::size_t i = 0; i < items; ++i) {
      so += i % 3;  // some misaligned
      doff += (i % 5 == 0) ? 0 : 1;
      list.push_back(cuda::CopyItem{src.data() + so, dst.data() + doff, sizes[i]});
      so += sizes[i];
      doff += sizes[i];
    }
    cuda::batched_copy(list, stream);
    CK(cudaStreamSynchronize(stream));
    std::vector<uint8_t> got(dst.bytes);
    CK(cudaMemcpy(got.data(), dst.ptr, got.size(), cudaMemcpyDeviceToHost));
    so = doff = 0;
    bool ok = true;
    for (std::size_t i = 0; i < items && ok; ++i) {
      so += i % 3;
      const std::size_t gap = (i % 5 == 0) ? 0 : 1;
      if (gap && got[doff] != 0xee) ok = false;  // untouched byte between items
      doff += gap;
      ok = ok && std::memcmp(got.data() + doff, pattern.data() + so, sizes[i]) == 0;
      so += sizes[i];
      doff += sizes[i];
    }
    ok = ok && got[doff] == 0xee;
    ++checks;
    if (!ok) {
      ++failures;
      std::cout << "FAIL batched_copy: destination differs from source or bytes between items changed\n";
    }
  }
  // Device fusion: pack two lists of float32 tensors into two fusion
  // buffers, reduce the fused regions as one array, unpack into the first.
  {
    const std::vector<std::size_t> counts = {1, 3, 1000, 17, 4096, 5, 100003};
    cuda::DeviceFusionBuffer fa(0, 1u << 20), fb(0, 1u << 20);
    std::vector<std::unique_ptr<DeviceBuffer>> bufs_a, bufs_b;
    std::vector<Tensor> host_a, host_b;
    std::vector<cuda::DeviceFusionBuffer::Tensor> list_a, list_b;
    for (std::size_t i = 0; i < counts.size(); ++i) {
      host_a.push_back(random_tensor(DataType::Float32, ReduceOp::Sum, counts[i], 7000 + i));
      host_b.push_back(random_tensor(DataType::Float32, ReduceOp::Sum, counts[i], 8000 + i));
      bufs_a.push_back(std::make_unique<DeviceBuffer>((counts[i] + kGuard) * 4));  // + a guard unpack must not touch
      bufs_b.push_back(std::make_unique<DeviceBuffer>(counts[i] * 4));
      CK(cudaMemcpy(bufs_a.back()->ptr, host_a.back().bytes.data(), counts[i] * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(bufs_b.back()->ptr, host_b.back().bytes.data(), counts[i] * 4, cudaMemcpyHostToDevice));
      list_a.push_back({bufs_a.back()->ptr, counts[i] * 4});
      list_b.push_back({bufs_b.back()->ptr, counts[i] * 4});
    }
    std::size_t bytes_a = 0, bytes_b = 0;
    void* fused_a = fa.pack(list_a, stream, bytes_a);
    void* fused_b = fb.pack(list_b, stream, bytes_b);
    // Poison the tensors (and their guards) so only unpack can restore them.
    for (auto& b : bufs_a) CK(cudaMemsetAsync(b->ptr, 0xff, b->bytes, stream));
    const std::vector<uint8_t> guard(kGuard * 4, 0xff);
    cuda::reduce({fused_a, fused_b}, fused_a, bytes_a / 4, DataType::Float32, ReduceOp::Sum, 1.0, 1.0, stream);
    fa.unpack(list_a, stream);
    CK(cudaStreamSynchronize(stream));
    for (std::size_t i = 0; i < counts.size(); ++i) {
      std::vector<uint8_t> got((counts[i] + kGuard) * 4);
      CK(cudaMemcpy(got.data(), bufs_a[i]->ptr, got.size(), cudaMemcpyDeviceToHost));
      const std::string err =
          verify(DataType::Float32, ReduceOp::Sum, {&host_a[i], &host_b[i]}, got.data(), counts[i], 1, 1, 2, guard);
      ++checks;
      if (!err.empty()) {
        ++failures;
        std::cout << "FAIL device fusion tensor " << i << ": " << err << "\n";
      }
    }
    {
      std::size_t unused = 0;
      bool refused = false;
      try {
        fa.pack({{bufs_a[0]->ptr, (1u << 20) + 1}}, stream, unused);
      } catch (const hvd::InvalidArgument&) {
        refused = true;
      }
      ++checks;
      if (!refused) {
        ++failures;
        std::cout << "FAIL device fusion: an oversized pack was not refused\n";
      }
    }
  }
  CK(cudaStreamDestroy(stream));
  std::cout << (failures ? "FAILED " : "OK ") << checks - failures << "/" << checks << " kernel checks passed"
            << std::endl;
  return failures ? 1 : 0;
}

int run_allreduce() {
  if (int rc = probe(); rc != 0) return rc;
  const int rank = static_cast<int>(hvd::env::get_int_or("HOROVOD_RANK", 0));
  const int local_rank = static_cast<int>(hvd::env::get_int_or("HOROVOD_LOCAL_RANK", 0));
  const int local_size = static_cast<int>(hvd::env::get_int_or("HOROVOD_LOCAL_SIZE", 1));
  const int cross_rank = static_cast<int>(hvd::env::get_int_or("HOROVOD_CROSS_RANK", 0));
  auto store = hvd::store::make_store_from_env(std::chrono::seconds(30));
  hvd::store::InMemoryStore alone;
  if (!store && local_size > 1) throw hvd::InvalidArgument("run cuda_check --allreduce under hvdrun");
  hvd::store::Store& st = store ? *store : static_cast<hvd::store::Store&>(alone);
  const int device = local_rank % cuda::device_count();
  CK(cudaSetDevice(device));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));  // blocking: after the legacy-stream cudaMemcpy of the inputs

  int failures = 0, checks = 0;
  auto one = [&](cuda::DeviceAllreducer& ar, DataType t, ReduceOp op, std::size_t count, int misalign, double pre,
                 double post, uint64_t case_id) {
    const std::size_t es = dtype_size(t);
    std::vector<Tensor> all;  // every rank's input, generated identically everywhere
    for (int r = 0; r < local_size; ++r) all.push_back(random_tensor(t, op, count, case_id * 1000 + r));
    DeviceBuffer buf((count + kGuard + 1) * es);
    uint8_t* data = buf.data() + misalign * es;
    const auto guard = poison_bytes(t, kGuard * es);
    const auto poison = poison_bytes(t, buf.bytes);
    CK(cudaMemcpy(buf.ptr, poison.data(), poison.size(), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(data, all[local_rank].bytes.data(), count * es, cudaMemcpyHostToDevice));
    ar.allreduce(data, count, t, op, stream, pre, post);
    CK(cudaStreamSynchronize(stream));
    std::vector<uint8_t> got((count + kGuard) * es);
    CK(cudaMemcpy(got.data(), data, got.size(), cudaMemcpyDeviceToHost));
    std::vector<const Tensor*> refs;
    for (auto& h : all) refs.push_back(&h);
    const std::string err = verify(t, op, refs, got.data(), count, pre, post, local_size, guard);
    ++checks;
    if (!err.empty() && ++failures <= 20) std::cout << "rank " << rank << " FAIL allreduce: " << err << "\n";
  };

  cuda::DeviceAllreducerOptions o;
  o.local_rank = local_rank;
  o.local_size = local_size;
  o.device = device;
  o.prefix = "cuda_check/small/host_" + std::to_string(cross_rank) + "/";
  o.chunk_bytes = 64 << 10;  // many pipeline steps per call, slot reuse within a call
  o.slots = 2;
  {
    cuda::DeviceAllreducer ar(st, o);
    uint64_t case_id = 1;
    for (DataType t : kTypes) {
      for (ReduceOp op : kOps) {
        for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{100003}}) {
          for (int misalign : {0, 1}) {
            const bool scaled = count == 1000 && misalign == 0;
            const double pre = scaled ? (is_float(t) ? 0.5 : 2.0) : 1.0;
            const double post = scaled ? (is_float(t) ? 0.25 : 3.0) : 1.0;
            one(ar, t, op, count, misalign, pre, post, case_id++);
          }
        }
      }
    }
  }
  {
    // Default pipeline (4 MiB chunks) on a large float32 buffer.
    o.prefix = "cuda_check/large/host_" + std::to_string(cross_rank) + "/";
    o.chunk_bytes = cuda::DeviceAllreducerOptions{}.chunk_bytes;
    o.slots = cuda::DeviceAllreducerOptions{}.slots;
    cuda::DeviceAllreducer ar(st, o);
    one(ar, DataType::Float32, ReduceOp::Sum, (48u << 20) / 4 + 3, 0, 1.0, 1.0, 900001);
    one(ar, DataType::BFloat16, ReduceOp::Average, (16u << 20) / 2, 0, 1.0, 1.0, 900002);
  }
  {
    // The cross-host leg: pinned staging chunks through the CPU collectives.
    const int size = static_cast<int>(hvd::env::get_int_or("HOROVOD_SIZE", 1));
    hvd::collective::CommOptions co;
    co.rank = rank;
    co.size = size;
    co.prefix = "cuda_check/comm/";
    co.secret = hvd::env::get_or("HVDRUN_SECRET", "");
    co.route_hint = hvd::env::get_or("HOROVOD_GLOO_RENDEZVOUS_ADDR", "");
    auto comm = connect_comm(st, co);
    cuda::StagedAllreducer staged(cuda::StagedAllreducerOptions{device, 1u << 20});
    uint64_t case_id = 500000;
    for (DataType t : {DataType::Float32, DataType::Float64, DataType::Int32, DataType::BFloat16}) {
      const ReduceOp op = t == DataType::BFloat16 ? ReduceOp::Max : ReduceOp::Sum;
      for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{3} << 20}) {
        const std::size_t es = dtype_size(t);
        std::vector<Tensor> all;
        for (int r = 0; r < size; ++r) all.push_back(random_tensor(t, op, count, case_id * 1000 + r));
        ++case_id;
        DeviceBuffer buf((count + kGuard) * es);
        const auto guard = poison_bytes(t, kGuard * es);
        CK(cudaMemcpy(buf.data(), all[rank].bytes.data(), count * es, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(buf.data() + count * es, guard.data(), guard.size(), cudaMemcpyHostToDevice));
        staged.allreduce(buf.ptr, count, t, stream,
                         [&](void* h, std::size_t c) { hvd::collective::allreduce(*comm, h, c, t, op); });
        CK(cudaStreamSynchronize(stream));
        std::vector<uint8_t> got((count + kGuard) * es);
        CK(cudaMemcpy(got.data(), buf.ptr, got.size(), cudaMemcpyDeviceToHost));
        std::vector<const Tensor*> refs;
        for (auto& h : all) refs.push_back(&h);
        const std::string err = verify(t, op, refs, got.data(), count, 1.0, 1.0, size, guard);
        ++checks;
        if (!err.empty() && ++failures <= 20) std::cout << "rank " << rank << " FAIL staged allreduce: " << err << "\n";
      }
    }
  }
  CK(cudaStreamDestroy(stream));
  std::cout << "rank " << rank << (failures ? " FAILED " : " OK ") << checks - failures << "/" << checks
            << " allreduce checks passed (" << local_size << " local ranks, device " << device << ")" << std::endl;
  return failures ? 1 : 0;
}

/// Device buffers through the public API (the Context's device path).
int run_hvd() {
  if (int rc = probe(); rc != 0) return rc;
  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();
  const int device = hvd::local_rank() % cuda::device_count();
  // Paths whose half-precision sums round per step (the CPU ring of the
  // staged path, NCCL's ring) get the looser half-type checks.
  const std::string path = hvd::env::get_or("HVD_CUDA_ALLREDUCE_PATH", "auto");
  const bool auto_nccl = path == "auto" && cuda::nccl_built() && cuda::device_count() >= hvd::local_size();
  const bool staged = path == "staged" || path == "nccl" || auto_nccl || hvd::cross_size() > 1;
  CK(cudaSetDevice(device));
  cudaStream_t stream;
  // A blocking stream: the inputs are written with cudaMemcpy/cudaMemset on
  // the legacy default stream (a pageable cudaMemcpy may return before its
  // DMA lands), which such a stream waits for, as torch's default stream does.
  // The library orders its work after the caller's stream only.
  CK(cudaStreamCreate(&stream));
  int failures = 0, checks = 0;
  auto report = [&](const std::string& what, const std::string& err) {
    ++checks;
    if (!err.empty() && ++failures <= 20) std::cout << "rank " << rank << " FAIL " << what << ": " << err << "\n";
  };

  /// One rank's device tensor: its input (every rank's generated alike, so
  /// each can compute the reference), the buffers, and the result check.
  struct Case {
    DataType t;
    ReduceOp op;
    std::size_t count;
    double pre = 1.0, post = 1.0;
    std::vector<Tensor> all;
    std::unique_ptr<DeviceBuffer> in, out;
    std::vector<uint8_t> guard;
  };
  auto make = [&](DataType t, ReduceOp op, std::size_t count, bool in_place, uint64_t id) {
    auto c = std::make_unique<Case>();
    c->t = t;
    c->op = op;
    c->count = count;
    const std::size_t es = dtype_size(t);
    for (int r = 0; r < size; ++r) c->all.push_back(random_tensor(t, op, count, id * 1000 + r));
    c->guard = poison_bytes(t, kGuard * es);
    c->in = std::make_unique<DeviceBuffer>((count + kGuard) * es);
    CK(cudaMemcpy(c->in->ptr, c->all[rank].bytes.data(), count * es, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(c->in->data() + count * es, c->guard.data(), c->guard.size(), cudaMemcpyHostToDevice));
    if (!in_place) {
      c->out = std::make_unique<DeviceBuffer>((count + kGuard) * es);
      const auto poison = poison_bytes(t, c->out->bytes);
      CK(cudaMemcpy(c->out->ptr, poison.data(), poison.size(), cudaMemcpyHostToDevice));
    }
    return c;
  };
  auto args = [&](Case& c, const std::string& name) {
    AllreduceArgs a{name,  c.in->ptr, c.out ? c.out->ptr : c.in->ptr, c.t, {static_cast<int64_t>(c.count)}, c.op,
                    c.pre, c.post};
    a.device = device;
    a.stream = stream;
    return a;
  };
  auto check = [&](Case& c, const std::string& what) {
    const std::size_t es = dtype_size(c.t);
    std::vector<uint8_t> got((c.count + kGuard) * es);
    CK(cudaMemcpy(got.data(), c.out ? c.out->ptr : c.in->ptr, got.size(), cudaMemcpyDeviceToHost));
    std::vector<const Tensor*> refs;
    for (auto& h : c.all) refs.push_back(&h);
    report(what, verify(c.t, c.op, refs, got.data(), c.count, c.pre, c.post, size, c.guard));
  };
  // The staged path reduces on the CPU ring, which rounds half types after
  // every step: only their exact ops (min, max) are checked there.
  auto exact_enough = [&](DataType t, ReduceOp op) {
    const bool half = t == DataType::Float16 || t == DataType::BFloat16;
    return !staged || !half || op == ReduceOp::Min || op == ReduceOp::Max;
  };

  // 1. One tensor at a time: dtype x op x size x in place / out of place.
  uint64_t id = 1;
  for (DataType t : kTypes) {
    for (ReduceOp op : kOps) {
      if (!exact_enough(t, op)) continue;
      for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{100003}}) {
        for (bool in_place : {true, false}) {
          auto c = make(t, op, count, in_place, id);
          if (count == 1000 && is_float(t)) {
            c->pre = 0.5;
            c->post = 0.25;
          }
          const std::string name = "one." + std::to_string(id++);
          hvd::allreduce(args(*c, name));
          check(*c, name + " " + ref_name(t) + " " + ref_name(op) + " count " + std::to_string(count));
        }
      }
    }
  }
  // 2. Many tensors in flight: fused on the device (float32 sum and bfloat16
  // max groups), with host tensors of the same cycle that must not join them.
  {
    std::vector<std::unique_ptr<Case>> cases;
    std::vector<hvd::collective::Handle> handles;
    std::vector<std::vector<float>> host;
    const std::vector<std::size_t> counts = {1, 3, 1000, 17, 4096, 5, 100003, 2, 65536, 9};
    for (std::size_t i = 0; i < counts.size(); ++i) {
      const DataType t = i % 3 == 2 ? DataType::BFloat16 : DataType::Float32;
      const ReduceOp op = t == DataType::BFloat16 ? ReduceOp::Max : ReduceOp::Sum;
      cases.push_back(make(t, op, counts[i], i % 2 == 0, 700000 + i));
      handles.push_back(hvd::allreduce_async(args(*cases.back(), "fused." + std::to_string(i))));
      host.emplace_back(counts[i], float(rank + 1));
      handles.push_back(hvd::allreduce_async(AllreduceArgs{"host." + std::to_string(i),
                                                           host.back().data(),
                                                           host.back().data(),
                                                           DataType::Float32,
                                                           {static_cast<int64_t>(counts[i])}}));
    }
    for (auto& h : handles) h.wait();
    for (std::size_t i = 0; i < cases.size(); ++i) check(*cases[i], "fused." + std::to_string(i));
    const float want = float(size * (size + 1) / 2);
    for (std::size_t i = 0; i < host.size(); ++i) {
      const bool ok = std::all_of(host[i].begin(), host[i].end(), [&](float v) { return v == want; });
      report("host tensor beside device tensors " + std::to_string(i), ok ? "" : "wrong host result");
    }
  }
  // 3. kAutoDevice: the library asks CUDA where the buffers are.
  {
    auto c = make(DataType::Float64, ReduceOp::Sum, 4097, false, 800000);
    AllreduceArgs a = args(*c, "auto");
    a.device = hvd::collective::kAutoDevice;
    hvd::allreduce(a);
    check(*c, "auto device");
  }
  // 4. Broadcast from every root, in place and out of place, odd sizes
  // (several staging chunks for the largest).
  for (int root = 0; root < size; ++root) {
    for (std::size_t bytes : {std::size_t{1}, std::size_t{4099}, std::size_t{(9u << 20) + 13}}) {
      for (bool in_place : {true, false}) {
        std::vector<uint8_t> pattern(bytes);
        for (std::size_t i = 0; i < bytes; ++i) pattern[i] = static_cast<uint8_t>(i * 31 + root * 7 + (bytes & 0xff));
        std::vector<uint8_t> mine(bytes, static_cast<uint8_t>(0xa0 + rank));
        DeviceBuffer in(bytes + 64), out(bytes + 64);
        CK(cudaMemset(in.ptr, 0xee, in.bytes));
        CK(cudaMemset(out.ptr, 0xee, out.bytes));
        CK(cudaMemcpy(in.ptr, rank == root ? pattern.data() : mine.data(), bytes, cudaMemcpyHostToDevice));
        BroadcastArgs b{"bcast." + std::to_string(root) + "." + std::to_string(bytes) + (in_place ? ".in" : ".out"),
                        in.ptr,
                        in_place ? in.ptr : out.ptr,
                        DataType::UInt8,
                        {static_cast<int64_t>(bytes)},
                        root};
        b.device = device;
        b.stream = stream;
        hvd::broadcast(b);
        std::vector<uint8_t> got(bytes + 64);
        CK(cudaMemcpy(got.data(), in_place ? in.ptr : out.ptr, got.size(), cudaMemcpyDeviceToHost));
        const bool ok = std::memcmp(got.data(), pattern.data(), bytes) == 0 &&
                        std::all_of(got.begin() + bytes, got.end(), [](uint8_t v) { return v == 0xee; });
        report(b.name, ok ? "" : "broadcast result differs from the root's input (or wrote past the end)");
      }
    }
  }
  // 5. Allgather, alltoall and reducescatter of device buffers (through host
  // memory in the library): each result byte-equal to the same operation on
  // host buffers, outputs from a device allocator (poisoned, with a guard
  // past the end) and handle-owned device memory (Handle::output_device).
  {
    std::vector<std::unique_ptr<DeviceBuffer>> allocated;
    auto device_allocator = [&](const std::vector<int64_t>&, std::size_t bytes) -> void* {
      allocated.push_back(std::make_unique<DeviceBuffer>(bytes + 64));
      CK(cudaMemset(allocated.back()->ptr, 0xee, bytes + 64));
      return allocated.back()->ptr;
    };
    auto compare = [&](const std::string& what, const hvd::collective::Handle& dev_h,
                       const hvd::collective::Handle& host_h, bool from_allocator) {
      std::string err;
      if (dev_h.output_bytes() != host_h.output_bytes() || dev_h.output_shape() != host_h.output_shape()) {
        err = "output size or shape differs from the host operation's";
      } else if (dev_h.output_device() != device) {
        err = "output_device() is " + std::to_string(dev_h.output_device());
      } else {
        const std::size_t bytes = dev_h.output_bytes();
        std::vector<uint8_t> got(bytes + (from_allocator ? 64 : 0));
        cuda::copy(got.data(), dev_h.output(), got.size());
        if (std::memcmp(got.data(), host_h.output(), bytes) != 0) err = "result differs from the host operation's";
        if (from_allocator && !std::all_of(got.begin() + bytes, got.end(), [](uint8_t v) { return v == 0xee; })) {
          err = "wrote past the end of the allocator's buffer";
        }
      }
      report(what, err);
    };
    for (DataType t : {DataType::Float32, DataType::BFloat16, DataType::Int64, DataType::Float64}) {
      for (bool with_allocator : {true, false}) {
        const std::string tag = std::string(ref_name(t)) + (with_allocator ? ".alloc" : ".owned");
        hvd::collective::Allocator alloc;
        if (with_allocator) alloc = device_allocator;
        // Allgather: rank r contributes r + 1 rows of 1001 random elements.
        {
          const std::size_t count = static_cast<std::size_t>(rank + 1) * 1001;
          auto c = make(t, ReduceOp::Sum, count, true, 900000 + static_cast<uint64_t>(t));
          std::vector<int64_t> shape = {rank + 1, 1001};
          AllgatherArgs a{"ag." + tag, c->in->ptr, t, shape, alloc};
          a.device = device;
          a.stream = stream;
          auto dh = hvd::allgather(a);
          auto hh = hvd::allgather(AllgatherArgs{"ag.host." + tag, c->all[rank].bytes.data(), t, shape, {}});
          compare("device allgather " + tag, dh, hh, with_allocator);
        }
        // Alltoall with uneven splits: rank r sends k % 3 + r rows to rank k.
        {
          std::vector<int64_t> splits;
          int64_t rows = 0;
          for (int k = 0; k < size; ++k) rows += splits.emplace_back(k % 3 + rank);
          const std::size_t count = static_cast<std::size_t>(rows) * 33;
          auto c = make(t, ReduceOp::Sum, count, true, 910000 + static_cast<uint64_t>(t));
          AlltoallArgs a{"a2a." + tag, c->in->ptr, t, {rows, 33}, splits, alloc};
          a.device = device;
          a.stream = stream;
          auto dh = hvd::alltoall(a);
          auto hh =
              hvd::alltoall(AlltoallArgs{"a2a.host." + tag, c->all[rank].bytes.data(), t, {rows, 33}, splits, {}});
          compare("device alltoall " + tag, dh, hh, with_allocator);
          report("device alltoall recv_splits " + tag, dh.recv_splits() == hh.recv_splits() ? "" : "differ");
        }
        // Reducescatter of 5 * size + 3 rows (uneven shares), sum with scaling
        // for floats.
        {
          const int64_t rows = 5 * size + 3;
          const std::size_t count = static_cast<std::size_t>(rows) * 17;
          auto c = make(t, ReduceOp::Sum, count, true, 920000 + static_cast<uint64_t>(t));
          const double pre = is_float(t) ? 0.5 : 1.0, post = is_float(t) ? 2.0 : 1.0;
          ReducescatterArgs a{"rs." + tag, c->in->ptr, t, {rows, 17}, ReduceOp::Sum, pre, post, alloc};
          a.device = device;
          a.stream = stream;
          auto dh = hvd::reducescatter(a);
          auto hh = hvd::reducescatter(ReducescatterArgs{
              "rs.host." + tag, c->all[rank].bytes.data(), t, {rows, 17}, ReduceOp::Sum, pre, post, {}});
          compare("device reducescatter " + tag, dh, hh, with_allocator);
        }
      }
    }
    // An allocator that returns host memory fails that operation alone, on
    // this rank, with a clear message; the job goes on.
    {
      std::vector<float> host_out(4 * size);
      auto c = make(DataType::Float32, ReduceOp::Sum, 4, true, 930000);
      AllgatherArgs a{
          "ag.hostalloc", c->in->ptr, DataType::Float32, {4}, [&](const std::vector<int64_t>&, std::size_t) -> void* {
            return host_out.data();
          }};
      a.device = device;
      a.stream = stream;
      std::string err = "the allocator's host memory was accepted";
      try {
        hvd::allgather(a);
      } catch (const hvd::Error& e) {
        const std::string what = e.what();
        err = what.find("is not on CUDA device") != std::string::npos ? "" : "unexpected error: " + what;
      }
      report("device allgather into host memory fails alone", err);
      float one = 1.0f;
      hvd::allreduce(AllreduceArgs{"after.hostalloc", &one, &one, DataType::Float32, {1}});
      report("the job goes on after a failed allocator", one == float(size) ? "" : "wrong result");
    }
  }
  CK(cudaStreamDestroy(stream));
  hvd::shutdown();
  std::cout << "rank " << rank << (failures ? " FAILED " : " OK ") << checks - failures << "/" << checks
            << " hvd device checks passed (" << size << " ranks, device " << device << ", "
            << (staged ? "staged" : "intra-host") << " path)" << std::endl;
  return failures ? 1 : 0;
}

/// --psets (under hvdrun, 3 ranks): device buffers on the process sets
/// {0,2} and {1,2} (docs/collective.md, "Process sets"): allreduce,
/// broadcast from a global root, allgather; each result the set's, not the
/// global one; rank 1 refused on {0,2}.
int run_psets() {
  if (int rc = probe(); rc != 0) return rc;
  hvd::init({{0, 2}, {1, 2}});
  const int rank = hvd::rank();
  if (hvd::size() != 3) {
    std::cout << "cuda_check --psets needs 3 ranks\n";
    return 2;
  }
  const int device = hvd::local_rank() % cuda::device_count();
  CK(cudaSetDevice(device));
  cudaStream_t stream;
  // A blocking stream: the inputs are written with cudaMemcpy/cudaMemset on
  // the legacy default stream (a pageable cudaMemcpy may return before its
  // DMA lands), which such a stream waits for, as torch's default stream does.
  // The library orders its work after the caller's stream only.
  CK(cudaStreamCreate(&stream));
  int failures = 0, checks = 0;
  auto report = [&](const std::string& what, bool ok) {
    ++checks;
    if (!ok && ++failures <= 20) std::cout << "rank " << rank << " FAIL " << what << "\n";
  };
  const std::size_t n = std::size_t(1) << 18;  // 1 MiB of float32
  for (int32_t set : {1, 2}) {
    if (!hvd::context().process_set_included(set)) {
      float x = 1.0f;
      AllreduceArgs a{"ps.foreign", &x, &x, DataType::Float32, {1}, ReduceOp::Sum};
      a.process_set = set;
      bool refused = false;
      try {
        hvd::allreduce_async(a);
      } catch (const hvd::InvalidArgument&) {
        refused = true;
      }
      report("an op on a set this rank is not in is refused", refused);
      continue;
    }
    const std::vector<int> members = hvd::context().process_set_ranks(set);
    const std::string tag = "ps" + std::to_string(set);
    std::vector<float> host(n), back(n);
    for (std::size_t i = 0; i < n; ++i) host[i] = float(rank + 1) + float(i % 7);
    DeviceBuffer buf(n * sizeof(float));
    CK(cudaMemcpy(buf.ptr, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    AllreduceArgs a{tag + ".sum", buf.ptr, buf.ptr, DataType::Float32, {int64_t(n)}, ReduceOp::Sum};
    a.device = device;
    a.stream = stream;
    a.process_set = set;
    hvd::allreduce(a);
    CK(cudaMemcpy(back.data(), buf.ptr, n * sizeof(float), cudaMemcpyDeviceToHost));
    float base = 0;
    for (int q : members) base += float(q + 1);
    bool ok = true;
    for (std::size_t i = 0; i < n && ok; ++i) ok = back[i] == base + float(members.size() * (i % 7));
    report(tag + " device allreduce gives the set's sum", ok);
    // Broadcast from the set's last member, named by its global rank.
    CK(cudaMemcpy(buf.ptr, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    BroadcastArgs b{tag + ".bcast", buf.ptr, buf.ptr, DataType::Float32, {int64_t(n)}, members.back()};
    b.device = device;
    b.stream = stream;
    b.process_set = set;
    hvd::broadcast(b);
    CK(cudaMemcpy(back.data(), buf.ptr, n * sizeof(float), cudaMemcpyDeviceToHost));
    ok = true;
    for (std::size_t i = 0; i < n && ok; ++i) ok = back[i] == float(members.back() + 1) + float(i % 7);
    report(tag + " device broadcast from global rank " + std::to_string(members.back()), ok);
    // Allgather: two elements per member, in the set's order.
    const float mine[2] = {float(rank), float(rank)};
    DeviceBuffer small(sizeof mine);
    CK(cudaMemcpy(small.ptr, mine, sizeof mine, cudaMemcpyHostToDevice));
    AllgatherArgs g{tag + ".gather", small.ptr, DataType::Float32, {2}, {}};
    g.device = device;
    g.stream = stream;
    g.process_set = set;
    Handle h = hvd::allgather(g);
    std::vector<float> got(h.output_bytes() / sizeof(float));
    CK(cudaMemcpy(got.data(), h.output(), h.output_bytes(), cudaMemcpyDeviceToHost));
    std::vector<float> want;
    for (int q : members) want.insert(want.end(), 2, float(q));
    report(tag + " device allgather in the set's order", got == want && h.output_device() == device);
  }
  CK(cudaStreamDestroy(stream));
  hvd::shutdown();
  std::cout << "rank " << rank << (failures ? " FAILED " : " OK ") << checks - failures << "/" << checks
            << " process set device checks passed (device " << device << ")" << std::endl;
  return failures ? 1 : 0;
}

/// The NCCL loader and a one-rank communicator (a GPU machine with one GPU
/// cannot form more: NCCL refuses two ranks on one GPU). Loads libnccl as the
/// library does (HVD_NCCL_LIBRARY, the build's path, libnccl.so.2), forms a
/// communicator of one rank through a store, and runs allreduce (out of
/// place and in place) and broadcast of every NCCL dtype: with one rank the
/// result must equal the input bit for bit. Skips (77) when libnccl is not
/// loadable, unless HVD_CUDA_TEST_REQUIRE_NCCL is set (the device check).
int run_nccl() {
  if (int rc = probe(); rc != 0) return rc;
  namespace d = hvd::collective::cuda::detail;
  const d::NcclLibrary& lib = d::NcclLibrary::get();
  if (!lib.available()) {
    const bool required = hvd::env::get("HVD_CUDA_TEST_REQUIRE_NCCL").has_value();
    std::cout << (required ? "FAIL" : "SKIPPED") << ": libnccl is not loadable: " << lib.unavailable() << std::endl;
    return required ? 1 : kSkip;
  }
  std::cout << "NCCL " << lib.version() << " loaded from " << lib.path()
            << "; bounded set-up (ncclCommInitRankConfig): " << (lib.bounded_setup() ? "yes" : "no") << std::endl;
  CK(cudaSetDevice(0));
  hvd::store::InMemoryStore store;
  d::NcclComm comm(lib, store, "nccl_check/", 0, 1, std::chrono::seconds(60));
  cudaStream_t stream;
  CK(cudaStreamCreate(&stream));  // blocking: after the legacy-stream cudaMemcpy of the inputs
  int failures = 0, checks = 0;
  auto report = [&](const std::string& what, bool ok) {
    ++checks;
    if (!ok) {
      ++failures;
      std::cout << "FAIL: " << what << std::endl;
    }
  };
  uint64_t seed = 7;
  for (DataType t : {DataType::UInt8, DataType::Int8, DataType::Int32, DataType::Int64, DataType::Float16,
                     DataType::BFloat16, DataType::Float32, DataType::Float64}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
      const std::size_t count = 100003;
      const std::size_t bytes = count * dtype_size(t);
      Tensor in = random_tensor(t, op, count, seed++);
      DeviceBuffer a(bytes), b(bytes);
      CK(cudaMemcpy(a.ptr, in.bytes.data(), bytes, cudaMemcpyHostToDevice));
      const std::vector<uint8_t> poison = poison_bytes(t, bytes);
      CK(cudaMemcpy(b.ptr, poison.data(), bytes, cudaMemcpyHostToDevice));
      comm.allreduce(a.ptr, b.ptr, count, t, op, stream);  // out of place
      comm.allreduce(a.ptr, a.ptr, count, t, op, stream);  // in place
      CK(cudaStreamSynchronize(stream));
      std::vector<uint8_t> got_b(bytes), got_a(bytes);
      CK(cudaMemcpy(got_b.data(), b.ptr, bytes, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(got_a.data(), a.ptr, bytes, cudaMemcpyDeviceToHost));
      const std::string tag = std::string("NCCL ") + ref_name(t) + " " + ref_name(op);
      report(tag + " out-of-place allreduce of one rank is its input", got_b == in.bytes);
      report(tag + " in-place allreduce of one rank is its input", got_a == in.bytes);
    }
  }
  {
    const std::size_t bytes = (std::size_t{1} << 20) + 3;
    std::vector<uint8_t> src(bytes);
    for (std::size_t i = 0; i < bytes; ++i) src[i] = static_cast<uint8_t>(i * 131 + 7);
    DeviceBuffer a(bytes), b(bytes);
    CK(cudaMemcpy(a.ptr, src.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(b.ptr, 0xA5, bytes));
    comm.broadcast(a.ptr, b.ptr, bytes, 0, stream);
    CK(cudaStreamSynchronize(stream));
    std::vector<uint8_t> got(bytes);
    CK(cudaMemcpy(got.data(), b.ptr, bytes, cudaMemcpyDeviceToHost));
    report("NCCL broadcast of one rank copies its input", got == src);
  }
  comm.check_async();
  CK(cudaStreamDestroy(stream));
  std::cout << (failures ? "FAILED " : "OK ") << checks - failures << "/" << checks
            << " one-rank NCCL checks passed (NCCL " << lib.version() << ")" << std::endl;
  return failures ? 1 : 0;
}

/// A diagnostic, not a test: the time of a small device operation plus a
/// host wait (4 KiB cudaMemsetAsync + cudaStreamSynchronize, then a 4 KiB
/// device-to-device copy + synchronize), 2000 times each after 200 warm-ups:
/// run alone, then as several processes at once on one GPU (under hvdrun,
/// no collective), it shows what sharing a GPU between CUDA contexts costs
/// each step (scripts/device_check.sh, docs/performance.md).
int run_sync_loop() {
  if (int rc = probe(); rc != 0) return rc;
  CK(cudaSetDevice(0));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  DeviceBuffer a(4096), b(4096);
  auto measure = [&](const char* what, auto&& op) {
    std::vector<double> us;
    for (int i = 0; i < 2200; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      op();
      CK(cudaStreamSynchronize(stream));
      const auto t1 = std::chrono::steady_clock::now();
      if (i >= 200) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    std::sort(us.begin(), us.end());
    std::printf("sync-loop pid %d: %s + cudaStreamSynchronize: median %.1f us, p10 %.1f, p90 %.1f, max %.1f\n",
                static_cast<int>(::getpid()), what, us[us.size() / 2], us[us.size() / 10], us[us.size() * 9 / 10],
                us.back());
  };
  measure("4 KiB cudaMemsetAsync", [&] { CK(cudaMemsetAsync(a.ptr, 1, 4096, stream)); });
  measure("4 KiB D2D cudaMemcpyAsync",
          [&] { CK(cudaMemcpyAsync(b.ptr, a.ptr, 4096, cudaMemcpyDeviceToDevice, stream)); });
  CK(cudaStreamDestroy(stream));
  return 0;
}

// The reduce kernel's memory bandwidth in one process (no time slicing):
// the shared-GPU leader's launch for 2 ranks (in place over 2 buffers: 2
// reads and 2 writes of the size) and for 4, with 1, 2 and 4 packs per
// thread, against cudaMemcpy device to device in the same run. The leader
// allreduce of 2 ranks cannot beat its kernel: "busbw / copy" here is the
// most `HVD_CUDA_SHARED_GPU=leader` can reach (issue 31's target: 50 %).
int run_reduce_bandwidth() {
  if (int rc = probe(); rc != 0) return rc;
  CK(cudaSetDevice(0));
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto median_us = [&](int iters, auto&& op) {
    for (int i = 0; i < 3; ++i) op();  // warm-up
    std::vector<double> us;
    for (int i = 0; i < iters; ++i) {
      CK(cudaEventRecord(e0, stream));
      op();
      CK(cudaEventRecord(e1, stream));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      us.push_back(1000.0 * ms);
    }
    std::sort(us.begin(), us.end());
    return us[us.size() / 2];
  };
  std::printf("reduce-bandwidth: median of 20 launches each; copy = cudaMemcpyAsync D2D (bytes copied per s)\n");
  for (std::size_t bytes : {std::size_t{64} << 20, std::size_t{256} << 20}) {
    std::vector<std::unique_ptr<DeviceBuffer>> bufs;
    for (int j = 0; j < 4; ++j) {
      bufs.push_back(std::make_unique<DeviceBuffer>(bytes));
      CK(cudaMemset(bufs.back()->ptr, 0, bytes));  // zeros: sums stay finite
    }
    const double copy_us = median_us(
        20, [&] { CK(cudaMemcpyAsync(bufs[1]->ptr, bufs[0]->ptr, bytes, cudaMemcpyDeviceToDevice, stream)); });
    const double copy_gbps = static_cast<double>(bytes) / copy_us / 1e3;
    std::printf("reduce-bandwidth %4zu MiB: copy %.1f us = %.1f GB/s\n", bytes >> 20, copy_us, copy_gbps);
    for (DataType t : {DataType::Float32, DataType::BFloat16}) {
      for (int n : {2, 4}) {
        for (int unroll : {1, 2, 4}) {
          cuda::detail::ReduceLaunch l;
          for (int j = 0; j < n; ++j) l.inputs[j] = bufs[static_cast<std::size_t>(j)]->ptr;
          l.num_inputs = n;
          l.out = bufs[0]->ptr;
          for (int c = 1; c < n; ++c) l.copies[c - 1] = bufs[static_cast<std::size_t>(c)]->ptr;
          l.num_copies = n - 1;
          l.count = bytes / dtype_size(t);
          l.dtype = t;
          l.op = ReduceOp::Sum;
          l.average_divisor = n;
          l.unroll = unroll;
          const double us = median_us(20, [&] { cuda::detail::launch_reduce(l, stream); });
          // busbw as nccl-tests: size / time x 2(n-1)/n; the traffic is
          // 2n x size (every buffer read once and written once).
          const double algbw = static_cast<double>(bytes) / us / 1e3;
          const double busbw = algbw * 2.0 * (n - 1) / n;
          const double traffic = 2.0 * n * static_cast<double>(bytes) / us / 1e3;
          std::printf(
              "reduce-bandwidth %4zu MiB %-8s %d buffers unroll %d: %8.1f us, traffic %7.1f GB/s (%5.1f %% of the "
              "copy's %.1f), busbw %7.1f GB/s = %5.1f %% of the copy rate\n",
              bytes >> 20, t == DataType::Float32 ? "float32" : "bfloat16", n, unroll, us, traffic,
              100.0 * traffic / (2 * copy_gbps), 2 * copy_gbps, busbw, 100.0 * busbw / copy_gbps);
        }
      }
    }
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaStreamDestroy(stream));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "--probe") return probe();
    if (mode == "--kernels") return run_kernels();
    if (mode == "--allreduce") return run_allreduce();
    if (mode == "--hvd") return run_hvd();
    if (mode == "--psets") return run_psets();
    if (mode == "--nccl") return run_nccl();
    if (mode == "--sync-loop") return run_sync_loop();
    if (mode == "--reduce-bandwidth") return run_reduce_bandwidth();
    std::cerr << "usage: cuda_check --probe | --kernels | --nccl | --sync-loop | --reduce-bandwidth | --allreduce | "
                 "--hvd | --psets (the last three under hvdrun)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "cuda_check: " << e.what() << std::endl;
    return 1;
  }
}
