/**
 * @file
 * @brief The one pseudo-random generator of the project: PCG32 (PCG-XSH-RR 64/32), and the permutation
 * built from it.
 *
 * Parameter initialisation, the synthetic dataset and every epoch's shuffle come from here, so another
 * implementation that follows this file reproduces our runs exactly:
 * - state update `state = state * 6364136223846793005 + inc` (mod 2^64), `inc = (seq << 1) | 1`;
 * - output `xorshifted = ((state >> 18) ^ state) >> 27`, `rot = state >> 59`, result
 *   `rotr32(xorshifted, rot)` computed from the state *before* the update;
 * - seeding `rng_init(seed, seq)`: state = 0; step; state += seed; step (PCG's reference `srandom_r`);
 * - bounded draw `rng_below(n)`: threshold = (2^32 - n) mod n; draw r until r >= threshold; return
 *   r mod n (unbiased);
 * - uniform float in [0, 1): `(next >> 8) * 2^-24`;
 * - permutation of n: identity, then Fisher–Yates from the end: for i = n-1 down to 1,
 *   j = rng_below(i + 1), swap(p[i], p[j]).
 */
#ifndef DDP_RNG_H
#define DDP_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief PCG32 generator state. */
typedef struct Rng {
  uint64_t state;  ///< internal state
  uint64_t inc;    ///< stream selector, always odd
} Rng;

/** @brief Stream used for parameter initialisation. */
#define RNG_STREAM_INIT 1
/** @brief Stream used for data-order permutations. */
#define RNG_STREAM_SHUFFLE 2
/** @brief Stream used to generate the synthetic dataset. */
#define RNG_STREAM_DATA 3
/** @brief Stream used for PowerSGD's initial Q (the same on every rank, powersgd.h). */
#define RNG_STREAM_POWERSGD 4

/**
 * @brief Seeds a generator.
 * @param[out] r   the generator.
 * @param[in] seed the seed.
 * @param[in] seq  the stream (one of the RNG_STREAM_* constants).
 */
void rng_init(Rng *r, uint64_t seed, uint64_t seq);

/** @brief Next 32 random bits. */
uint32_t rng_next(Rng *r);

/** @brief Uniform integer in [0, n), unbiased. @pre n > 0. */
uint32_t rng_below(Rng *r, uint32_t n);

/** @brief Uniform float in [0, 1) with 24 random bits. */
float rng_uniform(Rng *r);

/** @brief Uniform float in [lo, hi). */
float rng_uniform_range(Rng *r, float lo, float hi);

/** @brief Standard normal draw (Box–Muller on two rng_uniform() draws). */
float rng_normal(Rng *r);

/**
 * @brief The data order of one epoch: the Fisher–Yates permutation of 0..n-1 drawn from
 * `rng_init(seed, RNG_STREAM_SHUFFLE)`. Every rank that calls it with the same arguments gets the same
 * order; the trainers call it with `seed + epoch`.
 * @param[out] perm host, (n).
 * @param[in] n     number of samples.
 * @param[in] seed  the seed (base seed + epoch).
 */
void rng_permutation(int *perm, int n, uint64_t seed);

#ifdef __cplusplus
}
#endif
#endif
