// hvdbench's measurement loop.
//
// For every size: one correctness run on a known pattern (checked against
// the closed form on every rank, combined with a Min-allreduce), warm-up
// iterations, then timed iterations back to back. Each iteration is timed on
// every rank; the per-iteration maximum over ranks (the slowest rank, which
// is what a training step waits for) is taken with a Max-allreduce, and the
// median of those is reported. The number of timed iterations is capped so
// one size takes at most max_seconds_per_size (estimated from the warm-up,
// agreed on by all ranks).
#include "bench.h"

#include "hvd/collective/algorithms.h"
#include "hvd/common/error.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

namespace hvd::bench {

using collective::DataType;
using collective::ReduceOp;

namespace {

using Clock = std::chrono::steady_clock;

/// Buffers sized once for the largest message and reused for every size.
struct Buffers {
  std::vector<char> data;
  std::vector<char> recv;
};

/// Bytes per rank and elements of one op at nominal `size` bytes. Allgather
/// sizes are the gathered total (as in nccl-tests), so each rank sends 1/n.
void shape(Op op, std::size_t size, std::size_t es, int n, std::size_t& count, std::size_t& bytes) {
  if (op == Op::Allgather) {
    const std::size_t per_rank = std::max<std::size_t>(1, size / es / n);
    count = per_rank * n;
  } else {
    count = std::max<std::size_t>(1, size / es);
  }
  bytes = count * es;
}

/// One execution of the op on the current buffers.
void execute(Backend& comm, Op op, Buffers& b, std::size_t count, DataType t, ReduceOp rop) {
  const std::size_t es = collective::dtype_size(t);
  switch (op) {
    case Op::Allreduce: comm.allreduce(b.data.data(), count, t, rop); return;
    case Op::Allgather: comm.allgather(b.data.data(), count / comm.size() * es, b.recv.data()); return;
    case Op::Broadcast: comm.broadcast(b.data.data(), count * es, 0); return;
  }
}

/// Fills a known pattern, runs the op once, checks the closed form.
bool check(Backend& comm, Op op, Buffers& b, std::size_t count, DataType t) {
  const int n = comm.size();
  const int r = comm.rank();
  bool ok = true;
  switch (op) {
    case Op::Allreduce: {
      for (std::size_t i = 0; i < count; ++i) put_element(t, b.data.data(), i, (r % 3) + static_cast<double>(i % 5));
      execute(comm, op, b, count, t, ReduceOp::Sum);
      double ranks = 0;
      for (int q = 0; q < n; ++q) ranks += q % 3;
      for (std::size_t i = 0; i < count && ok; ++i) ok = get_element(t, b.data.data(), i) == ranks + n * double(i % 5);
      break;
    }
    case Op::Allgather: {
      const std::size_t per = count / n;
      for (std::size_t i = 0; i < per; ++i) put_element(t, b.data.data(), i, (r % 7) + static_cast<double>(i % 5));
      std::memset(b.recv.data(), 0xa5, count * collective::dtype_size(t));
      execute(comm, op, b, count, t, ReduceOp::Sum);
      for (std::size_t i = 0; i < count && ok; ++i) {
        ok = get_element(t, b.recv.data(), i) == (static_cast<int>(i / per) % 7) + double((i % per) % 5);
      }
      break;
    }
    case Op::Broadcast: {
      for (std::size_t i = 0; i < count; ++i) put_element(t, b.data.data(), i, r == 0 ? 1 + double(i % 11) : 0.0);
      execute(comm, op, b, count, t, ReduceOp::Sum);
      for (std::size_t i = 0; i < count && ok; ++i) ok = get_element(t, b.data.data(), i) == 1 + double(i % 11);
      break;
    }
  }
  int32_t all_ok = ok ? 1 : 0;
  comm.allreduce(&all_ok, 1, DataType::Int32, ReduceOp::Min);
  return all_ok == 1;
}

}  // namespace

void CommBackend::allreduce(void* data, std::size_t count, DataType dtype, ReduceOp op) {
  collective::allreduce(comm_, data, count, dtype, op);
}

void CommBackend::allgather(const void* send, std::size_t send_bytes, void* recv) {
  collective::allgatherv(comm_, send, send_bytes, recv, std::vector<std::size_t>(comm_.size(), send_bytes));
}

void CommBackend::broadcast(void* data, std::size_t bytes, int root) {
  collective::broadcast(comm_, data, bytes, root);
}

const char* op_name(Op op) {
  switch (op) {
    case Op::Allreduce: return "allreduce";
    case Op::Allgather: return "allgather";
    case Op::Broadcast: return "broadcast";
  }
  return "?";
}

Op parse_op(const std::string& text) {
  if (text == "allreduce") return Op::Allreduce;
  if (text == "allgather") return Op::Allgather;
  if (text == "broadcast") return Op::Broadcast;
  throw InvalidArgument(fmt::format("unknown op '{}': expected allreduce, allgather, broadcast or all", text));
}

std::size_t parse_bytes(const std::string& text) {
  std::size_t pos = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(text, &pos);
  } catch (const std::exception&) {
    throw InvalidArgument(fmt::format("bad size '{}': expected a number with optional K, M or G", text));
  }
  std::string suffix = text.substr(pos);
  unsigned long long mult = 1;
  if (suffix == "K" || suffix == "k" || suffix == "KiB")
    mult = 1ull << 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB")
    mult = 1ull << 20;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB")
    mult = 1ull << 30;
  else if (!suffix.empty() && suffix != "B") {
    throw InvalidArgument(fmt::format("bad size '{}': unknown suffix '{}' (use K, M or G)", text, suffix));
  }
  return static_cast<std::size_t>(v * mult);
}

void put_element(DataType t, void* p, std::size_t i, double v) {
  switch (t) {
    case DataType::UInt8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
    case DataType::Bool: static_cast<uint8_t*>(p)[i] = v != 0 ? 1 : 0; break;
    case DataType::Int8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
    case DataType::Int16: static_cast<int16_t*>(p)[i] = static_cast<int16_t>(v); break;
    case DataType::Int32: static_cast<int32_t*>(p)[i] = static_cast<int32_t>(v); break;
    case DataType::Int64: static_cast<int64_t*>(p)[i] = static_cast<int64_t>(v); break;
    case DataType::Float16: static_cast<uint16_t*>(p)[i] = collective::float_to_float16(static_cast<float>(v)); break;
    case DataType::BFloat16: static_cast<uint16_t*>(p)[i] = collective::float_to_bfloat16(static_cast<float>(v)); break;
    case DataType::Float32: static_cast<float*>(p)[i] = static_cast<float>(v); break;
    case DataType::Float64: static_cast<double*>(p)[i] = v; break;
  }
}

double get_element(DataType t, const void* p, std::size_t i) {
  switch (t) {
    case DataType::UInt8:
    case DataType::Bool: return static_cast<const uint8_t*>(p)[i];
    case DataType::Int8: return static_cast<const int8_t*>(p)[i];
    case DataType::Int16: return static_cast<const int16_t*>(p)[i];
    case DataType::Int32: return static_cast<const int32_t*>(p)[i];
    case DataType::Int64: return static_cast<double>(static_cast<const int64_t*>(p)[i]);
    case DataType::Float16: return collective::float16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::BFloat16: return collective::bfloat16_to_float(static_cast<const uint16_t*>(p)[i]);
    case DataType::Float32: return static_cast<const float*>(p)[i];
    case DataType::Float64: return static_cast<const double*>(p)[i];
  }
  return 0;
}

DataType parse_dtype(const std::string& text) {
  for (DataType t : {DataType::UInt8, DataType::Int8, DataType::Int16, DataType::Int32, DataType::Int64, DataType::Float16,
                     DataType::BFloat16, DataType::Float32, DataType::Float64}) {
    if (text == collective::dtype_name(t)) return t;
  }
  if (text == "fp16" || text == "half") return DataType::Float16;
  if (text == "bf16") return DataType::BFloat16;
  if (text == "fp32" || text == "float") return DataType::Float32;
  if (text == "fp64" || text == "double") return DataType::Float64;
  throw InvalidArgument(fmt::format(
      "unknown dtype '{}': expected uint8, int8, int16, int32, int64, float16, bfloat16, float32 or float64", text));
}

std::vector<Result> run(Backend& comm, const BenchOptions& o) {
  if (o.min_bytes == 0 || o.max_bytes < o.min_bytes) {
    throw InvalidArgument(fmt::format("need 0 < min-bytes <= max-bytes (got {} and {})", o.min_bytes, o.max_bytes));
  }
  if (o.step_factor < 2) throw InvalidArgument("step factor must be at least 2");
  if (o.iters < 1 || o.warmup < 0) throw InvalidArgument("need iters >= 1 and warmup >= 0");
  const int n = comm.size();
  const std::size_t es = collective::dtype_size(o.dtype);
  Buffers b;
  const std::size_t cap = std::max(o.max_bytes, es * static_cast<std::size_t>(n));
  b.data.assign(cap, 0);  // touched now, so no iteration pays for fresh pages
  b.recv.assign(cap, 0);
  std::vector<Result> results;
  std::vector<double> times;
  for (Op op : o.ops) {
    for (std::size_t size = o.min_bytes; size <= o.max_bytes; size *= o.step_factor) {
      Result res;
      res.op = op;
      res.dtype = o.dtype;
      shape(op, size, es, n, res.count, res.bytes);
      res.ok = check(comm, op, b, res.count, o.dtype);

      // Start from zeros so repeated in-place sums stay finite.
      std::memset(b.data.data(), 0, res.bytes);
      auto w0 = Clock::now();
      for (int i = 0; i < o.warmup; ++i) execute(comm, op, b, res.count, o.dtype, o.reduce_op);
      const double warm_s = std::chrono::duration<double>(Clock::now() - w0).count() / std::max(1, o.warmup);
      int32_t iters = o.iters;
      if (warm_s > 0) iters = static_cast<int32_t>(std::clamp(o.max_seconds_per_size / warm_s, 1.0, double(o.iters)));
      comm.allreduce(&iters, 1, DataType::Int32, ReduceOp::Min);

      times.assign(static_cast<std::size_t>(iters), 0.0);
      for (int i = 0; i < iters; ++i) {
        auto t0 = Clock::now();
        execute(comm, op, b, res.count, o.dtype, o.reduce_op);
        times[i] = std::chrono::duration<double>(Clock::now() - t0).count();
      }
      comm.allreduce(times.data(), times.size(), DataType::Float64, ReduceOp::Max);
      std::sort(times.begin(), times.end());
      const double median = iters % 2 ? times[iters / 2] : 0.5 * (times[iters / 2 - 1] + times[iters / 2]);
      res.iters = iters;
      res.time_us = median * 1e6;
      res.algbw_gbps = static_cast<double>(res.bytes) / median / 1e9;
      switch (op) {
        case Op::Allreduce: res.busbw_gbps = res.algbw_gbps * 2.0 * (n - 1) / n; break;
        case Op::Allgather: res.busbw_gbps = res.algbw_gbps * (n - 1) / n; break;
        case Op::Broadcast: res.busbw_gbps = res.algbw_gbps; break;
      }
      results.push_back(res);
      if (size > o.max_bytes / o.step_factor) break;  // no overflow past max
    }
  }
  return results;
}

void print_table(std::ostream& out, const Backend& comm, const std::string& label, const BenchOptions& o,
                 const std::vector<Result>& results) {
  out << fmt::format("# hvdbench ({}): {} ranks, dtype {}, reduce {}, up to {} timed iterations after {} warm-up\n",
                     label, comm.size(), collective::dtype_name(o.dtype), collective::reduce_op_name(o.reduce_op),
                     o.iters, o.warmup);
  out << "# time: median over iterations of the slowest rank; busbw = algbw * 2(n-1)/n (allreduce), "
         "(n-1)/n (allgather), 1 (broadcast)\n";
  out << fmt::format("#{:>10} {:>12} {:>12} {:>9} {:>6} {:>12} {:>12} {:>12} {:>6}\n", "op", "size(B)", "count", "type",
                     "iters", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "check");
  for (const Result& r : results) {
    out << fmt::format(" {:>10} {:>12} {:>12} {:>9} {:>6} {:>12.2f} {:>12.3f} {:>12.3f} {:>6}\n", op_name(r.op),
                       r.bytes, r.count, collective::dtype_name(r.dtype), r.iters, r.time_us, r.algbw_gbps,
                       r.busbw_gbps, r.ok ? "ok" : "FAIL");
  }
  out.flush();
}

void print_json(std::ostream& out, const Backend& comm, const std::string& label, const BenchOptions& o,
                const std::vector<Result>& results) {
  nlohmann::json doc;
  doc["path"] = label;
  doc["ranks"] = comm.size();
  doc["dtype"] = collective::dtype_name(o.dtype);
  doc["reduce_op"] = collective::reduce_op_name(o.reduce_op);
  doc["warmup"] = o.warmup;
  doc["results"] = nlohmann::json::array();
  for (const Result& r : results) {
    doc["results"].push_back({{"op", op_name(r.op)},
                              {"bytes", r.bytes},
                              {"count", r.count},
                              {"dtype", collective::dtype_name(r.dtype)},
                              {"iters", r.iters},
                              {"time_us", r.time_us},
                              {"algbw_gbps", r.algbw_gbps},
                              {"busbw_gbps", r.busbw_gbps},
                              {"check", r.ok ? "ok" : "FAIL"}});
  }
  out << doc.dump(2) << "\n";
  out.flush();
}

}  // namespace hvd::bench
