// gemm_bound.c: the GEMM-only lower bound of one MLP training step on the CPU.
//
// Times exactly the 3·L − 1 cblas_sgemm calls of one step of common/mlp.c at the given shapes, with the
// same transposes, alphas, betas and leading dimensions, on buffers allocated and touched once before
// timing (nothing else: no bias, ReLU, softmax, gather, SGD):
//   forward   act_l  = in_l · W_lᵀ          (B, OUT) = (B, IN)·(OUT, IN)ᵀ       beta 0
//   backward  dW_l   = dy_lᵀ · in_l         (OUT, IN) = (B, OUT)ᵀ·(B, IN)       beta 0 (after zero_grad)
//             dX_l   = dy_l · W_l (l > 0)   (B, IN)  = (B, OUT)·(OUT, IN)       beta 0
// Prints one JSON line: median / min time per step, GFLOP/s at the median, and the per-GEMM medians.
// It also times, separately, the memory floor of the optimizer: one SGD-with-momentum pass over all
// parameters (m = mu·m + g; p -= lr·m: reads p, g, m and writes p, m, 20 bytes per parameter), as a
// plain loop, which GCC vectorises at -O3, the Release build's level ("sgd_median_s", "sgd_gbps").
// A trainer that runs its optimizer as a separate pass after backward (PyTorch's optimizer.step(),
// our sgd_step) cannot beat GEMM + SGD time; only fusing the update into the weight-gradient GEMM
// would remove it.
//
// Not built by CMake; scripts/bench/step01_cpu.sh compiles it:
//   gcc -O3 -std=c11 scripts/bench/gemm_bound.c -o gemm_bound -lopenblas
// Usage: gemm_bound [--batch 128] [--sizes 784,1024,1024,10] [--reps 50] [--warmup 5]
// Threads: OpenBLAS's own (set OPENBLAS_NUM_THREADS=1 for the single-thread bound).
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAXL 8

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
  qsort(v, n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Allocates and touches (fills with small values: no denormals, no NaNs).
static float *buf(size_t n, unsigned *seed) {
  float *p = malloc(n * sizeof *p);
  if (!p) {
    fprintf(stderr, "gemm_bound: out of memory\n");
    exit(1);
  }
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    p[i] = ((float)(*seed >> 8) / 16777216.0f - 0.5f) * 0.1f;
  }
  return p;
}

// Row-major C = op(A)·op(B), exactly as ops_gemm_cpu passes it.
static void gemm(int ta, int tb, int M, int N, int K, const float *A, const float *B, float beta,
                 float *C) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K,
              1.0f, A, ta ? M : K, B, tb ? K : N, beta, C, N);
}

int main(int argc, char **argv) {
  int batch = 128, reps = 50, warmup = 5, sizes[MAXL + 1], L = 0;
  const char *spec = "784,1024,1024,10";
  for (int i = 1; i < argc; i++) {
    if (i + 1 < argc && strcmp(argv[i], "--batch") == 0) batch = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--sizes") == 0) spec = argv[++i];
    else if (i + 1 < argc && strcmp(argv[i], "--reps") == 0) reps = atoi(argv[++i]);
    else if (i + 1 < argc && strcmp(argv[i], "--warmup") == 0) warmup = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--batch B] [--sizes I,H...,O] [--reps N] [--warmup N]\n", argv[0]);
      return 2;
    }
  }
  for (const char *s = spec; *s && L <= MAXL;) {
    char *end;
    sizes[L++] = (int)strtol(s, &end, 10);
    s = *end == ',' ? end + 1 : end;
    if (end == s && *s) break;
  }
  L -= 1;  // Linear layers
  if (L < 1 || batch < 1 || reps < 1) {
    fprintf(stderr, "gemm_bound: need at least two sizes, a positive batch and reps\n");
    return 2;
  }
  unsigned seed = 12345u;
  float *x = buf((size_t)batch * sizes[0], &seed), *W[MAXL], *dW[MAXL], *act[MAXL], *dact[MAXL];
  for (int l = 0; l < L; l++) {
    W[l] = buf((size_t)sizes[l + 1] * sizes[l], &seed);
    dW[l] = buf((size_t)sizes[l + 1] * sizes[l], &seed);
    act[l] = buf((size_t)batch * sizes[l + 1], &seed);
    dact[l] = buf((size_t)batch * sizes[l + 1], &seed);
  }
  int n_gemm = 3 * L - 1;
  double flops = 0.0;
  for (int l = 0; l < L; l++) flops += 2.0 * batch * sizes[l] * sizes[l + 1] * (l > 0 ? 3 : 2);
  double *step_t = malloc(sizeof(double) * reps), *g_t = malloc(sizeof(double) * reps * n_gemm);
  for (int r = -warmup; r < reps; r++) {
    double t0 = now(), t = t0;
    int g = 0;
    for (int l = 0; l < L; l++) {  // forward
      gemm(0, 1, batch, sizes[l + 1], sizes[l], l ? act[l - 1] : x, W[l], 0.0f, act[l]);
      double t1 = now();
      if (r >= 0) g_t[(size_t)g * reps + r] = t1 - t;
      t = t1, g++;
    }
    for (int l = L - 1; l >= 0; l--) {  // backward
      gemm(1, 0, sizes[l + 1], sizes[l], batch, dact[l], l ? act[l - 1] : x, 0.0f, dW[l]);
      double t1 = now();
      if (r >= 0) g_t[(size_t)g * reps + r] = t1 - t;
      t = t1, g++;
      if (l > 0) {
        gemm(0, 0, batch, sizes[l], sizes[l + 1], dact[l], W[l], 0.0f, dact[l - 1]);
        t1 = now();
        if (r >= 0) g_t[(size_t)g * reps + r] = t1 - t;
        t = t1, g++;
      }
    }
    if (r >= 0) step_t[r] = t - t0;
  }
  // The optimizer's memory floor: one SGD-with-momentum pass over all parameters.
  size_t n_params = 0;
  for (int l = 0; l < L; l++) n_params += (size_t)sizes[l + 1] * sizes[l] + sizes[l + 1];
  float *p = buf(n_params, &seed), *gr = buf(n_params, &seed), *m = buf(n_params, &seed);
  double *sgd_t = malloc(sizeof(double) * reps);
  for (int r = -warmup; r < reps; r++) {
    double t0 = now();
    for (size_t i = 0; i < n_params; i++) {
      m[i] = 0.9f * m[i] + gr[i];
      p[i] -= 1e-6f * m[i];  // tiny steps: the values stay normal numbers
    }
    if (r >= 0) sgd_t[r] = now() - t0;
  }
  double sgd = median(sgd_t, reps);
  double med = median(step_t, reps), mn = step_t[0];
  printf("{\"batch\":%d,\"sizes\":\"%s\",\"gemms\":%d,\"reps\":%d,\"gflop_per_step\":%.6f,"
         "\"median_step_s\":%.9f,\"min_step_s\":%.9f,\"gflops\":%.3f,\"samples_per_s\":%.1f,"
         "\"gemm_median_s\":[",
         batch, spec, n_gemm, reps, flops * 1e-9, med, mn, flops * 1e-9 / med, batch / med);
  for (int g = 0; g < n_gemm; g++) printf("%s%.9f", g ? "," : "", median(g_t + (size_t)g * reps, reps));
  printf("],\"params\":%zu,\"sgd_median_s\":%.9f,\"sgd_gbps\":%.2f}\n", n_params, sgd,
         20.0 * n_params / sgd * 1e-9);
  return 0;
}
