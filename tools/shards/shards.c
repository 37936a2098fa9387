// Prints the shards of step 03's distributed sampler: for each epoch and rank, the dataset indices
// that rank visits, in order, with their padded positions (chapter 03, "What you should see"; the
// data of dev/concept_figures.py). Compile from the repository root after a build:
//   cc -O2 -Icommon -Isteps/03_sampler tools/shards/shards.c steps/03_sampler/sampler.c \
//      build/libddp_common.a -lm -o out/shards
//   out/shards [N W SEED EPOCHS [drop_last]]        (default: 10 3 42 2)
// Each line: "epoch E rank R: i i i …" then "  (positions p p p …)" — the positions in the padded
// permutation, r + k·W; a position >= N is a padded one and repeats perm[position - N].
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampler.h"

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 10, w = argc > 2 ? atoi(argv[2]) : 3;
  unsigned long long seed = argc > 3 ? strtoull(argv[3], NULL, 10) : 42;
  int epochs = argc > 4 ? atoi(argv[4]) : 2;
  int drop_last = argc > 5 && strcmp(argv[5], "drop_last") == 0;
  if (n < 1 || w < 1 || epochs < 1) {
    fprintf(stderr, "usage: %s [N W SEED EPOCHS [drop_last]]\n", argv[0]);
    return 2;
  }
  for (int e = 0; e < epochs; e++) {
    for (int r = 0; r < w; r++) {
      Sampler s;
      sampler_init(&s, n, w, r, drop_last, seed);
      sampler_set_epoch(&s, e);
      int *idx = malloc(sizeof(int) * (size_t)s.num_samples);
      if (!idx) return 1;
      sampler_indices(&s, idx);
      if (r == 0) {
        printf("epoch %d permutation:", e);
        for (int i = 0; i < n; i++) printf(" %d", s.perm[i]);
        printf("\n");
      }
      printf("epoch %d rank %d:", e, r);
      for (int k = 0; k < s.num_samples; k++) printf(" %d", idx[k]);
      printf("  (positions");
      for (int k = 0; k < s.num_samples; k++) printf(" %d", r + k * w);
      printf(")\n");
      free(idx);
      sampler_free(&s);
    }
  }
  return 0;
}
