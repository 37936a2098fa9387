// ops.c: dispatch of every op to its CPU reference (ops_cpu.c) or CUDA version (ops_cuda.cu).
#include "ops_backend.h"

#include <stdarg.h>
#include <stdio.h>

#include "check.h"
#include "devmem.h"

// IMPL(c, ops_x): the implementation of ops_x for context c. A build without CUDA has no ops_x_cuda,
// and no CUDA context either (device_init() refuses DEVICE_CUDA, saying that the build lacks CUDA),
// so there every op is the CPU one.
#if HAVE_CUDA
#define IMPL(c, op) ((c)->dev == DEVICE_CUDA ? op##_cuda : op##_cpu)
#else
#define IMPL(c, op) op##_cpu
#endif

void ops_gemm(const Ctx *c, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
              const float *B, float beta, float *C) {
  IMPL(c, ops_gemm)(c, ta, tb, M, N, K, alpha, A, B, beta, C);
}

void ops_bias_act(const Ctx *c, float *y, const float *bias, int B, int N, bool relu) {
  IMPL(c, ops_bias_act)(c, y, bias, B, N, relu);
}

void ops_relu_backward(const Ctx *c, float *dy, const float *y, size_t n) {
  IMPL(c, ops_relu_backward)(c, dy, y, n);
}

void ops_bias_grad(const Ctx *c, const float *dy, float *db, int B, int N, float beta) {
  IMPL(c, ops_bias_grad)(c, dy, db, B, N, beta);
}

void ops_softmax_xent(const Ctx *c, const float *logits, const int *labels, int B, int C, float *dlogits,
                      float *row_loss, float *loss) {
  IMPL(c, ops_softmax_xent)(c, logits, labels, B, C, dlogits, row_loss, loss);
}

void ops_count_correct(const Ctx *c, const float *logits, const int *labels, int B, int C, int *correct) {
  IMPL(c, ops_count_correct)(c, logits, labels, B, C, correct);
}

void ops_sgd(const Ctx *c, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
             float dampening, float wd, bool nesterov, bool first) {
  IMPL(c, ops_sgd)(c, p, g, buf, n, lr, momentum, dampening, wd, nesterov, first);
}

void ops_scale(const Ctx *c, float *x, size_t n, float a) { IMPL(c, ops_scale)(c, x, n, a); }

void ops_div(const Ctx *c, float *x, size_t n, float d) { IMPL(c, ops_div)(c, x, n, d); }

void ops_count_nonfinite(const Ctx *c, const float *x, size_t n, int *count) {
  IMPL(c, ops_count_nonfinite)(c, x, n, count);
}

int ops_nonfinite(const Ctx *c, const float *x, size_t n, int *scratch) {
  int count;
  dev_zero(c, scratch, sizeof count);
  ops_count_nonfinite(c, x, n, scratch);
  dev_download(c, &count, scratch, sizeof count);
  return count;
}

void ops_require_finite(const Ctx *c, const float *x, size_t n, int *scratch, int rank, long long step,
                        const char *where_fmt, ...) {
  int bad = ops_nonfinite(c, x, n, scratch);
  if (bad == 0) return;
  char where[512];
  va_list ap;
  va_start(ap, where_fmt);
  vsnprintf(where, sizeof where, where_fmt, ap);
  va_end(ap);
  die(1, "--check_finite: rank %d, step %lld: %d non-finite gradient value%s (NaN or infinity) in %s", rank,
      step, bad, bad == 1 ? "" : "s", where);
}

void ops_axpy(const Ctx *c, float *y, const float *x, size_t n, float a) { IMPL(c, ops_axpy)(c, y, x, n, a); }

void ops_gather(const Ctx *c, const float *src_x, const int *src_y, const int *idx, int B, int N,
                float *dst_x, int *dst_y) {
  IMPL(c, ops_gather)(c, src_x, src_y, idx, B, N, dst_x, dst_y);
}

void ops_gather_pixels(const Ctx *c, const uint8_t *src_p, const int *src_y, const int *idx, int B, int N,
                       float mean, float std, float *dst_x, int *dst_y) {
  IMPL(c, ops_gather_pixels)(c, src_p, src_y, idx, B, N, mean, std, dst_x, dst_y);
}
