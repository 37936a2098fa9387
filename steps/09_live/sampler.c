// sampler.c — the cursor sampler; see sampler.h for the exact semantics.
#include "sampler.h"

#include <stdlib.h>

#include "check.h"  // check.h: die, mallocCheck
#include "rng.h"    // rng.h: rng_permutation

void sampler_init(Sampler *s, int n, int world_size, bool drop_last, uint64_t seed) {
  if (n < world_size)
    die(1,
        "%d training samples for %d ranks: every rank needs at least one sample of its own "
        "(use fewer ranks or a larger --dataset_size)",
        n, world_size);
  s->n = n;
  s->drop_last = drop_last;
  s->seed = seed;
  s->epoch = 0;
  s->total = 0;
  s->perm = mallocCheck((size_t)n * sizeof *s->perm);
}

int sampler_total(const Sampler *s, int world) {
  return s->drop_last ? s->n / world * world : (s->n + world - 1) / world * world;
}

void sampler_set_epoch(Sampler *s, int epoch, int world) {
  if (world < 1 || world > s->n) die(1, "sampler_set_epoch: %d ranks for %d samples", world, s->n);
  s->epoch = epoch;
  s->total = sampler_total(s, world);
  rng_permutation(s->perm, s->n, s->seed + (uint64_t)epoch);
}

int sampler_block(const Sampler *s, long long cursor, int G) {
  long long left = s->total - cursor;
  return left < G ? (int)(left > 0 ? left : 0) : G;
}

int sampler_share(const Sampler *s, long long cursor, int G, int W, int r) {
  int g = sampler_block(s, cursor, G);
  return g > r ? (g - r + W - 1) / W : 0;  // offsets r, r + W, r + 2W, ... below g
}

int sampler_indices_from(const Sampler *s, long long cursor, int G, int W, int r, int *out) {
  int k = 0;
  for (long long c = cursor; c < s->total; c += G)
    for (int p = r; p < sampler_block(s, c, G); p += W)
      out[k++] = s->perm[(c + p) % s->n];  // past the end (padding): repeat from the start
  return k;
}

void sampler_free(Sampler *s) {
  free(s->perm);
  s->perm = NULL;
}
