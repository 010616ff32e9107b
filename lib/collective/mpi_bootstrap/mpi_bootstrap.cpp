// libhvd_mpi_bootstrap.so: the one place hvdrun code calls MPI (see
// hvd_mpi_bootstrap.h for the contract).
#include "hvd_mpi_bootstrap.h"

#include <mpi.h>

#include <cstdio>

namespace {

int fail(char* err, int err_len, const char* what, int code) {
  char text[MPI_MAX_ERROR_STRING] = {0};
  int text_len = 0;
  MPI_Error_string(code, text, &text_len);
  if (err != nullptr && err_len > 0) std::snprintf(err, static_cast<size_t>(err_len), "%s: %s", what, text);
  return code == 0 ? 1 : code;
}

}  // namespace

extern "C" int hvd_mpi_bootstrap_broadcast_v1(char* buf, int len, int* rank, int* size, char* err, int err_len) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized) {
    if (err != nullptr && err_len > 0) std::snprintf(err, static_cast<size_t>(err_len), "MPI is already finalized");
    return 1;
  }
  const bool ours = !initialized;
  if (ours) {
    int rc = MPI_Init(nullptr, nullptr);
    if (rc != MPI_SUCCESS) return fail(err, err_len, "MPI_Init", rc);
  }
  // Errors come back as codes instead of aborting the job.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rc = MPI_Comm_rank(MPI_COMM_WORLD, rank);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_size(MPI_COMM_WORLD, size);
  if (rc == MPI_SUCCESS) rc = MPI_Bcast(buf, len, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rc != MPI_SUCCESS) return fail(err, err_len, "MPI_Bcast", rc);
  if (ours) {
    rc = MPI_Finalize();
    if (rc != MPI_SUCCESS) return fail(err, err_len, "MPI_Finalize", rc);
  }
  return 0;
}
