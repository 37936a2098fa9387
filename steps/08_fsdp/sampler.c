// sampler.c — the distributed sampler; see sampler.h for the exact semantics.
#include "sampler.h"

#include <stdlib.h>

#include "check.h"  // check.h: die, mallocCheck
#include "rng.h"    // rng.h: rng_permutation

void sampler_init(Sampler *s, int n, int world_size, int rank, bool drop_last, uint64_t seed) {
  if (n < world_size)
    die(1,
        "%d training samples for %d ranks: every rank needs at least one sample of its own "
        "(use fewer ranks or a larger --dataset_size)",
        n, world_size);
  s->n = n;
  s->world_size = world_size;
  s->rank = rank;
  s->drop_last = drop_last;
  s->seed = seed;
  s->epoch = 0;
  s->num_samples = drop_last ? n / world_size : (n + world_size - 1) / world_size;
  s->perm = mallocCheck((size_t)n * sizeof *s->perm);
}

void sampler_set_epoch(Sampler *s, int epoch) {
  s->epoch = epoch;
  rng_permutation(s->perm, s->n, s->seed + (uint64_t)epoch);
}

void sampler_indices(const Sampler *s, int *out) {
  for (int i = 0; i < s->num_samples; i++) {
    long long pos = s->rank + (long long)i * s->world_size;  // stride: r, r + W, r + 2W, ...
    out[i] = s->perm[pos % s->n];                            // past the end (padding): repeat from the start
  }
}

void sampler_free(Sampler *s) {
  free(s->perm);
  s->perm = NULL;
}
