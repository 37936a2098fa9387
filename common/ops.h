/**
 * @file
 * @brief The numeric operations of an MLP training step, CPU and CUDA side by side.
 *
 * Each operation `ops_x` dispatches on the context's device to `ops_x_cpu` (the plain reference: a
 * `cblas_sgemm` call, or a plain C GEMM in a build without OpenBLAS, or a loop) or `ops_x_cuda` (cuBLAS or one of our kernels, queued on `Ctx.stream`).
 * Both take the same arguments in the same order, so the tests call them side by side. All matrices are
 * row-major, as PyTorch stores them. Pointers are device memory of the context's device.
 *
 * Dimension letters: B batch rows, N features of a row, C classes.
 */
#ifndef DDP_OPS_H
#define DDP_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief GEMM, row-major: `C = alpha * op(A) * op(B) + beta * C`, with C (M, N), op(A) (M, K),
 * op(B) (K, N); `op(X)` is X or its transpose. Leading dimensions are those of dense row-major storage:
 * A is (M, K) or, transposed, (K, M); B is (K, N) or (N, K).
 * @param[in] c      context.
 * @param[in] ta     use A transposed.
 * @param[in] tb     use B transposed.
 * @param[in] M,N,K  sizes, > 0.
 * @param[in] alpha  scale of the product.
 * @param[in] A      device, see above.
 * @param[in] B      device, see above.
 * @param[in] beta   scale of the old C (0: C is only written; NaNs in it are ignored).
 * @param[in,out] C  device, (M, N).
 */
void ops_gemm(const Ctx *c, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
              const float *B, float beta, float *C);

/**
 * @brief Adds a bias to every row, then applies ReLU if asked: `y[b][n] = act(y[b][n] + bias[n])`.
 * @param[in] c       context.
 * @param[in,out] y   device, (B, N).
 * @param[in] bias    device, (N).
 * @param[in] B,N     sizes.
 * @param[in] relu    apply `max(0, .)` after the bias.
 */
void ops_bias_act(const Ctx *c, float *y, const float *bias, int B, int N, bool relu);

/**
 * @brief ReLU backward in place: `dy[i] = y[i] > 0 ? dy[i] : 0`, where y is the ReLU's output.
 * @param[in] c      context.
 * @param[in,out] dy device, (n): gradient w.r.t. the ReLU output, becomes the gradient w.r.t. its input.
 * @param[in] y      device, (n): the ReLU output.
 * @param[in] n      number of elements.
 */
void ops_relu_backward(const Ctx *c, float *dy, const float *y, size_t n);

/**
 * @brief Bias gradient: `db[n] = beta * db[n] + sum_b dy[b][n]` (beta 0 writes, 1 accumulates).
 * @param[in] c      context.
 * @param[in] dy     device, (B, N).
 * @param[in,out] db device, (N).
 * @param[in] B,N    sizes.
 * @param[in] beta   0 or 1.
 */
void ops_bias_grad(const Ctx *c, const float *dy, float *db, int B, int N, float beta);

/**
 * @brief Fused softmax + cross-entropy, forward and backward, loss averaged over the batch (as
 * `nn.CrossEntropyLoss()` with `reduction='mean'`).
 *
 * Writes `dlogits[b][k] = (softmax(logits[b])[k] - [k == labels[b]]) / B` and
 * `loss[0] = mean_b -log softmax(logits[b])[labels[b]]`. The mean is summed in a fixed order, so it is
 * deterministic on both devices.
 * @param[in] c        context.
 * @param[in] logits   device, (B, C).
 * @param[in] labels   device, (B), each in [0, C).
 * @param[in] B,C      sizes.
 * @param[out] dlogits device, (B, C); may not alias @p logits.
 * @param[out] row_loss device, (B): scratch, each row's loss.
 * @param[out] loss    device, (1): the batch mean.
 */
void ops_softmax_xent(const Ctx *c, const float *logits, const int *labels, int B, int C,
                      float *dlogits, float *row_loss, float *loss);

/**
 * @brief Counts rows whose arg-max equals the label (first maximum wins) and adds the count.
 * @param[in] c          context.
 * @param[in] logits     device, (B, C).
 * @param[in] labels     device, (B).
 * @param[in] B,C        sizes.
 * @param[in,out] correct device, (1): incremented by the number of correct rows.
 */
void ops_count_correct(const Ctx *c, const float *logits, const int *labels, int B, int C,
                       int *correct);

/**
 * @brief One fused SGD step over a flat buffer, with PyTorch's `torch.optim.SGD` semantics:
 * `g = grad + wd * p`; with momentum, `buf = first ? g : momentum * buf + (1 - dampening) * g` and
 * `g = nesterov ? g + momentum * buf : buf`; then `p -= lr * g`.
 * @param[in] c          context.
 * @param[in,out] p      device, (n): parameters.
 * @param[in] g          device, (n): gradients.
 * @param[in,out] buf    device, (n): momentum buffer (unused when momentum is 0).
 * @param[in] n          number of parameters.
 * @param[in] lr,momentum,dampening,wd hyper-parameters.
 * @param[in] nesterov   Nesterov momentum.
 * @param[in] first      first step: the momentum buffer is initialised to g.
 */
void ops_sgd(const Ctx *c, float *p, const float *g, float *buf, size_t n, float lr, float momentum,
             float dampening, float wd, bool nesterov, bool first);

/**
 * @brief Scales in place: `x[i] *= a`.
 * @param[in] c     context.
 * @param[in,out] x device, (n).
 * @param[in] n     number of elements.
 * @param[in] a     factor.
 */
void ops_scale(const Ctx *c, float *x, size_t n, float a);

/**
 * @brief `y += a·x`, elementwise, the product rounded before the sum (no fused multiply-add), so the
 * CPU and CUDA versions agree bit for bit.
 * @param[in] c     context.
 * @param[in,out] y device, (n).
 * @param[in] x     device, (n).
 * @param[in] n     number of elements.
 * @param[in] a     factor.
 */
void ops_axpy(const Ctx *c, float *y, const float *x, size_t n, float a);

/**
 * @brief Gathers rows by index: `dst_x[b] = src_x[idx[b]]`, `dst_y[b] = src_y[idx[b]]`.
 * @param[in] c      context.
 * @param[in] src_x  device, (rows, N).
 * @param[in] src_y  device, (rows).
 * @param[in] idx    device, (B): row indices.
 * @param[in] B,N    sizes.
 * @param[out] dst_x device, (B, N).
 * @param[out] dst_y device, (B).
 */
void ops_gather(const Ctx *c, const float *src_x, const int *src_y, const int *idx, int B, int N,
                float *dst_x, int *dst_y);

/**
 * @brief Gathers rows of 8-bit pixels by index and normalises them into floats:
 * `dst_x[b][k] = ((float)src_p[idx[b]][k] / 255 - mean) / std` (IEEE float32 division, so the CPU
 * and CUDA versions agree bit for bit), `dst_y[b] = src_y[idx[b]]`.
 * @param[in] c         context.
 * @param[in] src_p     device, (rows, N): pixels.
 * @param[in] src_y     device, (rows).
 * @param[in] idx       device, (B): row indices.
 * @param[in] B,N       sizes.
 * @param[in] mean,std  normalisation constants.
 * @param[out] dst_x    device, (B, N).
 * @param[out] dst_y    device, (B).
 */
void ops_gather_pixels(const Ctx *c, const uint8_t *src_p, const int *src_y, const int *idx, int B,
                       int N, float mean, float std, float *dst_x, int *dst_y);

/** @brief CPU reference of ops_gemm(): OpenBLAS's `cblas_sgemm` when the build has it, else
 *  ops_gemm_plain_cpu(). */
void ops_gemm_cpu(const Ctx *c, bool ta, bool tb, int M, int N, int K, float alpha, const float *A,
                  const float *B, float beta, float *C);
/** @brief ops_gemm() in plain C (the CPU GEMM of a build without OpenBLAS: correct, several times
 *  slower); every element's sum runs over k in order, in fp32. Same arguments as ops_gemm(). */
void ops_gemm_plain_cpu(const Ctx *c, bool ta, bool tb, int M, int N, int K, float alpha,
                        const float *A, const float *B, float beta, float *C);
/** @brief True when ops_gemm_cpu() is OpenBLAS's, false when it is ops_gemm_plain_cpu(). */
bool ops_have_blas(void);
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
void ops_softmax_xent_cpu(const Ctx *c, const float *logits, const int *labels, int B, int C,
                          float *dlogits, float *row_loss, float *loss);
/** @brief CUDA version of ops_softmax_xent(). */
void ops_softmax_xent_cuda(const Ctx *c, const float *logits, const int *labels, int B, int C,
                           float *dlogits, float *row_loss, float *loss);
/** @brief CPU reference of ops_count_correct(). */
void ops_count_correct_cpu(const Ctx *c, const float *logits, const int *labels, int B, int C,
                           int *correct);
/** @brief CUDA version of ops_count_correct(). */
void ops_count_correct_cuda(const Ctx *c, const float *logits, const int *labels, int B, int C,
                            int *correct);
/** @brief CPU reference of ops_sgd(). */
void ops_sgd_cpu(const Ctx *c, float *p, const float *g, float *buf, size_t n, float lr,
                 float momentum, float dampening, float wd, bool nesterov, bool first);
/** @brief CUDA version of ops_sgd() (one fused kernel). */
void ops_sgd_cuda(const Ctx *c, float *p, const float *g, float *buf, size_t n, float lr,
                  float momentum, float dampening, float wd, bool nesterov, bool first);
/** @brief CPU reference of ops_scale(). */
void ops_scale_cpu(const Ctx *c, float *x, size_t n, float a);
/** @brief CUDA version of ops_scale(). */
void ops_scale_cuda(const Ctx *c, float *x, size_t n, float a);
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
void ops_gather_pixels_cpu(const Ctx *c, const uint8_t *src_p, const int *src_y, const int *idx,
                           int B, int N, float mean, float std, float *dst_x, int *dst_y);
/** @brief CUDA version of ops_gather_pixels(). */
void ops_gather_pixels_cuda(const Ctx *c, const uint8_t *src_p, const int *src_y, const int *idx,
                            int B, int N, float mean, float std, float *dst_x, int *dst_y);

#ifdef __cplusplus
}
#endif
#endif
