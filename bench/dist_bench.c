// dist_bench.c — all-reduce time and bus bandwidth through the process group (dist.h), the path
// step 06's reducer takes: dist_all_reduce_async + dist_wait of an in-place float32 sum, on the CPU,
// with any backend. Prints, per size, the median over --iters calls (after two warm-up calls) and
// busbw = bytes / time · 2(W−1)/W, as allreduce_bench and nccl-tests do, and checks the result.
//
//   mpirun -np 2 build-bench/bin/dist_bench --backend mpi [--iters N] [BYTES ...]
//   scripts/launch.sh -n 2 build-bench/bin/dist_bench --backend gloo [--iters N] [BYTES ...]
// (built with -DDDP_BUILD_BENCH=ON)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "devmem.h"
#include "dist.h"
#include "log.h"

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

// Median seconds of one all-reduce of n floats; *wrong counts elements that are not the sum.
static double time_all_reduce(ProcessGroup *pg, DistWork *w, float *buf, size_t n, int iters, size_t *wrong) {
  double *t = malloc((size_t)iters * sizeof *t);
  for (int i = -2; i < iters; i++) {
    for (size_t j = 0; j < n; j++) buf[j] = (float)(pg->rank + 1);
    dist_barrier(pg);
    double t0 = log_clock();
    dist_all_reduce_async(pg, buf, n, DIST_FLOAT, DIST_SUM, w);
    dist_wait(pg, w);
    if (i >= 0) t[i] = log_clock() - t0;
  }
  float want = (float)(pg->world_size * (pg->world_size + 1) / 2);
  *wrong = 0;
  for (size_t j = 0; j < n; j++) *wrong += buf[j] != want;
  qsort(t, (size_t)iters, sizeof *t, cmp_double);
  double median = t[iters / 2];
  free(t);
  return median;
}

int main(int argc, char **argv) {
  const char *backend = "auto";
  int iters = 20, n_sizes = 0;
  size_t sizes[64];
  for (int i = 1; i < argc && n_sizes < 64; i++) {
    if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters = atoi(argv[++i]);
    } else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) {
      backend = argv[++i];
    } else {
      sizes[n_sizes++] = (size_t)strtoull(argv[i], NULL, 10);
    }
  }
  if (n_sizes == 0) {  // the step 06 buckets of the course's model at the default 25 MiB cap, and smaller
    size_t d[] = {4096, 65536, 1 << 20, 7409664, 25 << 20};
    n_sizes = (int)(sizeof d / sizeof d[0]);
    memcpy(sizes, d, sizeof d);
  }
  if (iters < 1) iters = 1;
  Ctx ctx;
  ProcessGroup pg;
  dist_init(&pg, backend, DEVICE_CPU, 300.0);
  device_init(&ctx, DEVICE_CPU, 0);
  dist_connect(&pg, &ctx);
  DistWork w;
  dist_work_init(&pg, &w);
  if (pg.rank == 0)
    printf("backend %s, %d ranks\n%12s %10s %10s %8s\n", dist_backend_name(pg.backend), pg.world_size,
           "bytes", "time(ms)", "busbw", "#wrong");
  for (int s = 0; s < n_sizes; s++) {
    size_t n = sizes[s] / sizeof(float), wrong;
    float *buf = dev_alloc(&ctx, n * sizeof(float) + 1);
    double t = time_all_reduce(&pg, &w, buf, n, iters, &wrong);
    double bus = (double)(n * sizeof(float)) / t * 2.0 * (pg.world_size - 1) / pg.world_size / 1e9;
    if (pg.rank == 0) printf("%12zu %10.3f %10.2f %8zu\n", n * sizeof(float), t * 1e3, bus, wrong);
    dev_free(&ctx, buf);
  }
  dist_work_free(&pg, &w);
  dist_destroy(&pg);
  device_free(&ctx);
  return 0;
}
