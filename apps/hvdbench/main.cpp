// hvdbench: collective benchmark in the style of nccl-tests.
//   hvdrun -np 2 -H localhost:2 hvdbench --op allreduce --min-bytes 4K --max-bytes 64M
// Under hvdrun it forms a communicator from the worker environment
// (HOROVOD_RANK/SIZE, HOROVOD_GLOO_RENDEZVOUS_ADDR/PORT, HVDRUN_SECRET);
// alone it runs as a job of size 1, or with --threads N as N ranks on
// threads of this process over loopback TCP. Rank 0 prints the table.
#include "api_backend.h"
#include "bench.h"
#include "cuda_bench.h"

#include "hvd/collective/algorithms.h"
#include "hvd/common/env.h"
#include "hvd/common/error.h"
#include "hvd/common/job_env.h"
#include "hvd/common/logging.h"
#include "hvd/common/secret.h"
#include "hvd/store/http_store.h"
#include "hvd/store/memory_store.h"

#include <CLI/CLI.hpp>

#include <iostream>
#include <thread>

namespace {

using namespace hvd;

struct Cli {
  std::string op = "all";
  std::string min_bytes = "4K";
  std::string max_bytes = "64M";
  std::string dtype = "float32";
  std::string reduce = "sum";
  int iters = 50;
  int warmup = 5;
  double max_seconds = 1.0;
  int threads = 0;
  bool api = false;
  std::size_t step_factor = 2;
  bool json = false;
  std::string device = "cpu";
  bool no_naive = false;
};

collective::ReduceOp parse_reduce(const std::string& text) {
  for (auto op : {collective::ReduceOp::Sum, collective::ReduceOp::Average, collective::ReduceOp::Min,
                  collective::ReduceOp::Max, collective::ReduceOp::Product}) {
    if (text == collective::reduce_op_name(op)) return op;
  }
  throw InvalidArgument(fmt::format("unknown reduce op '{}': expected sum, average, min, max or product", text));
}

bench::BenchOptions to_options(const Cli& cli) {
  bench::BenchOptions o;
  if (cli.op != "all") o.ops = {bench::parse_op(cli.op)};
  o.min_bytes = bench::parse_bytes(cli.min_bytes);
  o.max_bytes = bench::parse_bytes(cli.max_bytes);
  o.dtype = bench::parse_dtype(cli.dtype);
  o.reduce_op = parse_reduce(cli.reduce);
  o.step_factor = cli.step_factor;
  o.iters = cli.iters;
  o.warmup = cli.warmup;
  o.max_seconds_per_size = cli.max_seconds;
  return o;
}

bool all_ok(const std::vector<bench::Result>& results) {
  for (const auto& r : results) {
    if (!r.ok) return false;
  }
  return true;
}

void report(const bench::Backend& b, const std::string& label, const Cli& cli, const bench::BenchOptions& o,
            const std::vector<bench::Result>& results) {
  if (b.rank() != 0) return;
  if (cli.json) {
    bench::print_json(std::cout, b, label, o, results);
  } else {
    bench::print_table(std::cout, b, label, o, results);
  }
}

/// --api: through the public API (which reads the environment itself).
int run_api(const Cli& cli, const bench::BenchOptions& o) {
  bench::ApiBackend api;
  auto results = bench::run(api, o);
  report(api, "api", cli, o, results);
  return all_ok(results) ? 0 : 1;
}

/// One process, one rank (under hvdrun, or alone as size 1).
int run_process(const Cli& cli, const bench::BenchOptions& o) {
  const int rank = static_cast<int>(env::get_int_or(job_env::kRank, 0));
  const int size = static_cast<int>(env::get_int_or(job_env::kSize, 1));
  init_logging(fmt::format("hvdbench[{}]", rank), parse_log_level(env::get_or(job_env::kLogLevel, "warning")));
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(env::get_double_or(job_env::kGlooTimeoutSeconds, 30.0) * 1000));
  std::unique_ptr<store::Store> st = store::make_store_from_env(timeout);
  store::InMemoryStore alone;
  if (!st && size > 1) {
    throw InvalidArgument(
        fmt::format("HOROVOD_SIZE={} but HOROVOD_GLOO_RENDEZVOUS_ADDR is not set: run hvdbench under hvdrun", size));
  }
  collective::CommOptions co;
  co.rank = rank;
  co.size = size;
  co.prefix = "hvdbench/";
  co.secret = env::get_or(job_env::kSecret, "");
  co.route_hint = env::get_or(job_env::kRendezvousAddr, "");
  co.timeout = timeout;
  co.socket_buffer_bytes = static_cast<int>(env::get_int_or("HVDBENCH_SOCKET_BUFFER", -1));
  auto comm = collective::connect_comm(st ? *st : alone, co);
  if (cli.device == "cuda") {
    bench::CudaRankInfo info;
    info.local_rank = static_cast<int>(env::get_int_or(job_env::kLocalRank, 0));
    info.local_size = static_cast<int>(env::get_int_or(job_env::kLocalSize, 1));
    info.cross_rank = static_cast<int>(env::get_int_or(job_env::kCrossRank, 0));
    info.cross_size = static_cast<int>(env::get_int_or(job_env::kCrossSize, 1));
    auto results = bench::run_cuda(*comm, st ? *st : alone, info, o, !cli.no_naive);
    if (rank == 0) {
      if (cli.json) {
        bench::print_cuda_json(std::cout, *comm, o, results);
      } else {
        bench::print_cuda_table(std::cout, *comm, o, results);
      }
    }
    for (const auto& r : results) {
      if (!r.ok) return 1;
    }
    return 0;
  }
  bench::CommBackend backend(*comm);
  auto results = bench::run(backend, o);
  report(backend, "comm", cli, o, results);
  return all_ok(results) ? 0 : 1;
}

/// --threads N: N ranks on threads of this process (loopback TCP).
int run_threads(const Cli& cli, const bench::BenchOptions& o) {
  init_logging("hvdbench", spdlog::level::warn);
  const int n = cli.threads;
  store::InMemoryStore st;
  const std::string secret = random_secret(16);
  std::vector<int> codes(n, 1);
  std::vector<std::string> errors(n);
  std::vector<std::thread> ts;
  for (int r = 0; r < n; ++r) {
    ts.emplace_back([&, r] {
      try {
        collective::CommOptions co;
        co.rank = r;
        co.size = n;
        co.prefix = "hvdbench/";
        co.secret = secret;
        co.socket_buffer_bytes = static_cast<int>(env::get_int_or("HVDBENCH_SOCKET_BUFFER", -1));
        auto comm = collective::connect_comm(st, co);
        bench::CommBackend backend(*comm);
        auto results = bench::run(backend, o);
        report(backend, "comm", cli, o, results);
        codes[r] = all_ok(results) ? 0 : 1;
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : ts) t.join();
  int rc = 0;
  for (int r = 0; r < n; ++r) {
    if (!errors[r].empty()) std::cerr << "hvdbench: rank " << r << ": " << errors[r] << "\n";
    rc = std::max(rc, errors[r].empty() ? codes[r] : 1);
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hvdbench: allreduce/allgather/broadcast bandwidth and latency, like nccl-tests"};
  Cli cli;
  app.add_option("--op", cli.op, "allreduce, allgather, broadcast or all")->capture_default_str();
  app.add_option("--min-bytes,-b", cli.min_bytes, "smallest message (4K, 1M, ...)")->capture_default_str();
  app.add_option("--max-bytes,-e", cli.max_bytes, "largest message")->capture_default_str();
  app.add_option("--step-factor,-f", cli.step_factor, "multiply the size by this between rows")->capture_default_str();
  app.add_option("--dtype,-d", cli.dtype, "element type")->capture_default_str();
  app.add_option("--reduce", cli.reduce, "allreduce operator: sum, average, min, max, product")->capture_default_str();
  app.add_option("--iters,-n", cli.iters, "timed iterations per size (at most)")->capture_default_str();
  app.add_option("--warmup,-w", cli.warmup, "untimed iterations per size")->capture_default_str();
  app.add_option("--max-seconds", cli.max_seconds, "time budget for the timed iterations of one size")
      ->capture_default_str();
  app.add_option("--threads", cli.threads, "run N ranks as threads of this process (without hvdrun)");
  app.add_flag("--json", cli.json, "print JSON instead of the table");
  app.add_flag("--api", cli.api, "go through the public named-tensor API instead of the raw collectives");
  app.add_option("--device", cli.device,
                 "where the buffers live: cpu, or cuda (allreduce of device buffers on "
                 "one host, beside the naive copy-to-host and the staged cross-host paths)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  app.add_flag("--no-naive", cli.no_naive, "with --device cuda: skip timing the naive and staged paths");
  CLI11_PARSE(app, argc, argv);
  try {
    const bench::BenchOptions o = to_options(cli);
    if (cli.threads > 0 && cli.api) throw InvalidArgument("--api and --threads cannot be combined");
    if (cli.device == "cuda") {
      if (cli.api || cli.threads > 0) throw InvalidArgument("--device cuda cannot be combined with --api or --threads");
      std::string why;
      if (!bench::cuda_bench_available(why)) {
        // 77: the conventional "skipped" status, so scripts can tell a
        // missing GPU from a failure.
        std::cerr << "hvdbench: SKIPPED: --device cuda: " << why << "\n";
        return 77;
      }
    }
    if (cli.api) return run_api(cli, o);
    if (cli.threads > 0) return run_threads(cli, o);
    return run_process(cli, o);
  } catch (const std::exception& e) {
    std::cerr << "hvdbench: " << e.what() << "\n";
    return 1;
  }
}
