/*
 * sampler.h — the distributed sampler (PyTorch's DistributedSampler), introduced in step 03.
 *
 * Every rank draws the same permutation of the N training samples for the epoch (seed + epoch, which
 * is what set_epoch() changes), makes its length a multiple of the world size W, and takes every W-th
 * position starting at its rank:
 *   num_samples = drop_last ? floor(N / W) : ceil(N / W),   total = num_samples · W;
 *   without drop_last the permutation is padded by repeating it from its start (fewer than W samples,
 *   so never more than N: sampler_init refuses N < W);
 *   with drop_last it is truncated to total;
 *   rank r gets positions r, r + W, r + 2W, …  (num_samples of them).
 * So the shards are disjoint (up to the padding) and together cover the dataset, every epoch in a new
 * order, and rank r of W with batch B sees at step k the samples that a single process with batch
 * W·B sees at step k, except at an epoch's last step when W does not divide N (the padding, or with
 * drop_last the samples left out).
 */
#ifndef SAMPLER_H
#define SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

typedef struct Sampler {
  int n;            // samples in the dataset
  int world_size;   // W
  int rank;         // this process's rank r
  bool drop_last;   // truncate instead of padding
  uint64_t seed;    // base seed; epoch e shuffles with seed + e
  int epoch;        // set by sampler_set_epoch()
  int num_samples;  // samples per rank per epoch
  int *perm;        // (n): this epoch's permutation, the same on every rank
} Sampler;

// Sets up the sampler; ends the job with a clear message when there are fewer samples than ranks
// (some ranks would have nothing of their own to train on).
void sampler_init(Sampler *s, int n, int world_size, int rank, bool drop_last, uint64_t seed);

// Starts epoch `epoch`: every rank must call it with the same value, or the shards overlap.
void sampler_set_epoch(Sampler *s, int epoch);

// Writes this rank's num_samples dataset indices for the current epoch, in order.
void sampler_indices(const Sampler *s, int *out);

void sampler_free(Sampler *s);

#endif
