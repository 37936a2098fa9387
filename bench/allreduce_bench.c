// allreduce_bench.c — raw MPI_Allreduce bandwidth, as nccl-tests reports it: for each size, the
// median time of an in-place float32 sum over MPI_COMM_WORLD, algbw = bytes / time and
// busbw = algbw · 2(n−1)/n (the bytes each rank must move in a ring all-reduce), plus a check of the
// result (#wrong). The buffers are allocated and touched once, before timing, as the trainers do.
// --nonblocking times MPI_Iallreduce + MPI_Wait instead (the path step 06's reducer takes on CPU;
// Open MPI runs it in libnbc, with its own algorithms, not the tuned blocking ones).
// --cold writes a 64 MiB scratch buffer (twice the L3 cache of the course VM) before each call, then
// the data: the data is hot, as a gradient just written by backward is, but MPI's own buffers are
// not, as in a training step, where backward streams the model through the caches between calls.
//
//   mpirun -np 2 build/bin/allreduce_bench [--iters N] [--nonblocking] [--cold] [BYTES ...]
// (built with -DDDP_BUILD_BENCH=ON)
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  int iters = 20, n_sizes = 0, nonblocking = 0, cold = 0;
  size_t sizes[64];
  for (int i = 1; i < argc && n_sizes < 64; i++) {
    if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--nonblocking") == 0) {
      nonblocking = 1;
    } else if (strcmp(argv[i], "--cold") == 0) {
      cold = 1;
    } else {
      sizes[n_sizes++] = (size_t)strtoull(argv[i], NULL, 10);
    }
  }
  if (n_sizes == 0)
    for (size_t s = 4096; s <= ((size_t)64 << 20); s *= 4) sizes[n_sizes++] = s;
  size_t max = 0;
  for (int i = 0; i < n_sizes; i++) max = sizes[i] > max ? sizes[i] : max;
  const size_t scratch_bytes = (size_t)64 << 20;
  float *buf = malloc(max);
  char *scratch = cold ? malloc(scratch_bytes) : NULL;
  double *t = malloc((size_t)iters * sizeof *t);
  if (!buf || !t || (cold && !scratch)) MPI_Abort(MPI_COMM_WORLD, 1);
  memset(buf, 0, max);  // touch every page before timing
  if (rank == 0)
    printf(
        "# ranks %d, %d iterations per size, in-place float sum, %s\n"
        "#%12s %12s %10s %10s %10s %7s\n",
        n, iters,
        nonblocking ? (cold ? "MPI_Iallreduce + MPI_Wait, caches flushed before each call"
                            : "MPI_Iallreduce + MPI_Wait")
                    : (cold ? "MPI_Allreduce, caches flushed before each call" : "MPI_Allreduce"),
        "size(B)", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
  for (int s = 0; s < n_sizes; s++) {
    size_t count = sizes[s] / sizeof(float);
    long wrong = 0;
    for (int it = -2; it < iters; it++) {  // two warm-up calls
      if (cold) memset(scratch, it & 0xff, scratch_bytes);
      for (size_t i = 0; i < count; i++) buf[i] = (float)(rank + 1);
      MPI_Barrier(MPI_COMM_WORLD);
      double t0 = MPI_Wtime();
      if (nonblocking) {
        MPI_Request req;
        MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
      } else {
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }
      double dt = MPI_Wtime() - t0;
      if (it >= 0) t[it] = dt;
      for (size_t i = 0; i < count; i++) wrong += buf[i] != (float)(n * (n + 1) / 2);
    }
    MPI_Allreduce(MPI_IN_PLACE, t, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);  // slowest rank
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    qsort(t, (size_t)iters, sizeof *t, cmp_double);
    double med = t[iters / 2], algbw = (double)sizes[s] / med / 1e9;
    if (rank == 0)
      printf(" %12zu %12zu %10.1f %10.3f %10.3f %7ld\n", sizes[s], count, med * 1e6, algbw,
             algbw * 2.0 * (n - 1) / n, wrong);
  }
  free(t);
  free(scratch);
  free(buf);
  MPI_Finalize();
  return 0;
}
