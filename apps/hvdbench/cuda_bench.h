#pragma once
/// hvdbench --device cuda: allreduce of device buffers among the ranks of
/// one host through cuda::DeviceAllreducer, next to the naive path a
/// program without GPU support would take (copy to host, CPU allreduce over
/// the Comm, copy back). Both are timed per iteration after
/// cudaStreamSynchronize, slowest rank, median -- like the CPU table. The
/// "staged" column is the cross-host path (cuda::StagedAllreducer: chunked
/// D2H / network / H2D overlap through pinned buffers) run over the same Comm.
#include "bench.h"

#include "hvd/collective/comm.h"
#include "hvd/store/store.h"

#include <ostream>
#include <string>
#include <vector>

namespace hvd::bench {

struct CudaRankInfo {
  int local_rank = 0;
  int local_size = 1;
  int cross_rank = 0;
  int cross_size = 1;
};

struct CudaResult {
  std::size_t bytes = 0;
  std::size_t count = 0;
  double device_us = 0;  ///< DeviceAllreducer, median of slowest rank
  double naive_us = 0;  ///< D2H + CPU allreduce + H2D; 0 when --no-naive
  double staged_us = 0;  ///< cuda::StagedAllreducer over the Comm (the cross-host path); 0 when --no-naive
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  /// Memory traffic of the device allreduce on one GPU -- each of the k
  /// ranks sharing it must at least read every input and write its output,
  /// (k + 1) x bytes each -- over the GPU's device-to-device copy traffic
  /// (2 x the bytes copied per second, measured alone): issue 7's "fraction
  /// of D2D bandwidth" (k = 2: 3 x bytes per rank). 0 when not measured.
  double d2d_fraction = 0;
  /// The GPU's device-to-device copy rate (bytes copied per second, in
  /// GB/s; the slowest GPU of the job), and how many ranks share a GPU.
  double d2d_gbps = 0;
  int ranks_per_gpu = 1;
  bool ok = false;
};

/// Whether this binary can run --device cuda at all (built with CUDA and a
/// device visible); `why` says what is missing otherwise.
bool cuda_bench_available(std::string& why);

/// Runs the sweep (allreduce only) collectively on every rank of `comm`,
/// which must all be on this host (cross_size 1).
std::vector<CudaResult> run_cuda(collective::Comm& comm, store::Store& store, const CudaRankInfo& info,
                                 const BenchOptions& options, bool naive);

void print_cuda_table(std::ostream& out, const collective::Comm& comm, const BenchOptions& options,
                      const std::vector<CudaResult>& results);
void print_cuda_json(std::ostream& out, const collective::Comm& comm, const BenchOptions& options,
                     const std::vector<CudaResult>& results);

}  // namespace hvd::bench
