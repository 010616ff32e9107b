#pragma once
/// The benchmark loop behind hvdbench, separate from main() so that it can
/// run over any Comm (a real multi-process job or test threads).
#include "hvd/collective/comm.h"
#include "hvd/collective/types.h"

#include <cstddef>
#include <ostream>
#include <string>
#include <vector>

namespace hvd::bench {

enum class Op { Allreduce, Allgather, Broadcast };

struct BenchOptions {
  std::vector<Op> ops{Op::Allreduce, Op::Allgather, Op::Broadcast};
  std::size_t min_bytes = 4096;
  std::size_t max_bytes = 64u << 20;
  /// Each size is this many times the previous one.
  std::size_t step_factor = 2;
  collective::DataType dtype = collective::DataType::Float32;
  collective::ReduceOp reduce_op = collective::ReduceOp::Sum;
  /// Timed iterations per size (fewer when the time budget runs out).
  int iters = 50;
  int warmup = 5;
  /// Upper bound for the timed iterations of one size, so a sweep to 1 GiB
  /// cannot run for hours.
  double max_seconds_per_size = 1.0;
};

/// What the benchmark drives: the data-plane collectives on a Comm
/// directly, or the public named-tensor API (negotiation, fusion, cache).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// In place.
  virtual void allreduce(void* data, std::size_t count, collective::DataType dtype, collective::ReduceOp op) = 0;
  /// Every rank sends send_bytes; recv gets size() * send_bytes.
  virtual void allgather(const void* send, std::size_t send_bytes, void* recv) = 0;
  /// In place.
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
};

/// Collectives straight on a Comm (hvd/collective/algorithms.h).
class CommBackend final : public Backend {
 public:
  explicit CommBackend(collective::Comm& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void allreduce(void* data, std::size_t count, collective::DataType dtype, collective::ReduceOp op) override;
  void allgather(const void* send, std::size_t send_bytes, void* recv) override;
  void broadcast(void* data, std::size_t bytes, int root) override;

 private:
  collective::Comm& comm_;
};

/// One row of the table.
struct Result {
  Op op;
  std::size_t bytes = 0;
  std::size_t count = 0;
  collective::DataType dtype;
  int iters = 0;
  /// Median over iterations of the slowest rank's time.
  double time_us = 0;
  double algbw_gbps = 0;
  double busbw_gbps = 0;
  bool ok = false;
};

const char* op_name(Op op);
/// "allreduce" | "allgather" | "broadcast"; InvalidArgument otherwise.
Op parse_op(const std::string& text);
/// "4096", "4K", "64M", "1G" (binary multiples); InvalidArgument otherwise.
std::size_t parse_bytes(const std::string& text);
/// "float32", "fp16", ... (the names of dtype_name plus common aliases).
collective::DataType parse_dtype(const std::string& text);

/// Element i of a host buffer of dtype t, written from / read as a double
/// (the check patterns are small integers, exact in every dtype; Bool
/// stores v != 0).
void put_element(collective::DataType t, void* p, std::size_t i, double v);
double get_element(collective::DataType t, const void* p, std::size_t i);

/// Runs the sweep on every rank (collectively); every rank gets the results.
std::vector<Result> run(Backend& backend, const BenchOptions& options);

/// `label` names the path measured ("comm" or "api").
void print_table(std::ostream& out, const Backend& backend, const std::string& label, const BenchOptions& options,
                 const std::vector<Result>& results);
void print_json(std::ostream& out, const Backend& backend, const std::string& label, const BenchOptions& options,
                const std::vector<Result>& results);

}  // namespace hvd::bench
