// finite_bench: the time of --check_finite's pass (ops_count_nonfinite) and of --clip_grad_norm's
// sums of squares (clip_sum_squares) over a gradient of N floats, on this machine's CPU (or GPU):
// the cost each adds to a training step, to set against the step's time. The best of R repetitions
// (a shared machine only ever slows a pass down).
//
//   build/bin/finite_bench [N] [R] [cpu|cuda]   (default 1863690: the default 784-1024-1024-10 model)
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clip.h"
#include "device.h"
#include "devmem.h"
#include "log.h"
#include "ops.h"

int main(int argc, char **argv) {
  size_t n = argc > 1 ? (size_t)atoll(argv[1]) : 1863690;
  int reps = argc > 2 ? atoi(argv[2]) : 50;
  Device dev = argc > 3 && strcmp(argv[3], "cuda") == 0 ? DEVICE_CUDA : DEVICE_CPU;
  Ctx c;
  device_init(&c, dev, 0);
  float *host = malloc(n * sizeof *host);
  for (size_t i = 0; i < n; i++) host[i] = (float)((i * 2654435761u) % 1000) * 1e-6f - 5e-4f;
  float *g = dev_alloc(&c, n * sizeof *g);
  int *count = dev_alloc(&c, sizeof *count);
  dev_upload(&c, g, host, n * sizeof *g);
  Clip k;
  clip_init(&k, &c, 1.0f);
  double best_check = 1e30, best_sums = 1e30;
  for (int r = 0; r < reps; r++) {
    double t0 = log_clock();
    dev_zero(&c, count, sizeof *count);
    ops_count_nonfinite(&c, g, n, count);
    int bad;
    dev_download(&c, &bad, count, sizeof bad);  // the reducer reads the count back: the same wait
    double t1 = log_clock();
    clip_sum_squares(&k, &c, g, n);
    dev_sync(&c);
    double t2 = log_clock();
    if (t1 - t0 < best_check) best_check = t1 - t0;
    if (t2 - t1 < best_sums) best_sums = t2 - t1;
  }
  printf("# %zu floats (%.1f MB) on %s, best of %d\n", n, n * 4 / 1e6, dev == DEVICE_CUDA ? "cuda" : "cpu",
         reps);
  printf("check_finite (count + read back)  %9.3f ms  %6.2f GB/s\n", best_check * 1e3,
         n * 4 / best_check / 1e9);
  printf("clip sums of squares              %9.3f ms  %6.2f GB/s\n", best_sums * 1e3,
         n * 4 / best_sums / 1e9);
  clip_free(&k, &c);
  dev_free(&c, count);
  dev_free(&c, g);
  free(host);
  device_free(&c);
  return 0;
}
