/* Open MPI allreduce baseline for docs/performance.md (same method as hvdbench).
 *
 *   mpicc -O2 -o /tmp/bench_mpi_allreduce scripts/bench_mpi_allreduce.c
 *   MCA="--mca btl_tcp_if_include lo --mca oob_tcp_if_include lo"
 *   mpirun --allow-run-as-root --oversubscribe $MCA -np 2 /tmp/bench_mpi_allreduce 4096 67108864
 *   mpirun --allow-run-as-root --oversubscribe $MCA --mca btl tcp,self -np 2 /tmp/bench_mpi_allreduce
 *
 * In-place float32 sum allreduce from MIN to MAX bytes (doubling); per size:
 * warm-up, then timed iterations (bounded by 1 s), the slowest rank per
 * iteration (MPI_MAX), and the median over iterations. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ITERS 50
#define WARMUP 5
#define MAX_SECONDS 1.0

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t min_bytes = argc > 1 ? strtoull(argv[1], NULL, 10) : 4096;
  size_t max_bytes = argc > 2 ? strtoull(argv[2], NULL, 10) : (64u << 20);
  float* buf = malloc(max_bytes);
  memset(buf, 0, max_bytes);
  double times[MAX_ITERS];
  if (rank == 0) {
    printf("# Open MPI allreduce, %d ranks, float32 sum, in place\n", size);
    printf("#%12s %6s %12s %12s %6s\n", "size(B)", "iters", "time(us)", "algbw(GB/s)", "check");
  }
  for (size_t bytes = min_bytes; bytes <= max_bytes; bytes *= 2) {
    int count = (int)(bytes / 4);
    for (int i = 0; i < count; ++i) buf[i] = (float)(rank + 1);
    MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    int ok = 1;
    for (int i = 0; i < count; ++i) ok &= buf[i] == (float)(size * (size + 1) / 2);
    MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    memset(buf, 0, bytes);
    double w0 = MPI_Wtime();
    for (int i = 0; i < WARMUP; ++i) MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double warm = (MPI_Wtime() - w0) / WARMUP;
    int iters = warm > 0 ? (int)(MAX_SECONDS / warm) : MAX_ITERS;
    if (iters > MAX_ITERS) iters = MAX_ITERS;
    if (iters < 1) iters = 1;
    MPI_Allreduce(MPI_IN_PLACE, &iters, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    for (int i = 0; i < iters; ++i) {
      double t0 = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      times[i] = MPI_Wtime() - t0;
    }
    MPI_Allreduce(MPI_IN_PLACE, times, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    qsort(times, iters, sizeof(double), cmp_double);
    double med = iters % 2 ? times[iters / 2] : 0.5 * (times[iters / 2 - 1] + times[iters / 2]);
    if (rank == 0) {
      printf(" %12zu %6d %12.2f %12.3f %6s\n", bytes, iters, med * 1e6, bytes / med / 1e9, ok ? "ok" : "FAIL");
      fflush(stdout);
    }
  }
  free(buf);
  MPI_Finalize();
  return 0;
}
