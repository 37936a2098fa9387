// ops.c: dispatch of every op to its CPU reference (ops_cpu.c) or CUDA version (ops_cuda.cu).
#include "ops.h"

#define CUDA(c) ((c)->dev == DEVICE_CUDA)

void ops_gemm(const Ctx *c, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
              const float *B, float beta, float *C) {
  (CUDA(c) ? ops_gemm_cuda : ops_gemm_cpu)(c, ta, tb, M, N, K, alpha, A, B, beta, C);
}

void ops_bias_act(const Ctx *c, float *y, const float *bias, int B, int N, bool relu) {
  (CUDA(c) ? ops_bias_act_cuda : ops_bias_act_cpu)(c, y, bias, B, N, relu);
}

void ops_relu_backward(const Ctx *c, float *dy, const float *y, size_t n) {
  (CUDA(c) ? ops_relu_backward_cuda : ops_relu_backward_cpu)(c, dy, y, n);
}

void ops_bias_grad(const Ctx *c, const float *dy, float *db, int B, int N, float beta) {
  (CUDA(c) ? ops_bias_grad_cuda : ops_bias_grad_cpu)(c, dy, db, B, N, beta);
}

void ops_softmax_xent(const Ctx *c, const float *logits, const int *labels, int B, int C,
                      float *dlogits, float *row_loss, float *loss) {
  (CUDA(c) ? ops_softmax_xent_cuda : ops_softmax_xent_cpu)(c, logits, labels, B, C, dlogits,
                                                           row_loss, loss);
}

void ops_count_correct(const Ctx *c, const float *logits, const int *labels, int B, int C,
                       int *correct) {
  (CUDA(c) ? ops_count_correct_cuda : ops_count_correct_cpu)(c, logits, labels, B, C, correct);
}

void ops_sgd(const Ctx *c, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
             float dampening, float wd, bool nesterov, bool first) {
  (CUDA(c) ? ops_sgd_cuda : ops_sgd_cpu)(c, p, g, buf, n, lr, momentum, dampening, wd, nesterov,
                                         first);
}

void ops_scale(const Ctx *c, float *x, size_t n, float a) {
  (CUDA(c) ? ops_scale_cuda : ops_scale_cpu)(c, x, n, a);
}

void ops_axpy(const Ctx *c, float *y, const float *x, size_t n, float a) {
  (CUDA(c) ? ops_axpy_cuda : ops_axpy_cpu)(c, y, x, n, a);
}

void ops_gather(const Ctx *c, const float *src_x, const int *src_y, const int *idx, int B, int N,
                float *dst_x, int *dst_y) {
  (CUDA(c) ? ops_gather_cuda : ops_gather_cpu)(c, src_x, src_y, idx, B, N, dst_x, dst_y);
}

void ops_gather_pixels(const Ctx *c, const uint8_t *src_p, const int *src_y, const int *idx, int B,
                       int N, float mean, float std, float *dst_x, int *dst_y) {
  (CUDA(c) ? ops_gather_pixels_cuda : ops_gather_pixels_cpu)(c, src_p, src_y, idx, B, N, mean, std,
                                                             dst_x, dst_y);
}
