// gemm_bound.c: the GEMM-only lower bound of one MLP training step, on the CPU (OpenBLAS) or a GPU
// (cuBLAS).
//
// Times exactly the 3·L − 1 GEMMs of one step of common/nn/mlp.c, through the same ops_gemm calls (same
// shapes, transposes, alphas and betas), on device buffers allocated and filled once before timing,
// and nothing else: no bias, ReLU, softmax, gather or SGD:
//   forward   act_l  = in_l · W_lᵀ          (B, OUT) = (B, IN)·(OUT, IN)ᵀ       beta 0
//   backward  dW_l   = dy_lᵀ · in_l         (OUT, IN) = (B, OUT)ᵀ·(B, IN)       beta 0 (after zero_grad)
//             dX_l   = dy_l · W_l (l > 0)   (B, IN)  = (B, OUT)·(OUT, IN)       beta 0
// Each GEMM is timed with device events (on the CPU: the clock), so on a GPU the times are the
// kernels' own, without launch gaps: the bound a step's GEMMs cannot beat.
// Prints one JSON line: median / min time per step, GFLOP/s at the median, and the per-GEMM medians.
//
// On the CPU it also times, separately, the memory floor of the optimizer: one SGD-with-momentum pass
// over all parameters (m = mu·m + g; p -= lr·m: reads p, g, m and writes p, m, 20 bytes per
// parameter), as a plain loop ("sgd_median_s", "sgd_gbps"). A trainer that runs its optimizer as a
// separate pass after backward (PyTorch's optimizer.step(), our sgd_step) cannot beat GEMM + SGD
// time; only fusing the update into the weight-gradient GEMM would remove it.
//
// Built by CMake with -DDDP_BUILD_BENCH=ON (target gemm_bound); bench/step01_cpu.sh and gpu_bench.sh run it.
// --tf32 lets cuBLAS use TF32 tensor cores (device_set_tf32, as the trainers' --tf32); the CPU ignores
// it.
// Usage: gemm_bound [--device cpu|cuda] [--batch 128] [--sizes 784,1024,1024,10] [--reps 50]
//                   [--warmup 5] [--tf32]
// Threads: OpenBLAS's own (set OPENBLAS_NUM_THREADS=1 for the single-thread bound).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "device.h"
#include "devmem.h"
#include "log.h"
#include "ops.h"

#define MAXL 8

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Host values: small, no denormals, no NaNs.
static float *host_values(size_t n, unsigned *seed) {
  float *p = mallocCheck(n * sizeof *p);
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    p[i] = ((float)(*seed >> 8) / 16777216.0f - 0.5f) * 0.1f;
  }
  return p;
}

// A device buffer filled (and so touched) before timing.
static float *buf(const Ctx *c, size_t n, unsigned *seed) {
  float *h = host_values(n, seed), *d = dev_alloc(c, n * sizeof *d);
  dev_upload(c, d, h, n * sizeof *d);
  dev_sync(c);
  free(h);
  return d;
}

// The optimizer's memory floor on the CPU: median seconds of one SGD-with-momentum pass.
static double sgd_floor(size_t n, int reps, int warmup, unsigned *seed) {
  float *p = host_values(n, seed), *g = host_values(n, seed), *m = host_values(n, seed);
  double *t = mallocCheck(sizeof(double) * reps);
  for (int r = -warmup; r < reps; r++) {
    double t0 = log_clock();
    for (size_t i = 0; i < n; i++) {
      m[i] = 0.9f * m[i] + g[i];
      p[i] -= 1e-6f * m[i];  // tiny steps: the values stay normal numbers
    }
    if (r >= 0) t[r] = log_clock() - t0;
  }
  double med = median(t, reps);
  free(t);
  free(m);
  free(g);
  free(p);
  return med;
}

int main(int argc, char **argv) {
  int batch = 128, reps = 50, warmup = 5, sizes[MAXL + 1], L = 0;
  const char *spec = "784,1024,1024,10", *device = "cpu";
  bool tf32 = false;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--tf32") == 0) {
      tf32 = true;
      continue;
    }
    if (i + 1 < argc && strcmp(argv[i], "--batch") == 0)
      batch = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--sizes") == 0)
      spec = argv[++i];
    else if (i + 1 < argc && strcmp(argv[i], "--reps") == 0)
      reps = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--warmup") == 0)
      warmup = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--device") == 0)
      device = argv[++i];
    else {
      fprintf(stderr,
              "usage: %s [--device cpu|cuda] [--batch B] [--sizes I,H...,O] [--reps N] "
              "[--warmup N] [--tf32]\n",
              argv[0]);
      return 2;
    }
  }
  for (const char *s = spec; *s && L <= MAXL;) {
    char *end;
    sizes[L++] = (int)strtol(s, &end, 10);
    if (end == s || sizes[L - 1] <= 0) {
      L = 0;
      break;
    }
    s = *end == ',' ? end + 1 : end;
  }
  L -= 1;  // Linear layers
  Device dev;
  if (L < 1 || L > MAXL || batch < 1 || reps < 1 || warmup < 0 || device_parse(device, &dev) != 0) {
    fprintf(stderr,
            "gemm_bound: need 2..%d positive sizes, a positive batch and reps, and a "
            "device cpu or cuda\n",
            MAXL + 1);
    return 2;
  }
  Ctx c;
  device_init(&c, dev, 0);
  device_set_tf32(&c, tf32);
  unsigned seed = 12345u;
  float *x = buf(&c, (size_t)batch * sizes[0], &seed), *W[MAXL], *dW[MAXL], *act[MAXL], *dact[MAXL];
  size_t n_params = 0;
  for (int l = 0; l < L; l++) {
    W[l] = buf(&c, (size_t)sizes[l + 1] * sizes[l], &seed);
    dW[l] = buf(&c, (size_t)sizes[l + 1] * sizes[l], &seed);
    act[l] = buf(&c, (size_t)batch * sizes[l + 1], &seed);
    dact[l] = buf(&c, (size_t)batch * sizes[l + 1], &seed);
    n_params += (size_t)sizes[l + 1] * sizes[l] + sizes[l + 1];
  }
  int n_gemm = 3 * L - 1;
  double flops = 0.0;
  for (int l = 0; l < L; l++) flops += 2.0 * batch * sizes[l] * sizes[l + 1] * (l > 0 ? 3 : 2);
  DevEvent ev[3 * MAXL];
  for (int g = 0; g <= n_gemm; g++) dev_event_init(&c, &ev[g]);
  double *step_t = mallocCheck(sizeof(double) * reps);
  double *g_t = mallocCheck(sizeof(double) * reps * n_gemm);
  for (int r = -warmup; r < reps; r++) {
    int g = 0;
    dev_event_record(&c, &ev[0], NULL);
    for (int l = 0; l < L; l++) {  // forward
      ops_gemm(&c, false, true, batch, sizes[l + 1], sizes[l], 1.0f, l ? act[l - 1] : x, W[l], 0.0f, act[l]);
      dev_event_record(&c, &ev[++g], NULL);
    }
    for (int l = L - 1; l >= 0; l--) {  // backward
      ops_gemm(&c, true, false, sizes[l + 1], sizes[l], batch, 1.0f, dact[l], l ? act[l - 1] : x, 0.0f,
               dW[l]);
      dev_event_record(&c, &ev[++g], NULL);
      if (l > 0) {
        ops_gemm(&c, false, false, batch, sizes[l], sizes[l + 1], 1.0f, dact[l], W[l], 0.0f, dact[l - 1]);
        dev_event_record(&c, &ev[++g], NULL);
      }
    }
    dev_sync(&c);
    if (r < 0) continue;
    for (int k = 0; k < n_gemm; k++) g_t[(size_t)k * reps + r] = dev_event_elapsed(&c, &ev[k], &ev[k + 1]);
    step_t[r] = dev_event_elapsed(&c, &ev[0], &ev[n_gemm]);
  }
  double sgd = dev == DEVICE_CPU ? sgd_floor(n_params, reps, warmup, &seed) : 0.0;
  double mn = step_t[0];
  for (int r = 1; r < reps; r++) mn = step_t[r] < mn ? step_t[r] : mn;
  double med = median(step_t, reps);
  printf(
      "{\"device\":\"%s\",\"tf32\":%s,\"batch\":%d,\"sizes\":\"%s\",\"gemms\":%d,\"reps\":%d,"
      "\"gflop_per_step\":%.6f,\"median_step_s\":%.9f,\"min_step_s\":%.9f,\"gflops\":%.3f,"
      "\"samples_per_s\":%.1f,\"gemm_median_s\":[",
      device_name(dev), tf32 && dev == DEVICE_CUDA ? "true" : "false", batch, spec, n_gemm, reps,
      flops * 1e-9, med, mn, flops * 1e-9 / med, batch / med);
  for (int k = 0; k < n_gemm; k++) printf("%s%.9f", k ? "," : "", median(g_t + (size_t)k * reps, reps));
  printf("],\"params\":%zu", n_params);
  if (dev == DEVICE_CPU)
    printf(",\"sgd_median_s\":%.9f,\"sgd_gbps\":%.2f", sgd, 20.0 * n_params / sgd * 1e-9);
  printf("}\n");
  for (int g = 0; g <= n_gemm; g++) dev_event_free(&c, &ev[g]);
  for (int l = 0; l < L; l++) {
    dev_free(&c, dact[l]);
    dev_free(&c, act[l]);
    dev_free(&c, dW[l]);
    dev_free(&c, W[l]);
  }
  dev_free(&c, x);
  free(g_t);
  free(step_t);
  device_free(&c);
  return 0;
}
