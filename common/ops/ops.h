/**
 * @file
 * @brief The numeric operations of an MLP training step, CPU and CUDA side by side.
 *
 * Each operation `ops_x` runs on the context's device: on the CPU, the plain reference (a
 * `cblas_sgemm` call, or a plain C GEMM in a build without OpenBLAS, or a loop); on CUDA, cuBLAS or one
 * of our kernels, queued on `Ctx.stream`. The two implementations, `ops_x_cpu` and `ops_x_cuda`, are
 * declared in the private ops_backend.h (the tests compare them side by side). All matrices are
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
void ops_softmax_xent(const Ctx *c, const float *logits, const int *labels, int B, int C, float *dlogits,
                      float *row_loss, float *loss);

/**
 * @brief Counts rows whose arg-max equals the label (first maximum wins) and adds the count.
 * @param[in] c          context.
 * @param[in] logits     device, (B, C).
 * @param[in] labels     device, (B).
 * @param[in] B,C        sizes.
 * @param[in,out] correct device, (1): incremented by the number of correct rows.
 */
void ops_count_correct(const Ctx *c, const float *logits, const int *labels, int B, int C, int *correct);

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
 * @brief Divides in place: `x[i] /= d`, one division rounded once (PyTorch's `tensor.div_(d)`;
 * `__fdiv_rn` on CUDA), which a scale by 1/d is not.
 * @param[in] c     context.
 * @param[in,out] x device, (n).
 * @param[in] n     number of elements.
 * @param[in] d     divisor.
 */
void ops_div(const Ctx *c, float *x, size_t n, float d);

/**
 * @brief Counts the elements that are not finite (NaN or ±infinity): `count += #{i : !isfinite(x[i])}`.
 * @param[in] c         context.
 * @param[in] x         device, (n).
 * @param[in] n         number of elements.
 * @param[in,out] count device, (1): the running count.
 */
void ops_count_nonfinite(const Ctx *c, const float *x, size_t n, int *count);

/**
 * @brief How many of @p n floats are NaN or ±infinity: ops_count_nonfinite() into @p scratch, read back
 * (the device waits for the work queued before).
 * @param[in] c          context.
 * @param[in] x          device, (n).
 * @param[in] n          number of elements.
 * @param[out] scratch   device, (1): where the count is made.
 * @return the count.
 */
int ops_nonfinite(const Ctx *c, const float *x, size_t n, int *scratch);

/**
 * @brief `--check_finite`'s check of gradients before their collective (steps 06 to 08 can call it):
 * when ops_nonfinite() finds a NaN or an infinity among them, ends the job (exit 1) with
 * `--check_finite: rank R, step S: N non-finite gradient value(s) (NaN or infinity) in WHERE`, WHERE
 * being @p where_fmt with the arguments that follow (which bucket or layer, and what has not run);
 * returns otherwise. The device waits (one count is read back).
 * @param[in] c          context.
 * @param[in] x          device, (n): the gradients.
 * @param[in] n          number of elements.
 * @param[out] scratch   device, (1): where the count is made.
 * @param[in] rank       this process's rank, for the message.
 * @param[in] step       the optimizer step the gradients belong to, for the message.
 * @param[in] where_fmt  printf format of where they are, then its arguments.
 */
void ops_require_finite(const Ctx *c, const float *x, size_t n, int *scratch, int rank, long long step,
                        const char *where_fmt, ...) __attribute__((format(printf, 7, 8)));

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
void ops_gather_pixels(const Ctx *c, const uint8_t *src_p, const int *src_y, const int *idx, int B, int N,
                       float mean, float std, float *dst_x, int *dst_y);

#ifdef __cplusplus
}
#endif
#endif
