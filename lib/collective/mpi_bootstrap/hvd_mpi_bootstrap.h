#pragma once
/// The C ABI of libhvd_mpi_bootstrap.so, the optional plug-in through which
/// hvd_collective uses the MPI runtime that started it (mpi_env.h), without
/// linking libmpi itself. Plain C types only: the plug-in is dlopen()ed and
/// looked up by name, so this signature is versioned in its symbol name.
#ifdef __cplusplus
extern "C" {
#endif

/// Broadcasts `len` bytes of `buf` from MPI_COMM_WORLD rank 0 to every rank
/// and reports this process's rank and size. Initialises MPI when the
/// program has not, and then finalises it again before returning, so the
/// program may exit without MPI_Finalize (Open MPI's mpirun otherwise
/// reports such an exit as a failure). Must be called by every rank.
/// Returns 0, or non-zero with a NUL-terminated message in `err`.
typedef int (*hvd_mpi_bootstrap_broadcast_v1_fn)(char* buf, int len, int* rank, int* size, char* err, int err_len);
int hvd_mpi_bootstrap_broadcast_v1(char* buf, int len, int* rank, int* size, char* err, int err_len);

#ifdef __cplusplus
}
#endif
