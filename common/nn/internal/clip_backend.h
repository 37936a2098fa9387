/**
 * @file
 * @brief Internal interface between the clipper's dispatch (clip.c) and its two implementations: the
 * CPU reference (clip.c) and the CUDA kernels (clip_cuda.cu). Same arguments as clip.h's functions.
 */
#ifndef DDP_CLIP_BACKEND_H
#define DDP_CLIP_BACKEND_H

#include <math.h>

#include "clip.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Marks the helpers below for both the host and the device (one source for both sides). */
#ifdef __CUDACC__
#define CLIP_HD __host__ __device__
#else
#define CLIP_HD
#endif

/**
 * @brief The float32 norm of CLIP_SUMS exact sums (see clip.c for their layout): a fixed-order sum in
 * double of each exponent's two integer sums, scaled exactly by powers of two; its square root,
 * rounded once to float. No product is followed by a sum, so no compiler may contract it into an
 * FMA: host and device give the same bits.
 * @param[in] sums (CLIP_SUMS), on the side that calls it.
 * @return the norm; NaN or +inf when non-finite values were summed.
 */
static inline CLIP_HD float clip_norm_from(const double *sums) {
  if (sums[0] > 0) return NAN;       // word 0: how many NaNs
  if (sums[1] > 0) return INFINITY;  // word 1: how many infinities
  double total = 0.0;
  for (int e = CLIP_SUMS / 2 - 2; e >= 1; e--)  // m^2 = hi·2^24 + lo, times 2^(2e-300)
    total += ldexp(sums[2 * e], 2 * e - 276) + ldexp(sums[2 * e + 1], 2 * e - 300);
  return (float)sqrt(total);
}

/**
 * @brief clip_grad_norm_'s factor in float32, as PyTorch 1.13 computes it: `(1 / (norm + 1e-6)) * MAX`
 * (Python's `MAX / tensor` is `tensor.reciprocal() * MAX`), clamped to at most 1.
 * @param[in] norm     the norm.
 * @param[in] max_norm MAX.
 * @return the factor every gradient is multiplied by.
 */
static inline CLIP_HD float clip_coef_from(float norm, float max_norm) {
  float coef = (1.0f / (norm + 1e-6f)) * max_norm;
  return coef < 1.0f ? coef : 1.0f;  // torch.clamp(max=1): a NaN stays NaN
}

/** @brief CPU reference of clip_sum_squares(). */
void clip_sum_squares_cpu(Clip *k, const Ctx *c, const float *g, size_t n);
/** @brief CUDA version of clip_sum_squares(): integer atomics per block, so the sums are exact. */
void clip_sum_squares_cuda(Clip *k, const Ctx *c, const float *g, size_t n);
/** @brief CPU reference of clip_scale(). */
void clip_scale_cpu(Clip *k, const Ctx *c, float *g, size_t n);
/** @brief CUDA version of clip_scale(): one thread computes the norm and factor, then a scale kernel. */
void clip_scale_cuda(Clip *k, const Ctx *c, float *g, size_t n);

#ifdef __cplusplus
}
#endif
#endif
