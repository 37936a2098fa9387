// Exercise 03: generated from steps/03_sampler/sampler.c by dev/make_exercises.py. Fill in every
// TODO(03), then check: scripts/check_exercise.sh 03 <this file> (see README.md here).
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
  // TODO(03): this rank's share of every epoch: floor(N/W) with drop_last, else ceil(N/W)
  // (see sampler.h). Until then every rank takes all N samples, as in step 02.
  s->num_samples = n;
  s->perm = mallocCheck((size_t)n * sizeof *s->perm);
}

void sampler_set_epoch(Sampler *s, int epoch) {
  s->epoch = epoch;
  rng_permutation(s->perm, s->n, s->seed + (uint64_t)epoch);
}

void sampler_indices(const Sampler *s, int *out) {
  // TODO(03): rank r takes positions r, r + W, r + 2W, ... of the epoch's permutation s->perm;
  // positions past its end wrap around to its start (the padding). Until then every rank gets
  // the whole permutation, as in step 02.
  for (int i = 0; i < s->num_samples; i++) out[i] = s->perm[i];
}

void sampler_free(Sampler *s) {
  free(s->perm);
  s->perm = NULL;
}
