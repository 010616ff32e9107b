// The collective path of an MPI-launched job: hvd::init() with no
// HOROVOD_RANK (so the rank comes from the MPI launcher, docs/mpi.md), then
// allreduces with closed-form results and an init/shutdown/init cycle.
// Prints "rank R of S: allreduce ok" and exits 0; 1 on a failed check.
// Under hvdrun it also prints the address it reaches hvdrun's store from
// ("rank R of S: address A"), so cross-host tests can tell where it ran.
#include "hvd/collective/hvd.h"
#include "hvd/transport/tcp.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <vector>

namespace {

int check_round(int round) {
  const int rank = hvd::rank(), size = hvd::size();
  for (std::size_t n : {std::size_t(1), std::size_t(1000), std::size_t(100000)}) {
    std::vector<float> data(n, static_cast<float>(rank + 1));
    hvd::allreduce("round" + std::to_string(round) + ".sum." + std::to_string(n), data);
    const float want = static_cast<float>(size * (size + 1) / 2);
    for (float v : data) {
      if (v != want) {
        std::fprintf(stderr, "rank %d: allreduce of %zu floats gave %g, want %g\n", rank, n, v, want);
        return 1;
      }
    }
  }
  std::vector<int> local = {hvd::local_rank(), hvd::local_size(), hvd::cross_rank(), hvd::cross_size()};
  std::printf("rank %d of %d: local %d/%d cross %d/%d\n", rank, size, local[0], local[1], local[2], local[3]);
  return 0;
}

}  // namespace

int main() {
  try {
    hvd::init();
    if (const char* store = std::getenv("HOROVOD_GLOO_RENDEZVOUS_ADDR")) {
      std::printf("rank %d of %d: address %s\n", hvd::rank(), hvd::size(),
                  hvd::transport::source_address_for(store).c_str());
    }
    if (check_round(0) != 0) return 1;
    hvd::shutdown();
    hvd::init();
    if (check_round(1) != 0) return 1;
    std::printf("rank %d of %d: allreduce ok\n", hvd::rank(), hvd::size());
    std::fflush(stdout);
    hvd::shutdown();
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "allreduce probe: error: %s\n", e.what());
    return 1;
  }
}
