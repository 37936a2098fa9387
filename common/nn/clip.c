// clip.c: gradient clipping by the global norm (clip.h): the dispatch to the CPU reference (below)
// or the CUDA kernels (clip_cuda.cu), and the CPU reference itself.
//
// The exact sums. A finite float32 g is m·2^(e-150), e its biased exponent (1..254; subnormals are
// e = 0 and count as e = 1 without the implicit bit), m an integer below 2^24, so g² = m²·2^(2e-300)
// with m² below 2^48. Split m² = hi·2^24 + lo (hi, lo below 2^24) and add, per exponent, the his and
// the los as integers: sums[2e] and sums[2e + 1]. n floats add at most n·2^24 to one word, below
// 2^53 for n <= CLIP_MAX_N, so the words are exact as doubles, and so is their all-reduce over the
// ranks (as long as the whole gradient has at most CLIP_MAX_N floats). Words 0 and 1 (exponent 0 is
// never used) count the NaNs and the infinities.
#include <math.h>
#include <string.h>

#include "check.h"
#include "clip_backend.h"
#include "devmem.h"
#include "ops.h"

#if HAVE_CUDA
#define IMPL(c, op) ((c)->dev == DEVICE_CUDA ? op##_cuda : op##_cpu)
#else
#define IMPL(c, op) op##_cpu
#endif

void clip_init(Clip *k, const Ctx *c, float max_norm) {
  memset(k, 0, sizeof *k);
  k->max_norm = max_norm;
  if (!(max_norm > 0)) return;
  k->sums = dev_alloc(c, CLIP_SUMS * sizeof *k->sums);
  k->norm = dev_alloc(c, sizeof *k->norm);
  k->coef = dev_alloc(c, sizeof *k->coef);
  if (c->dev == DEVICE_CUDA) k->acc = dev_alloc(c, CLIP_SUMS * sizeof *k->acc);
}

void clip_free(Clip *k, const Ctx *c) {
  dev_free(c, k->acc);
  dev_free(c, k->coef);
  dev_free(c, k->norm);
  dev_free(c, k->sums);
  memset(k, 0, sizeof *k);
}

void clip_sum_squares(Clip *k, const Ctx *c, const float *g, size_t n) {
  if (!k->sums) die(1, "clip_sum_squares: the clipper is off (clip_init with MAX > 0)");
  if (n > CLIP_MAX_N)
    die(1, "clip_sum_squares: %zu floats, more than the exact sums allow (%zu)", n, CLIP_MAX_N);
  IMPL(c, clip_sum_squares)(k, c, g, n);
}

void clip_scale(Clip *k, const Ctx *c, float *g, size_t n) {
  if (!k->sums) die(1, "clip_scale: the clipper is off (clip_init with MAX > 0)");
  IMPL(c, clip_scale)(k, c, g, n);
}

float clip_norm_of_sums(const double *sums) { return clip_norm_from(sums); }

// ---- CPU reference --------------------------------------------------------------------------------

void clip_sum_squares_cpu(Clip *k, const Ctx *c, const float *g, size_t n) {
  (void)c;
  uint64_t acc[CLIP_SUMS] = {0};
  for (size_t i = 0; i < n; i++) {
    uint32_t bits;
    memcpy(&bits, &g[i], sizeof bits);
    uint32_t e = (bits >> 23) & 0xffu, m = bits & 0x7fffffu;
    if (e == 0xffu) {  // NaN (word 0) or infinity (word 1)
      acc[m ? 0 : 1]++;
      continue;
    }
    if (e)
      m |= 0x800000u;  // the implicit bit of a normal number
    else
      e = 1;  // a subnormal: m·2^(1-150)
    uint64_t sq = (uint64_t)m * m;
    acc[2 * e] += sq >> 24;
    acc[2 * e + 1] += sq & 0xffffffu;
  }
  for (int w = 0; w < CLIP_SUMS; w++) k->sums[w] = (double)acc[w];  // exact: below 2^53
}

void clip_scale_cpu(Clip *k, const Ctx *c, float *g, size_t n) {
  *k->norm = clip_norm_from(k->sums);
  *k->coef = clip_coef_from(*k->norm, k->max_norm);
  ops_scale(c, g, n, *k->coef);
}
