#pragma once
/// Workers started by an MPI launcher (docs/mpi.md).
///
/// Two situations end here, both without HOROVOD_RANK in the environment:
///  1. `hvdrun --mpi`: mpirun cannot give each rank its own variables, so
///     hvdrun exports only job-wide ones (the store address, the secret) and
///     each rank reads its rank and size from the MPI launcher's variables.
///  2. A platform ran `mpirun ./train` with no hvdrun at all. Then rank 0
///     hosts the rendezvous store in-process and the others learn where it
///     is either from HVD_MASTER_ADDR/HVD_MASTER_PORT (set by the user) or,
///     failing that, through the MPI runtime itself: an optional plug-in,
///     libhvd_mpi_bootstrap.so, built only where an MPI library was found,
///     is dlopen()ed so hvd_collective never links libmpi.
/// In every case the cross ranks are derived after rendezvous: each rank
/// publishes its node (host name, plus its source address towards the store
/// so machines sharing a host name are told apart) and local rank in the
/// store, and all compute the same topology (compute_cross_ranks).
#include "hvd/store/http_store.h"
#include "hvd/store/store.h"

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace hvd::collective {

/// Rank, size and placement of this process in an MPI-launched job.
/// -1 means "not known yet" (local values when the launcher does not export
/// them; cross values until compute_cross_ranks has run).
struct WorldInfo {
  int rank = 0;
  int size = 1;
  int local_rank = -1;
  int local_size = -1;
  int cross_rank = -1;
  int cross_size = -1;
  /// This process's host name (HOROVOD_HOSTNAME if set, else gethostname()).
  std::string hostname;
  /// Which variables it came from, for messages: "OMPI_COMM_WORLD_*",
  /// "PMI_* (MPICH/Intel MPI)".
  std::string source;
};

/// How detect_mpi_world reads variables (a fake in unit tests).
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

/// The MPI launcher's view of this process, or nullopt when no MPI launcher
/// variables are present. Reads, in order:
///  - Open MPI: OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE
///  - MPICH/Hydra and Intel MPI: PMI_RANK/PMI_SIZE with MPI_LOCALRANKID/
///    MPI_LOCALNRANKS
///  - PMIx launchers (Open MPI 5's prterun, srun --mpi=pmix): PMIX_RANK with
///    the size from OMPI_COMM_WORLD_SIZE, PMIX_SIZE or SLURM_NTASKS.
/// A family that is only half present, a non-integer or an out-of-range
/// value throws hvd::InvalidArgument naming the variable.
std::optional<WorldInfo> detect_mpi_world(const EnvLookup& lookup);
/// Same, reading the process environment.
std::optional<WorldInfo> detect_mpi_world();

/// Where one rank runs, as it publishes itself during rendezvous.
struct RankPlace {
  /// Identifies the node; ranks with equal values share a host.
  std::string hostname;
  /// -1: unknown (the launcher did not say); derived from host order.
  int local_rank = -1;
};

struct Topology {
  int local_rank = 0;
  int local_size = 0;
  int cross_rank = 0;
  int cross_size = 0;
};

/// Pure: the topology of every rank (index = rank) from where each runs,
/// with Horovod's meaning: hosts are ordered by their lowest rank; a rank's
/// cross_rank is the index of its host among the hosts that have a rank
/// with the same local_rank, and cross_size is the number of such hosts.
/// Unknown local ranks are numbered by rank order within the host.
/// InvalidArgument when two ranks of one host claim the same local rank or
/// a local rank is not below the host's rank count.
std::vector<Topology> compute_cross_ranks(const std::vector<RankPlace>& places);

/// A rendezvous formed from the MPI launcher's environment.
struct BootstrapResult {
  /// Complete topology (no -1 left).
  WorldInfo world;
  /// The store all ranks share; nullptr for a world of size 1.
  std::unique_ptr<store::Store> store;
  // Rank 0's in-process store server (no hvdrun) is deliberately not here:
  // mpi_env keeps it for the life of the process, because peers may still
  // use it after this rank's communicator is gone, MPI cannot be initialised
  // twice and HVD_MASTER_PORT cannot be bound twice; a re-init
  // (hvd::shutdown, hvd::init) reuses it.
  /// The job secret peers prove on every link (Settings::secret).
  std::string secret;
  /// The store's host as ranks reach it (Settings::route_hint).
  std::string store_host;
  /// How the store was found: "hvdrun", "HVD_MASTER_ADDR", "MPI".
  std::string mode;
};

/// For init when HOROVOD_RANK is absent. nullopt when no MPI launcher
/// variables are present (a plain single process). Otherwise:
/// Safe to call again after a shutdown (same store, new connection).
///  - HOROVOD_GLOO_RENDEZVOUS_ADDR set (hvdrun --mpi): connect to hvdrun's
///    store with HVDRUN_SECRET;
///  - else HVD_MASTER_ADDR and HVD_MASTER_PORT: rank 0 serves the store on
///    0.0.0.0:HVD_MASTER_PORT, the others connect to HVD_MASTER_ADDR. The
///    secret is HVDRUN_SECRET, else HVD_MASTER_SECRET, else one rank 0
///    generates and broadcasts through the MPI plug-in; with neither, an
///    InvalidArgument says to set HVD_MASTER_SECRET;
///  - else the MPI plug-in: rank 0 serves the store on an ephemeral port and
///    broadcasts "address port secret" with MPI_Bcast (MPI is finalised
///    again right after, unless the program had initialised it itself).
///    The address is HOROVOD_GLOO_IFACE's, 127.0.0.1 when all ranks share
///    one host, else the first non-loopback IPv4 address.
/// Then every rank publishes its RankPlace and waits (up to `timeout`) for
/// all others. Errors: InvalidArgument (bad variables, no way to
/// rendezvous), IoError (store unreachable), TimeoutError (a rank missing).
std::optional<BootstrapResult> bootstrap_from_mpi_env(std::chrono::milliseconds timeout);

/// Name of the plug-in and the variable that overrides where it is loaded
/// from (default: next to libhvd_collective.so, then the loader's path).
inline constexpr const char* kMpiBootstrapLibrary = "libhvd_mpi_bootstrap.so";
/// The plug-in built against MPICH (when its development files are there
/// beside the default MPI), tried first in a job that Hydra started.
inline constexpr const char* kMpiBootstrapMpichLibrary = "libhvd_mpi_bootstrap_mpich.so";
inline constexpr const char* kMpiBootstrapLibraryEnv = "HVD_MPI_BOOTSTRAP_LIB";

}  // namespace hvd::collective
