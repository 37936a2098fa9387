// rng.c: PCG32 (PCG-XSH-RR 64/32) exactly as rng.h documents it, so another implementation that
// follows the header reproduces our initialisation, synthetic data and shuffles bit for bit.
#include "rng.h"

#include <math.h>

#define PCG_MULT 6364136223846793005ULL

static void rng_step(Rng *r) { r->state = r->state * PCG_MULT + r->inc; }

void rng_init(Rng *r, uint64_t seed, uint64_t seq) {
  // PCG's reference pcg32_srandom_r: the two steps mix the seed into the state.
  r->state = 0;
  r->inc = (seq << 1) | 1u;
  rng_step(r);
  r->state += seed;
  rng_step(r);
}

uint32_t rng_next(Rng *r) {
  uint64_t old = r->state;
  rng_step(r);
  uint32_t xorshifted = (uint32_t)(((old >> 18) ^ old) >> 27);
  uint32_t rot = (uint32_t)(old >> 59);
  return (xorshifted >> rot) | (xorshifted << ((-rot) & 31u));
}

uint32_t rng_below(Rng *r, uint32_t n) {
  // Reject the lowest (2^32 mod n) values so that every residue is equally likely.
  uint32_t threshold = (uint32_t)(-n) % n;
  for (;;) {
    uint32_t x = rng_next(r);
    if (x >= threshold) return x % n;
  }
}

float rng_uniform(Rng *r) {
  // 24 bits fill a float's mantissa exactly, so the result is a multiple of 2^-24 in [0, 1).
  return (float)(rng_next(r) >> 8) * (1.0f / 16777216.0f);
}

float rng_uniform_range(Rng *r, float lo, float hi) { return lo + (hi - lo) * rng_uniform(r); }

float rng_normal(Rng *r) {
  // u1 = 1 - uniform lies in (0, 1], so log(u1) is finite; the second value of the pair is dropped
  // so that the generator has no hidden cache and one draw always costs two rng_next() calls.
  double u1 = 1.0 - (double)rng_uniform(r);
  double u2 = (double)rng_uniform(r);
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

void rng_permutation(int *perm, int n, uint64_t seed) {
  Rng r;
  rng_init(&r, seed, RNG_STREAM_SHUFFLE);
  for (int i = 0; i < n; i++) perm[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)rng_below(&r, (uint32_t)i + 1u);
    int t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
}
