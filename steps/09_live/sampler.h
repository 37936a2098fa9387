/*
 * sampler.h — the cursor sampler of step 09: step 03's DistributedSampler, read block by block.
 *
 * Every rank draws the same permutation of the N training samples for the epoch (seed + epoch) and
 * lays it out as a list of `total` positions for the world size W_e the epoch starts with, as step
 * 03 does: padded by repeating the permutation from its start to a multiple of W_e (or, with
 * drop_last, truncated to one). Then, instead of a fixed shard per rank, the ranks walk that list
 * together with a cursor c: each optimizer step takes the next block of G positions (the global
 * batch; the epoch's last block is shorter), and rank r of W takes the positions c + p of the block
 * whose offset p is r modulo W. With W = W_e and G a multiple of W this is exactly step 03's shard:
 * rank r's i-th sample is position r + i·W. When W changes inside an epoch, the cursor and G stay:
 * the rest of the epoch is shared by the new ranks, and no position is taken twice or skipped.
 */
#ifndef SAMPLER_H
#define SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct Sampler {
  int n;           // samples in the dataset
  bool drop_last;  // truncate instead of padding
  uint64_t seed;   // base seed; epoch e shuffles with seed + e
  int epoch;       // set by sampler_set_epoch()
  int total;       // positions in this epoch's list: N padded (or truncated) to a multiple of W_e
  int *perm;       // (n): this epoch's permutation, the same on every rank
} Sampler;

// Sets up the sampler; ends the job with a clear message when there are fewer samples than ranks.
void sampler_init(Sampler *s, int n, int world_size, bool drop_last, uint64_t seed);
// Starts epoch `epoch`, its list laid out for `world` ranks: every rank must call it with the same
// values, or the ranks take overlapping samples.
void sampler_set_epoch(Sampler *s, int epoch, int world);
// The positions of an epoch laid out for `world` ranks: N padded (or truncated) to a multiple of it.
int sampler_total(const Sampler *s, int world);
// The block at `cursor`: G positions, or what is left of the epoch when that is fewer.
int sampler_block(const Sampler *s, long long cursor, int G);
// How many samples rank r of W takes from the block at `cursor` (G positions, fewer at the end).
int sampler_share(const Sampler *s, long long cursor, int G, int W, int r);
// Writes rank r's samples of every block from `cursor` to the epoch's end, in training order;
// returns how many (at most total - cursor).
int sampler_indices_from(const Sampler *s, long long cursor, int G, int W, int r, int *out);
void sampler_free(Sampler *s);

#endif
