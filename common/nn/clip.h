/**
 * @file
 * @brief Gradient clipping by the global 2-norm, `torch.nn.utils.clip_grad_norm_`'s semantics: the
 * norm of all gradients together, and every gradient scaled by `min(1, MAX / (norm + 1e-6))`.
 *
 * The norm is the square root of a sum of squares, and a sharded trainer (ZeRO, FSDP) holds only a
 * shard of the gradient: it sums its shard's squares, the ranks all-reduce those sums, and the root
 * of the total is the whole gradient's norm (the root of each rank's own sum would be a "local norm",
 * the classic mistake). So the API comes in two halves around that all-reduce: clip_sum_squares()
 * writes this buffer's sums into `sums`, clip_scale() turns `sums` into the norm and scales.
 *
 * The sums are exact: each square is split by the float's exponent into integer counts of
 * 2^(2e-300) (CLIP_SUMS doubles holding integers below 2^53), so their total does not depend on the
 * order of the additions, nor on how the gradient is cut into shards or ranks. A replicated run and
 * a sharded one therefore compute the same norm, bit for bit, from the same gradient. Only the final
 * conversion rounds (a fixed-order sum of the CLIP_SUMS terms in double, its square root, then
 * float32), which is at least as accurate as PyTorch's float32 norm of norms.
 *
 * Then, in float32 as PyTorch 1.13 computes it: `coef = (1 / (norm + 1e-6)) * MAX` (Python's
 * `MAX / tensor` is `tensor.reciprocal() * MAX`), clamped to at most 1, and every gradient multiplied
 * by it (by 1 too: no host test of the norm, so the device never waits). A NaN anywhere makes the
 * norm NaN, an infinity makes it +inf (and the coefficient 0), as in PyTorch with its default
 * `error_if_nonfinite=False`.
 */
#ifndef DDP_CLIP_H
#define DDP_CLIP_H

#include <stddef.h>
#include <stdint.h>

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Doubles in Clip::sums: two per float32 exponent (see clip.c). */
#define CLIP_SUMS 512

/** @brief Most floats one clip_sum_squares() call may read: its exact sums stay below 2^53. */
#define CLIP_MAX_N ((size_t)1 << 29)

/** @brief The clipper's buffers (all on the device; none when clipping is off). */
typedef struct Clip {
  float max_norm;  ///< MAX (`--clip_grad_norm`); 0: off, and nothing is allocated
  double *sums;    ///< device, (CLIP_SUMS): exact sums of squares by exponent, integers below 2^53
  uint64_t *acc;   ///< device, (CLIP_SUMS): the CUDA kernel's integer accumulators (NULL on the CPU)
  float *norm;     ///< device, (1): the last norm (before clipping), as clip_grad_norm_ returns it
  float *coef;     ///< device, (1): the last scale factor, min(1, MAX / (norm + 1e-6))
} Clip;

/**
 * @brief Sets up a clipper; allocates its buffers only when @p max_norm > 0.
 * @param[out] k        the clipper.
 * @param[in] c         context.
 * @param[in] max_norm  MAX, >= 0 (0: off).
 */
void clip_init(Clip *k, const Ctx *c, float max_norm);

/**
 * @brief Writes the exact sums of the squares of @p g into `k->sums` (overwriting them): the input
 * of clip_scale(), to be all-reduced first (DIST_DOUBLE, DIST_SUM: exact) when @p g is a shard.
 * @param[in,out] k the clipper (clip_init() with MAX > 0).
 * @param[in] c     context.
 * @param[in] g     device, (n): gradients (a whole gradient, or this rank's shard of one).
 * @param[in] n     floats in @p g, at most CLIP_MAX_N (the job ends otherwise).
 */
void clip_sum_squares(Clip *k, const Ctx *c, const float *g, size_t n);

/**
 * @brief From `k->sums`: the norm into `k->norm`, the factor into `k->coef`, and @p g scaled by it.
 * Everything is queued on the context's stream; nothing waits.
 * @param[in,out] k the clipper, its sums written (and all-reduced, for a shard).
 * @param[in] c     context.
 * @param[in,out] g device, (n): the gradients (or this rank's shard) to scale.
 * @param[in] n     floats in @p g.
 */
void clip_scale(Clip *k, const Ctx *c, float *g, size_t n);

/**
 * @brief The float32 norm of CLIP_SUMS exact sums (host): what clip_scale() computes on the device.
 * @param[in] sums host, (CLIP_SUMS).
 * @return the 2-norm; NaN when a NaN was summed, +inf when an infinity was (and no NaN).
 */
float clip_norm_of_sums(const double *sums);

/** @brief Releases the clipper's buffers (none when off). */
void clip_free(Clip *k, const Ctx *c);

#ifdef __cplusplus
}
#endif
#endif
