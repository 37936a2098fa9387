// mpi_scratch: how much memory an MPI collective takes for itself, per rank: the growth of the peak
// RSS (getrusage) over three calls. One collective per run, since a process's peak only rises. Why
// step 07 reduce-scatters with its own ring (common/dist/dist_mpi.c) rather than MPI_Ireduce_scatter:
// with Open MPI 4.1, the library's reduce-scatters take scratch as large as the whole send buffer.
//
//   for c in 0 1 2 3 4; do mpirun -np 4 build/bin/mpi_scratch $c 16; done   (CALL, MiB of floats)
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static long peak_kib(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

enum {
  IREDUCE_SCATTER,
  IREDUCE_SCATTER_BLOCK,
  REDUCE_SCATTER,
  IALLREDUCE_IN_PLACE,
  ALLGATHER_IN_PLACE,
  N_CALLS
};
static const char *NAMES[N_CALLS] = {"MPI_Ireduce_scatter", "MPI_Ireduce_scatter_block", "MPI_Reduce_scatter",
                                     "MPI_Iallreduce (in place)", "MPI_Allgather (in place)"};

static void call(int which, float *send, float *recv, size_t n, int W, int *counts) {
  MPI_Request rq = MPI_REQUEST_NULL;
  int block = (int)(n / (size_t)W);
  if (which == IREDUCE_SCATTER)
    MPI_Ireduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &rq);
  if (which == IREDUCE_SCATTER_BLOCK)
    MPI_Ireduce_scatter_block(send, recv, block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &rq);
  if (which == REDUCE_SCATTER) MPI_Reduce_scatter(send, recv, counts, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  if (which == IALLREDUCE_IN_PLACE)
    MPI_Iallreduce(MPI_IN_PLACE, send, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &rq);
  if (which == ALLGATHER_IN_PLACE)
    MPI_Allgather(MPI_IN_PLACE, 0, MPI_FLOAT, send, block, MPI_FLOAT, MPI_COMM_WORLD);
  MPI_Wait(&rq, MPI_STATUS_IGNORE);
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, W;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &W);
  int which = argc > 1 ? atoi(argv[1]) : 0;
  size_t mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 16;
  size_t n = (mib << 20) / sizeof(float) / (size_t)W * (size_t)W;
  float *send = malloc(n * sizeof *send), *recv = malloc(n / (size_t)W * sizeof *recv);
  int *counts = malloc((size_t)W * sizeof *counts);
  if (which < 0 || which >= N_CALLS || !send || !recv || !counts || n > 0x7fffffff)
    MPI_Abort(MPI_COMM_WORLD, 2);
  for (int j = 0; j < W; j++) counts[j] = (int)(n / (size_t)W);
  memset(send, 1, n * sizeof *send);  // touched: resident before the measurement
  memset(recv, 1, n / (size_t)W * sizeof *recv);
  long before = peak_kib();
  for (int it = 0; it < 3; it++) call(which, send, recv, n, W, counts);
  long grew = peak_kib() - before, all[256];
  if (W <= 256) MPI_Gather(&grew, 1, MPI_LONG, all, 1, MPI_LONG, 0, MPI_COMM_WORLD);
  if (rank == 0 && W <= 256) {
    printf("%-26s %zu MiB, %d ranks: peak RSS growth per rank (KiB):", NAMES[which], mib, W);
    for (int r = 0; r < W; r++) printf(" %ld", all[r]);
    printf("\n");
  }
  free(counts);
  free(recv);
  free(send);
  MPI_Finalize();
  return 0;
}
