// The smallest complete hvd program: prints rank/size/host, runs an
// allreduce, an allgather and a broadcast, and checks each result.
//   hvdrun -np 2 -H localhost:2 build/apps/examples/hello_allreduce
// Exit status 0 when every check passed on this rank.
#include "hvd/collective/hvd.h"

#include <cstdio>
#include <exception>
#include <vector>

namespace {

int check(bool ok, const char* what) {
  std::printf("rank %d: %s %s\n", hvd::rank(), what, ok ? "ok" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace

int main() {
  try {
    hvd::init();
    const int rank = hvd::rank();
    const int size = hvd::size();
    std::printf("hello from rank %d of %d (local rank %d of %d) on %s\n", rank, size, hvd::local_rank(),
                hvd::local_size(), hvd::context().settings().hostname.c_str());
    int failures = 0;

    // Every rank contributes rank+1: the sum is size*(size+1)/2.
    std::vector<float> x(1024, static_cast<float>(rank + 1));
    hvd::allreduce("x", x);
    const float expect = static_cast<float>(size * (size + 1) / 2);
    bool ok = true;
    for (float v : x) ok = ok && v == expect;
    failures += check(ok, "allreduce");

    // Rank r contributes r+1 copies of r.
    std::vector<int32_t> mine(static_cast<std::size_t>(rank + 1), rank);
    std::vector<int32_t> all = hvd::allgather("ranks", mine);
    std::vector<int32_t> want;
    for (int r = 0; r < size; ++r) want.insert(want.end(), static_cast<std::size_t>(r + 1), r);
    failures += check(all == want, "allgather");

    // The last rank's value reaches everybody.
    std::vector<double> b(8, rank == size - 1 ? 3.25 : -1.0);
    hvd::broadcast("b", b, size - 1);
    failures += check(b == std::vector<double>(8, 3.25), "broadcast");

    hvd::shutdown();
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hello_allreduce: %s\n", e.what());
    return 1;
  }
}
