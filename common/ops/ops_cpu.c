// ops_cpu.c: the CPU reference of every op in ops.h: one cblas_sgemm call, or a plain loop.
// These are the definitions the CUDA kernels are tested against, so they favour clarity; the GEMMs,
// where the time goes, are OpenBLAS's when the build has it (HAVE_OPENBLAS), else plain C.
#include <math.h>
#include <string.h>

#include "ops_backend.h"

#ifdef HAVE_OPENBLAS
#include "blas.h"

bool ops_have_blas(void) { return true; }

void ops_gemm_cpu(const Ctx *c, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                  const float *B, float beta, float *C) {
  (void)c;
  // Dense row-major storage: A is (M, K), or (K, M) when transposed; likewise B.
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K, alpha,
              A, ta ? M : K, B, tb ? K : N, beta, C, N);
}
#else
bool ops_have_blas(void) { return false; }

void ops_gemm_cpu(const Ctx *c, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                  const float *B, float beta, float *C) {
  ops_gemm_plain_cpu(c, ta, tb, M, N, K, alpha, A, B, beta, C);
}
#endif

// C's row i starts as beta·C (beta 0: zeros, whatever C held, NaNs included).
static void gemm_scale_row(float *crow, int N, float beta) {
  if (beta == 0.0f) {
    memset(crow, 0, (size_t)N * sizeof *crow);
  } else if (beta != 1.0f) {
    for (int j = 0; j < N; j++) crow[j] *= beta;
  }
}

void ops_gemm_plain_cpu(const Ctx *c, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                        const float *B, float beta, float *C) {
  (void)c;
  // op(A)[i][k] is A[i*K + k], or A[k*M + i] when transposed; op(B)[k][j] is B[k*N + j], or
  // B[j*K + k]. The loops are ordered so that the innermost one walks memory contiguously where it
  // can: rows of B (not transposed) are added to C's row; with B transposed, each C element is a
  // dot product along B's row.
  for (int i = 0; i < M; i++) {
    float *crow = C + (size_t)i * N;
    if (!tb) {
      gemm_scale_row(crow, N, beta);
      for (int k = 0; k < K; k++) {
        float a = alpha * (ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k]);
        const float *brow = B + (size_t)k * N;
        for (int j = 0; j < N; j++) crow[j] += a * brow[j];
      }
    } else {
      for (int j = 0; j < N; j++) {
        const float *bcol = B + (size_t)j * K;
        float s = 0.0f;
        for (int k = 0; k < K; k++) s += (ta ? A[(size_t)k * M + i] : A[(size_t)i * K + k]) * bcol[k];
        crow[j] = alpha * s + (beta == 0.0f ? 0.0f : beta * crow[j]);
      }
    }
  }
}

void ops_bias_act_cpu(const Ctx *c, float *y, const float *bias, int B, int N, bool relu) {
  (void)c;
  for (int b = 0; b < B; b++) {
    float *row = y + (size_t)b * N;
    for (int n = 0; n < N; n++) {
      float v = row[n] + bias[n];
      row[n] = relu && v < 0.0f ? 0.0f : v;
    }
  }
}

void ops_relu_backward_cpu(const Ctx *c, float *dy, const float *y, size_t n) {
  (void)c;
  // A select, not a conditional store: the compiler vectorises it (measured 10x faster here).
  for (size_t i = 0; i < n; i++) dy[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void ops_bias_grad_cpu(const Ctx *c, const float *dy, float *db, int B, int N, float beta) {
  (void)c;
  if (beta == 0.0f) memset(db, 0, (size_t)N * sizeof *db);
  // Rows in order, so every run (and every rank) sums in the same order.
  for (int b = 0; b < B; b++) {
    const float *row = dy + (size_t)b * N;
    for (int n = 0; n < N; n++) db[n] += row[n];
  }
}

void ops_softmax_xent_cpu(const Ctx *c, const float *logits, const int *labels, int B, int C, float *dlogits,
                          float *row_loss, float *loss) {
  (void)c;
  double sum = 0.0;  // double: the mean of B losses loses nothing to rounding
  for (int b = 0; b < B; b++) {
    const float *x = logits + (size_t)b * C;
    float *d = dlogits + (size_t)b * C;
    float mx = x[0];
    for (int k = 1; k < C; k++) mx = x[k] > mx ? x[k] : mx;
    float z = 0.0f;
    for (int k = 0; k < C; k++) z += expf(x[k] - mx);
    for (int k = 0; k < C; k++) d[k] = (expf(x[k] - mx) / z - (k == labels[b] ? 1.0f : 0.0f)) / B;
    row_loss[b] = logf(z) + mx - x[labels[b]];
    sum += row_loss[b];
  }
  loss[0] = (float)(sum / B);
}

void ops_count_correct_cpu(const Ctx *c, const float *logits, const int *labels, int B, int C, int *correct) {
  (void)c;
  for (int b = 0; b < B; b++) {
    const float *x = logits + (size_t)b * C;
    int best = 0;
    for (int k = 1; k < C; k++) best = x[k] > x[best] ? k : best;  // first maximum wins
    *correct += best == labels[b];
  }
}

void ops_sgd_cpu(const Ctx *c, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                 float dampening, float wd, bool nesterov, bool first) {
  (void)c;
  for (size_t i = 0; i < n; i++) {
    float d = g[i] + wd * p[i];
    if (momentum != 0.0f) {
      buf[i] = first ? d : momentum * buf[i] + (1.0f - dampening) * d;
      d = nesterov ? d + momentum * buf[i] : buf[i];
    }
    p[i] -= lr * d;
  }
}

void ops_scale_cpu(const Ctx *c, float *x, size_t n, float a) {
  (void)c;
  for (size_t i = 0; i < n; i++) x[i] *= a;
}

void ops_div_cpu(const Ctx *c, float *x, size_t n, float d) {
  (void)c;
  for (size_t i = 0; i < n; i++) x[i] /= d;
}

void ops_count_nonfinite_cpu(const Ctx *c, const float *x, size_t n, int *count) {
  (void)c;
  for (size_t i = 0; i < n; i++) *count += !isfinite(x[i]);
}

void ops_axpy_cpu(const Ctx *c, float *y, const float *x, size_t n, float a) {
  (void)c;
  for (size_t i = 0; i < n; i++) y[i] += a * x[i];  // ISO C11: not contracted into an FMA
}

void ops_gather_cpu(const Ctx *c, const float *src_x, const int *src_y, const int *idx, int B, int N,
                    float *dst_x, int *dst_y) {
  (void)c;
  for (int b = 0; b < B; b++) {
    memcpy(dst_x + (size_t)b * N, src_x + (size_t)idx[b] * N, (size_t)N * sizeof *dst_x);
    dst_y[b] = src_y[idx[b]];
  }
}

void ops_gather_pixels_cpu(const Ctx *c, const uint8_t *src_p, const int *src_y, const int *idx, int B, int N,
                           float mean, float std, float *dst_x, int *dst_y) {
  (void)c;
  float lut[256];  // every pixel value's feature, computed as the CUDA kernel computes it
  for (int p = 0; p < 256; p++) lut[p] = ((float)p / 255.0f - mean) / std;
  for (int b = 0; b < B; b++) {
    const uint8_t *row = src_p + (size_t)idx[b] * N;
    float *out = dst_x + (size_t)b * N;
    for (int k = 0; k < N; k++) out[k] = lut[row[k]];
    dst_y[b] = src_y[idx[b]];
  }
}
