// blas_bench.c: one BLAS library's single-precision GEMM on the course's shapes: GFLOP/s, and whether
// its results are right (issue 41's candidates; bench/blas_candidates.py runs one process per
// candidate and prints the table).
//
// The library is loaded with dlopen, so that one program measures any of them: Debian's OpenBLAS,
// OpenBLAS from PyPI (scipy-openblas32, whose symbols carry the prefix `scipy_`), BLIS; or, with
// --lib plain, the project's own plain C GEMM (ops_gemm_plain_cpu, common/ops/ops_cpu.c). OpenBLAS picks
// its kernel when the library is loaded, so a kernel forced by hand (OPENBLAS_CORETYPE) is a process's
// environment: the driver sets it.
//
// The shapes are the GEMMs of one training step of the default model (784-1024-1024-10; see
// bench/gemm_bound.c for the list), at --batch B. Correctness: every element of C = A·Bᵀ etc. is
// compared with a float64 reference within the float32 GEMM error bound |c - ref| ≤ γ_K · Σ|a||b|
// (γ_K = K·u/(1 - K·u), u = 2^-24; Higham, Accuracy and Stability, 3.5), which any correct float32
// GEMM meets whatever its order of additions.
//
// Usage: blas_bench --lib PATH|plain [--prefix scipy_] [--batch 128] [--reps 20]
// Prints one JSON line: library, version and kernel (as the library says), GFLOP/s (median step), the
// step's median seconds, and "correct": true/false with the worst element's ratio to its bound.
#define _GNU_SOURCE  // RTLD_DEEPBIND, clock_gettime
#include <dlfcn.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "device.h"
#include "ops_backend.h"

enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };  // the CBLAS enums' values
typedef void (*SgemmFn)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                        float *, int);

typedef struct {
  SgemmFn sgemm;       // NULL: the plain C GEMM
  const char *name;    // what the library says it is
  const char *kernel;  // its kernel or configuration
} Blas;

static void die(const char *what) {
  fprintf(stderr, "blas_bench: %s\n", what);
  exit(2);
}

static void *sym(void *lib, const char *prefix, const char *name) {
  char full[128];
  snprintf(full, sizeof full, "%s%s", prefix, name);
  return dlsym(lib, full);
}

// Loads the library and asks it what it is (OpenBLAS: config and core name; BLIS: version and arch).
static Blas load(const char *path, const char *prefix) {
  Blas b = {NULL, "plain C (ops_gemm_plain_cpu)", "-"};
  if (strcmp(path, "plain") == 0) return b;
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
  if (!lib) die(dlerror());
  b.sgemm = (SgemmFn)sym(lib, prefix, "cblas_sgemm");
  if (!b.sgemm) die("the library has no cblas_sgemm (wrong --prefix?)");
  const char *(*config)(void) = (const char *(*)(void))sym(lib, prefix, "openblas_get_config");
  const char *(*core)(void) = (const char *(*)(void))sym(lib, prefix, "openblas_get_corename");
  const char *(*blis_version)(void) = (const char *(*)(void))sym(lib, prefix, "bli_info_get_version_str");
  const char *(*blis_arch_string)(int) = (const char *(*)(int))sym(lib, prefix, "bli_arch_string");
  int (*blis_arch)(void) = (int (*)(void))sym(lib, prefix, "bli_arch_query_id");
  if (config && core) {
    b.name = config();
    b.kernel = core();
  } else if (blis_version && blis_arch_string && blis_arch) {
    static char name[64];
    snprintf(name, sizeof name, "BLIS %s", blis_version());
    b.name = name;
    b.kernel = blis_arch_string(blis_arch());
  } else {
    b.name = path;
    b.kernel = "unknown";
  }
  return b;
}

static void gemm(const Blas *b, const Ctx *c, bool ta, bool tb, int M, int N, int K, const float *A,
                 const float *B, float *C) {
  if (!b->sgemm) {
    ops_gemm_plain_cpu(c, ta, tb, M, N, K, 1.0f, A, B, 0.0f, C);
    return;
  }
  b->sgemm(ROW_MAJOR, ta ? TRANS : NO_TRANS, tb ? TRANS : NO_TRANS, M, N, K, 1.0f, A, ta ? M : K, B,
           tb ? K : N, 0.0f, C, N);
}

// The float64 reference of C = op(A)·op(B) and its error bound γ_K · Σ|a||b|, element by element;
// returns the worst ratio |c - ref| / bound (≤ 1 is right).
static double worst_ratio(bool ta, bool tb, int M, int N, int K, const float *A, const float *B,
                          const float *C) {
  const double u = ldexp(1.0, -24), gamma = K * u / (1 - K * u);
  double worst = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K; k++) {
        double a = ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k];
        double bb = tb ? B[(size_t)j * K + k] : B[(size_t)k * N + j];
        ref += a * bb;
        mag += fabs(a * bb);
      }
      double bound = gamma * mag, err = fabs(C[(size_t)i * N + j] - ref);
      double r = bound > 0 ? err / bound : (err > 0 ? INFINITY : 0);
      if (r > worst || isnan(C[(size_t)i * N + j])) worst = isnan(C[(size_t)i * N + j]) ? INFINITY : r;
    }
  return worst;
}

static float *values(size_t n, unsigned *seed) {
  float *p = malloc(n * sizeof *p);
  if (!p) die("out of memory");
  for (size_t i = 0; i < n; i++) {
    *seed = *seed * 1664525u + 1013904223u;
    p[i] = ((float)(*seed >> 8) / 16777216.0f - 0.5f) * 0.1f;
  }
  return p;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

#define NL 3
static const int SIZES[NL + 1] = {784, 1024, 1024, 10};

int main(int argc, char **argv) {
  const char *path = NULL, *prefix = "";
  int batch = 128, reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--lib") == 0)
      path = argv[i + 1];
    else if (strcmp(argv[i], "--prefix") == 0)
      prefix = argv[i + 1];
    else if (strcmp(argv[i], "--batch") == 0)
      batch = atoi(argv[i + 1]);
    else if (strcmp(argv[i], "--reps") == 0)
      reps = atoi(argv[i + 1]);
    else
      die("usage: blas_bench --lib PATH|plain [--prefix P] [--batch B] [--reps R]");
  }
  if (!path || batch < 1 || reps < 1 || reps > 1000)
    die("usage: blas_bench --lib PATH|plain [--prefix P] [--batch B] [--reps R]");
  Blas b = load(path, prefix);
  Ctx c;
  memset(&c, 0, sizeof c);
  c.dev = DEVICE_CPU;
  unsigned seed = 12345;
  float *act[NL + 1], *w[NL], *dy[NL], *dw[NL], *dx[NL];
  for (int l = 0; l <= NL; l++) act[l] = values((size_t)batch * SIZES[l], &seed);
  for (int l = 0; l < NL; l++) {
    w[l] = values((size_t)SIZES[l + 1] * SIZES[l], &seed);
    dy[l] = values((size_t)batch * SIZES[l + 1], &seed);
    dw[l] = values((size_t)SIZES[l + 1] * SIZES[l], &seed);
    dx[l] = values((size_t)batch * SIZES[l], &seed);
  }
  double flops = 0;
  for (int l = 0; l < NL; l++) flops += 2.0 * batch * SIZES[l] * SIZES[l + 1] * (l > 0 ? 3 : 2);
  double *t = malloc((size_t)reps * sizeof *t), worst = 0;
  for (int r = -2; r < reps; r++) {  // two warm-up steps
    double t0 = now();
    for (int l = 0; l < NL; l++)  // forward: act_{l+1} = act_l · W_lᵀ
      gemm(&b, &c, false, true, batch, SIZES[l + 1], SIZES[l], act[l], w[l], act[l + 1]);
    for (int l = NL - 1; l >= 0; l--) {  // backward: dW = dyᵀ · act_l; dX = dy · W
      gemm(&b, &c, true, false, SIZES[l + 1], SIZES[l], batch, dy[l], act[l], dw[l]);
      if (l > 0) gemm(&b, &c, false, false, batch, SIZES[l], SIZES[l + 1], dy[l], w[l], dx[l]);
    }
    if (r >= 0) t[r] = now() - t0;
    if (r == -1) {  // every shape checked once, on the warm-up's results
      for (int l = 0; l < NL; l++) {
        double f = worst_ratio(false, true, batch, SIZES[l + 1], SIZES[l], act[l], w[l], act[l + 1]);
        double g = worst_ratio(true, false, SIZES[l + 1], SIZES[l], batch, dy[l], act[l], dw[l]);
        double h = l > 0 ? worst_ratio(false, false, batch, SIZES[l], SIZES[l + 1], dy[l], w[l], dx[l]) : 0;
        worst = fmax(worst, fmax(f, fmax(g, h)));
      }
    }
  }
  qsort(t, reps, sizeof *t, cmp_double);
  double med = t[reps / 2];
  printf(
      "{\"library\": \"%s\", \"kernel\": \"%s\", \"batch\": %d, \"step_median_s\": %.6f, "
      "\"gflops\": %.1f, \"correct\": %s, \"worst_error_over_bound\": %.3g}\n",
      b.name, b.kernel, batch, med, flops / med / 1e9, worst <= 1 ? "true" : "false", worst);
  return 0;
}
