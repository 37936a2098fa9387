// ops_nocuda.c: ops.h's CUDA versions for builds without the CUDA toolkit: each ends the job with a
// hint (only reachable through a DEVICE_CUDA context, which ctx_init already refuses).
#include "check.h"
#include "ops.h"

#define NO_CUDA()                                                                            \
  die(1,                                                                                     \
      "this program was built without CUDA; rebuild on a machine with the CUDA toolkit, or " \
      "use --device cpu")

void ops_gemm_cuda(const Ctx *c, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                   const float *B, float beta, float *C) {
  (void)c, (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)alpha, (void)A, (void)B, (void)beta,
      (void)C;
  NO_CUDA();
}
void ops_bias_act_cuda(const Ctx *c, float *y, const float *bias, int B, int N, bool relu) {
  (void)c, (void)y, (void)bias, (void)B, (void)N, (void)relu;
  NO_CUDA();
}
void ops_relu_backward_cuda(const Ctx *c, float *dy, const float *y, size_t n) {
  (void)c, (void)dy, (void)y, (void)n;
  NO_CUDA();
}
void ops_bias_grad_cuda(const Ctx *c, const float *dy, float *db, int B, int N, float beta) {
  (void)c, (void)dy, (void)db, (void)B, (void)N, (void)beta;
  NO_CUDA();
}
void ops_softmax_xent_cuda(const Ctx *c, const float *logits, const int *labels, int B, int C,
                           float *dlogits, float *row_loss, float *loss) {
  (void)c, (void)logits, (void)labels, (void)B, (void)C, (void)dlogits, (void)row_loss, (void)loss;
  NO_CUDA();
}
void ops_count_correct_cuda(const Ctx *c, const float *logits, const int *labels, int B, int C,
                            int *correct) {
  (void)c, (void)logits, (void)labels, (void)B, (void)C, (void)correct;
  NO_CUDA();
}
void ops_sgd_cuda(const Ctx *c, float *p, const float *g, float *buf, size_t n, float lr,
                  float momentum, float dampening, float wd, bool nesterov, bool first) {
  (void)c, (void)p, (void)g, (void)buf, (void)n, (void)lr, (void)momentum, (void)dampening,
      (void)wd, (void)nesterov, (void)first;
  NO_CUDA();
}
void ops_scale_cuda(const Ctx *c, float *x, size_t n, float a) {
  (void)c, (void)x, (void)n, (void)a;
  NO_CUDA();
}
void ops_axpy_cuda(const Ctx *c, float *y, const float *x, size_t n, float a) {
  (void)c, (void)y, (void)x, (void)n, (void)a;
  NO_CUDA();
}
void ops_gather_cuda(const Ctx *c, const float *src_x, const int *src_y, const int *idx, int B,
                     int N, float *dst_x, int *dst_y) {
  (void)c, (void)src_x, (void)src_y, (void)idx, (void)B, (void)N, (void)dst_x, (void)dst_y;
  NO_CUDA();
}
void ops_gather_pixels_cuda(const Ctx *c, const uint8_t *src_p, const int *src_y, const int *idx,
                            int B, int N, float mean, float std, float *dst_x, int *dst_y) {
  (void)c, (void)src_p, (void)src_y, (void)idx, (void)B, (void)N, (void)mean, (void)std,
      (void)dst_x, (void)dst_y;
  NO_CUDA();
}
