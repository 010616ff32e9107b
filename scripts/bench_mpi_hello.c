/* The MPI equivalent of hvd's hello_allreduce start-up for
 * scripts/bench_scaling.py: MPI_Init, one 4 KiB float32 sum allreduce
 * (MPI_Allreduce), a check, MPI_Finalize. Exit status 1 on a wrong sum.
 *
 *   mpicc -O2 -o /tmp/bench_mpi_hello scripts/bench_mpi_hello.c
 *   mpirun --allow-run-as-root --oversubscribe -np 8 /tmp/bench_mpi_hello */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  float x[1024];
  for (int i = 0; i < 1024; ++i) x[i] = (float)(rank + 1);
  MPI_Allreduce(MPI_IN_PLACE, x, 1024, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  const float expect = (float)size * (float)(size + 1) / 2.0f;
  int ok = 1;
  for (int i = 0; i < 1024; ++i) ok = ok && x[i] == expect;
  if (!ok) fprintf(stderr, "rank %d: allreduce gave %f, expected %f\n", rank, x[0], expect);
  MPI_Finalize();
  return ok ? 0 : 1;
}
