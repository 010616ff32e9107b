// A tiny MPI-launched worker: forms the job with bootstrap_from_mpi_env (no
// HOROVOD_RANK) and does a store round trip with its neighbour.
//   mpi_store_probe [--fail-rank R --code C] [--sleep SECONDS] [--rounds N]
// (--rounds 2 bootstraps twice, as hvd::shutdown + hvd::init would)
// Prints "rank R size S local L/LS cross C/CS mode M" and
// "rank R roundtrip ok"; exits 0, or C on rank R.
#include "hvd/collective/mpi_env.h"
#include "hvd/common/error.h"
#include "hvd/common/logging.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

using namespace std::chrono_literals;

int main(int argc, char** argv) {
  int fail_rank = -1, fail_code = 0, sleep_s = 0, rounds = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--fail-rank") == 0) fail_rank = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--code") == 0) fail_code = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--sleep") == 0) sleep_s = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--rounds") == 0) rounds = std::atoi(argv[i + 1]);
  }
  hvd::init_logging("probe", spdlog::level::warn);
  try {
    int rank = 0;
    for (int round = 0; round < rounds; ++round) {
      const std::string key = "probe/round" + std::to_string(round);
      auto result = hvd::collective::bootstrap_from_mpi_env(20s);
      if (!result) {
        std::fprintf(stderr, "probe: no MPI launcher variables\n");
        return 2;
      }
      const auto& w = result->world;
      std::printf("rank %d size %d local %d/%d cross %d/%d mode %s\n", w.rank, w.size, w.local_rank, w.local_size,
                  w.cross_rank, w.cross_size, result->mode.c_str());
      std::fflush(stdout);
      if (w.size > 1) {
        auto& store = *result->store;
        store.set_string(key + "/" + std::to_string(w.rank), "hello from " + std::to_string(w.rank));
        int peer = (w.rank + 1) % w.size;
        std::string got = store.get_string(key + "/" + std::to_string(peer), 20000ms);
        if (got != "hello from " + std::to_string(peer)) {
          std::fprintf(stderr, "rank %d: bad value from %d: %s\n", w.rank, peer, got.c_str());
          return 3;
        }
        // Rank 0 hosts the store in some modes: it leaves last.
        if (w.rank != 0) {
          store.set_string(key + "/bye/" + std::to_string(w.rank), "1");
        } else {
          std::vector<std::string> keys;
          for (int r = 1; r < w.size; ++r) keys.push_back(key + "/bye/" + std::to_string(r));
          store.wait(keys, 20000ms);
          std::this_thread::sleep_for(200ms);
        }
      }
      std::printf("rank %d roundtrip ok\n", w.rank);
      std::fflush(stdout);
      rank = w.rank;
    }

    if (sleep_s > 0) std::this_thread::sleep_for(std::chrono::seconds(sleep_s));
    if (rank == fail_rank) return fail_code;
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "probe: error: %s\n", e.what());
    return 1;
  }
}
