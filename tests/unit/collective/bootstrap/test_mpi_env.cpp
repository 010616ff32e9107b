// Workers started by MPI: rank/size from a fake launcher environment and
// the pure cross-rank derivation.
#include "hvd/collective/mpi_env.h"
#include "hvd/common/error.h"

#include <catch2/catch.hpp>

#include <map>

using namespace hvd::collective;

namespace {

EnvLookup fake(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

std::vector<RankPlace> places(std::vector<std::string> hosts) {
  std::vector<RankPlace> out;
  for (auto& h : hosts) out.push_back({h, -1});
  return out;
}

}  // namespace

TEST_CASE("mpi: no MPI variables: not an MPI job", "[mpi_env]") {
  CHECK_FALSE(detect_mpi_world(fake({{"PATH", "/bin"}})).has_value());
}

TEST_CASE("mpi: Open MPI variables", "[mpi_env]") {
  auto w = detect_mpi_world(fake({{"OMPI_COMM_WORLD_RANK", "3"},
                                  {"OMPI_COMM_WORLD_SIZE", "4"},
                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                  {"HOROVOD_HOSTNAME", "nodeB"}}));
  REQUIRE(w);
  CHECK(w->rank == 3);
  CHECK(w->size == 4);
  CHECK(w->local_rank == 1);
  CHECK(w->local_size == 2);
  CHECK(w->cross_rank == -1);
  CHECK(w->hostname == "nodeB");
  CHECK(w->source.find("OMPI") != std::string::npos);
}

TEST_CASE("mpi: MPICH / Intel MPI variables, local ranks optional", "[mpi_env]") {
  auto w = detect_mpi_world(
      fake({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "1"}}));
  REQUIRE(w);
  CHECK(w->rank == 1);
  CHECK(w->size == 2);
  CHECK(w->local_rank == 0);
  CHECK(w->local_size == 1);
  auto bare = detect_mpi_world(fake({{"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}));
  REQUIRE(bare);
  CHECK(bare->local_rank == -1);
  CHECK_FALSE(bare->hostname.empty());
}

TEST_CASE("mpi: PMIx rank with the size from SLURM_NTASKS", "[mpi_env]") {
  auto w = detect_mpi_world(fake({{"PMIX_RANK", "5"}, {"SLURM_NTASKS", "8"}}));
  REQUIRE(w);
  CHECK(w->rank == 5);
  CHECK(w->size == 8);
  CHECK_THROWS_AS(detect_mpi_world(fake({{"PMIX_RANK", "5"}})), hvd::InvalidArgument);
}

TEST_CASE("mpi: Open MPI wins over PMI when both are present", "[mpi_env]") {
  auto w = detect_mpi_world(
      fake({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}));
  REQUIRE(w);
  CHECK(w->rank == 0);
}

TEST_CASE("mpi: bad launcher variables name the variable", "[mpi_env]") {
  CHECK_THROWS_WITH(detect_mpi_world(fake({{"OMPI_COMM_WORLD_RANK", "x"}, {"OMPI_COMM_WORLD_SIZE", "2"}})),
                    Catch::Contains("OMPI_COMM_WORLD_RANK='x'"));
  CHECK_THROWS_WITH(detect_mpi_world(fake({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "2"}})),
                    Catch::Contains("out of range"));
  CHECK_THROWS_WITH(detect_mpi_world(fake({{"PMI_RANK", "0"}})), Catch::Contains("PMI_SIZE"));
  CHECK_THROWS_AS(detect_mpi_world(fake({{"OMPI_COMM_WORLD_SIZE", "0"}, {"OMPI_COMM_WORLD_RANK", "0"}})),
                  hvd::InvalidArgument);
}

TEST_CASE("mpi: cross ranks: two hosts with two ranks each", "[mpi_env]") {
  auto t = compute_cross_ranks(places({"a", "a", "b", "b"}));
  REQUIRE(t.size() == 4);
  CHECK(t[0].local_rank == 0);
  CHECK(t[1].local_rank == 1);
  CHECK(t[2].local_rank == 0);
  CHECK(t[3].local_rank == 1);
  for (auto& x : t) CHECK(x.local_size == 2);
  for (auto& x : t) CHECK(x.cross_size == 2);
  CHECK(t[0].cross_rank == 0);
  CHECK(t[1].cross_rank == 0);
  CHECK(t[2].cross_rank == 1);
  CHECK(t[3].cross_rank == 1);
}

TEST_CASE("mpi: cross ranks: uneven hosts and interleaved ranks", "[mpi_env]") {
  // Ranks round-robin over hosts (mpirun -map-by node): a b a c a.
  auto t = compute_cross_ranks(places({"a", "b", "a", "c", "a"}));
  CHECK(t[0].local_rank == 0);
  CHECK(t[2].local_rank == 1);
  CHECK(t[4].local_rank == 2);
  CHECK(t[0].local_size == 3);
  CHECK(t[1].local_size == 1);
  // local rank 0 lives on a, b, c -> cross size 3; local rank 1 only on a.
  CHECK(t[0].cross_size == 3);
  CHECK(t[1].cross_rank == 1);
  CHECK(t[3].cross_rank == 2);
  CHECK(t[2].cross_size == 1);
  CHECK(t[2].cross_rank == 0);
  CHECK(t[4].cross_size == 1);
}

TEST_CASE("mpi: cross ranks: launcher-given local ranks are kept", "[mpi_env]") {
  std::vector<RankPlace> p = {{"a", 1}, {"a", 0}, {"b", 0}};
  auto t = compute_cross_ranks(p);
  CHECK(t[0].local_rank == 1);
  CHECK(t[1].local_rank == 0);
  CHECK(t[0].cross_size == 1);
  CHECK(t[1].cross_size == 2);
  CHECK(t[2].cross_rank == 1);
}

TEST_CASE("mpi: cross ranks: inconsistent local ranks are refused", "[mpi_env]") {
  std::vector<RankPlace> dup = {{"a", 0}, {"a", 0}};
  CHECK_THROWS_AS(compute_cross_ranks(dup), hvd::InvalidArgument);
  std::vector<RankPlace> big = {{"a", 2}, {"a", 0}};
  CHECK_THROWS_AS(compute_cross_ranks(big), hvd::InvalidArgument);
  CHECK(compute_cross_ranks({}).empty());
}

TEST_CASE("mpi: single host matches horovodrun's assignment", "[mpi_env]") {
  auto t = compute_cross_ranks(places({"h", "h", "h"}));
  for (int r = 0; r < 3; ++r) {
    CHECK(t[r].local_rank == r);
    CHECK(t[r].local_size == 3);
    CHECK(t[r].cross_rank == 0);
    CHECK(t[r].cross_size == 1);
  }
}
