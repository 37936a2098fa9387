/**
 * @file
 * @brief Internal interface between the ops dispatcher (ops.c) and the two implementations of every
 * op: the CPU reference (ops_cpu.c) and the CUDA version (ops_cuda.cu, in a build with CUDA). Both take
 * the same arguments in the same order as the op in ops.h. Not for the steps: they use ops.h; the
 * tests include this header to compare the two side by side.
 */
#ifndef DDP_OPS_BACKEND_H
#define DDP_OPS_BACKEND_H

#include "ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief True when ops_gemm_cpu() is OpenBLAS's, false when it is ops_gemm_plain_cpu(). */
bool ops_have_blas(void);
/** @brief CPU reference of ops_gemm(): OpenBLAS's `cblas_sgemm` when the build has it, else
 *  ops_gemm_plain_cpu(). */
void ops_gemm_cpu(const Ctx *c, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                  const float *B, float beta, float *C);
/** @brief ops_gemm() in plain C (the CPU GEMM of a build without OpenBLAS: correct, several times
 *  slower); every element's sum runs over k in order, in fp32. Same arguments as ops_gemm(). */
void ops_gemm_plain_cpu(const Ctx *c, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                        const float *B, float beta, float *C);
/** @brief CUDA version of ops_gemm() (cuBLAS, fp32). */
void ops_gemm_cuda(const Ctx *c, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                   const float *B, float beta, float *C);
/** @brief CPU reference of ops_bias_act(). */
void ops_bias_act_cpu(const Ctx *c, float *y, const float *bias, int B, int N, bool relu);
/** @brief CUDA version of ops_bias_act(). */
void ops_bias_act_cuda(const Ctx *c, float *y, const float *bias, int B, int N, bool relu);
/** @brief CPU reference of ops_relu_backward(). */
void ops_relu_backward_cpu(const Ctx *c, float *dy, const float *y, size_t n);
/** @brief CUDA version of ops_relu_backward(). */
void ops_relu_backward_cuda(const Ctx *c, float *dy, const float *y, size_t n);
/** @brief CPU reference of ops_bias_grad(). */
void ops_bias_grad_cpu(const Ctx *c, const float *dy, float *db, int B, int N, float beta);
/** @brief CUDA version of ops_bias_grad(). */
void ops_bias_grad_cuda(const Ctx *c, const float *dy, float *db, int B, int N, float beta);
/** @brief CPU reference of ops_softmax_xent(). */
void ops_softmax_xent_cpu(const Ctx *c, const float *logits, const int *labels, int B, int C, float *dlogits,
                          float *row_loss, float *loss);
/** @brief CUDA version of ops_softmax_xent(). */
void ops_softmax_xent_cuda(const Ctx *c, const float *logits, const int *labels, int B, int C, float *dlogits,
                           float *row_loss, float *loss);
/** @brief CPU reference of ops_count_nonfinite(). */
void ops_count_nonfinite_cpu(const Ctx *c, const float *x, size_t n, int *count);
/** @brief CUDA version of ops_count_nonfinite(). */
void ops_count_nonfinite_cuda(const Ctx *c, const float *x, size_t n, int *count);
/** @brief CPU reference of ops_count_correct(). */
void ops_count_correct_cpu(const Ctx *c, const float *logits, const int *labels, int B, int C, int *correct);
/** @brief CUDA version of ops_count_correct(). */
void ops_count_correct_cuda(const Ctx *c, const float *logits, const int *labels, int B, int C, int *correct);
/** @brief CPU reference of ops_sgd(). */
void ops_sgd_cpu(const Ctx *c, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                 float dampening, float wd, bool nesterov, bool first);
/** @brief CUDA version of ops_sgd() (one fused kernel). */
void ops_sgd_cuda(const Ctx *c, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
                  float dampening, float wd, bool nesterov, bool first);
/** @brief CPU reference of ops_scale(). */
void ops_scale_cpu(const Ctx *c, float *x, size_t n, float a);
/** @brief CUDA version of ops_scale(). */
void ops_scale_cuda(const Ctx *c, float *x, size_t n, float a);
/** @brief CPU reference of ops_div(). */
void ops_div_cpu(const Ctx *c, float *x, size_t n, float d);
/** @brief CUDA version of ops_div() (`__fdiv_rn`). */
void ops_div_cuda(const Ctx *c, float *x, size_t n, float d);
/** @brief CPU reference of ops_axpy(). */
void ops_axpy_cpu(const Ctx *c, float *y, const float *x, size_t n, float a);
/** @brief CUDA version of ops_axpy(). */
void ops_axpy_cuda(const Ctx *c, float *y, const float *x, size_t n, float a);
/** @brief CPU reference of ops_gather(). */
void ops_gather_cpu(const Ctx *c, const float *src_x, const int *src_y, const int *idx, int B, int N,
                    float *dst_x, int *dst_y);
/** @brief CUDA version of ops_gather(). */
void ops_gather_cuda(const Ctx *c, const float *src_x, const int *src_y, const int *idx, int B, int N,
                     float *dst_x, int *dst_y);
/** @brief CPU reference of ops_gather_pixels(). */
void ops_gather_pixels_cpu(const Ctx *c, const uint8_t *src_p, const int *src_y, const int *idx, int B, int N,
                           float mean, float std, float *dst_x, int *dst_y);
/** @brief CUDA version of ops_gather_pixels(). */
void ops_gather_pixels_cuda(const Ctx *c, const uint8_t *src_p, const int *src_y, const int *idx, int B,
                            int N, float mean, float std, float *dst_x, int *dst_y);

#ifdef __cplusplus
}
#endif
#endif
