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
// Inputs are random and never zero; outputs (and guard elements past the
// end) are poisoned before every check; NaN never passes.
#include "hvd/collective/algorithms.h"
#include "hvd/collective/comm.h"
#include "hvd/collective/cuda.h"
#include "hvd/collective/types.h"
#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/store/http_store.h"
#include "hvd/store/memory_store.h"
#include "reference.h"

#include <cuda_runtime.h>

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
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int failures = 0, checks = 0;
  uint64_t seed = 1;
  for (DataType t : kTypes) {
    const std::size_t es = dtype_size(t);
    for (ReduceOp op : kOps) {
      for (int n : {1, 2, 3, 4, 16}) {
        for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{65539},
                                  std::size_t{1} << 20}) {
          if (n == 16 && count > 1000) continue;
          for (int misalign : {0, 1}) {      // element offset: 1 forces the scalar path
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
                if (++failures <= 20) std::cout << "FAIL reduce (misalign " << misalign << ", alias " << alias << "): " << err << "\n";
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
      bufs_a.push_back(std::make_unique<DeviceBuffer>(counts[i] * 4));
      bufs_b.push_back(std::make_unique<DeviceBuffer>(counts[i] * 4));
      CK(cudaMemcpy(bufs_a.back()->ptr, host_a.back().bytes.data(), counts[i] * 4, cudaMemcpyHostToDevice));
      CK(cudaMemcpy(bufs_b.back()->ptr, host_b.back().bytes.data(), counts[i] * 4, cudaMemcpyHostToDevice));
      list_a.push_back({bufs_a.back()->ptr, counts[i] * 4});
      list_b.push_back({bufs_b.back()->ptr, counts[i] * 4});
    }
    std::size_t bytes_a = 0, bytes_b = 0;
    void* fused_a = fa.pack(list_a, stream, bytes_a);
    void* fused_b = fb.pack(list_b, stream, bytes_b);
    // Poison the tensors so only unpack can restore them.
    for (auto& b : bufs_a) CK(cudaMemsetAsync(b->ptr, 0xff, b->bytes, stream));
    cuda::reduce({fused_a, fused_b}, fused_a, bytes_a / 4, DataType::Float32, ReduceOp::Sum, 1.0, 1.0, stream);
    fa.unpack(list_a, stream);
    CK(cudaStreamSynchronize(stream));
    for (std::size_t i = 0; i < counts.size(); ++i) {
      std::vector<uint8_t> got((counts[i] + kGuard) * 4);
      CK(cudaMemcpy(got.data(), bufs_a[i]->ptr, counts[i] * 4, cudaMemcpyDeviceToHost));
      std::vector<uint8_t> guard(kGuard * 4);
      std::memcpy(got.data() + counts[i] * 4, guard.data(), guard.size());
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
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

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
        staged.allreduce(buf.ptr, count, t, stream, [&](void* h, std::size_t c) {
          hvd::collective::allreduce(*comm, h, c, t, op);
        });
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

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "--probe") return probe();
    if (mode == "--kernels") return run_kernels();
    if (mode == "--allreduce") return run_allreduce();
    std::cerr << "usage: cuda_check --probe | --kernels | --allreduce (under hvdrun)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "cuda_check: " << e.what() << std::endl;
    return 1;
  }
}
