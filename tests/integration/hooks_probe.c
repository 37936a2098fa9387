// hooks_probe: runs common/'s gradient clipper (and, under mpirun, the communication hooks) on
// gradients read from a file, for tests/integration/hooks_check.py, which compares the results with
// PyTorch's own functions on the same numbers.
//
//   hooks_probe clip MAX IN OUT SHARDS [MAX IN OUT SHARDS ...]  (several cases: one process)
//     IN: raw float32 gradients. Sums their squares whole (clip_sum_squares) and again as SHARDS
//     uneven contiguous pieces whose sums are added (as the ranks of a sharded trainer add theirs):
//     the two must be equal bit for bit (exit 1 naming the first word that differs). Then clips the
//     whole (clip_scale) and writes OUT: the norm (float32), then the scaled gradients.
//   mpirun -np W hooks_probe hook NAME IN OUT
//     Every rank reads IN with {rank} replaced (a bucket of raw float32 gradients, not divided by W),
//     runs the communication hook NAME on it as one bucket (comm_hook_run, comm_hook_wait; MPI
//     backend, CPU) and writes the bucket it gets back to OUT ({rank} replaced); prints the bytes the
//     hook handed to the collective.
//   mpirun -np W hooks_probe powersgd Q IN1 IN2 OUT
//     PowerSGD (rank 1) on one bucket laid out as a 784-64-10 MLP's gradient (W0 64×784, b0, W1
//     10×64, b1), compressing from the first iteration, its initial Q read from Q (raw float32, the
//     bucket's Q memory: 784 then 64 floats) so that PyTorch's hook can start from the same; two
//     iterations, on IN1 then IN2 ({rank} replaced); writes each iteration's bucket to OUT with
//     {rank} and {iter} (1, 2) replaced.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "clip.h"
#include "comm_hook.h"
#include "device.h"
#include "dist.h"

static float *read_floats(const char *path, size_t *n) {
  FILE *f = fopen(path, "rb");
  if (!f) die(2, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long bytes = ftell(f);
  fseek(f, 0, SEEK_SET);
  *n = (size_t)bytes / sizeof(float);
  float *x = mallocCheck(*n * sizeof(float) + 1);
  if (fread(x, sizeof(float), *n, f) != *n) die(2, "cannot read %s", path);
  fclose(f);
  return x;
}

static void write_floats(const char *path, const float *head, size_t nh, const float *x, size_t n) {
  FILE *f = fopen(path, "wb");
  if (!f || (nh && fwrite(head, sizeof(float), nh, f) != nh) || fwrite(x, sizeof(float), n, f) != n ||
      fclose(f))
    die(2, "cannot write %s", path);
}

static int clip_one(char **argv);

static int clip_probe(int argc, char **argv) {
  if (argc < 6 || (argc - 2) % 4 != 0) die(2, "usage: hooks_probe clip MAX IN OUT SHARDS [...]");
  for (int i = 2; i < argc; i += 4)
    if (clip_one(argv + i) != 0) return 1;
  return 0;
}

// One case: argv = MAX IN OUT SHARDS.
static int clip_one(char **argv) {
  float max_norm = strtof(argv[0], NULL);
  int shards = atoi(argv[3]);
  size_t n;
  float *g = read_floats(argv[1], &n);
  Ctx c;
  device_init(&c, DEVICE_CPU, 0);
  Clip k;
  clip_init(&k, &c, max_norm);
  double total[CLIP_SUMS] = {0};
  size_t start = 0;
  for (int s = 0; s < shards; s++) {  // uneven pieces: the first ones take a third of what is left
    size_t len = s == shards - 1 ? n - start : (n - start) / 3;
    clip_sum_squares(&k, &c, g + start, len);
    for (int w = 0; w < CLIP_SUMS; w++) total[w] += k.sums[w];
    start += len;
  }
  clip_sum_squares(&k, &c, g, n);
  for (int w = 0; w < CLIP_SUMS; w++)
    if (total[w] != k.sums[w]) {
      fprintf(stderr, "word %d: %.17g whole, %.17g summed over %d shards\n", w, k.sums[w], total[w], shards);
      return 1;
    }
  clip_scale(&k, &c, g, n);
  write_floats(argv[2], k.norm, 1, g, n);
  clip_free(&k, &c);
  device_free(&c);
  free(g);
  return 0;
}

// path with "{rank}" replaced by the rank
static void rank_path(char *out, size_t len, const char *tmpl, int rank) {
  const char *at = strstr(tmpl, "{rank}");
  if (!at) die(2, "%s: no {rank} in the path", tmpl);
  snprintf(out, len, "%.*s%d%s", (int)(at - tmpl), tmpl, rank, at + strlen("{rank}"));
}

static int hook_probe(int argc, char **argv) {
  if (argc != 5) die(2, "usage: hooks_probe hook NAME IN OUT");
  CommHookKind kind;
  if (comm_hook_parse(argv[2], &kind) != 0) die(2, "unknown hook '%s'", argv[2]);
  ProcessGroup pg;
  dist_init(&pg, "mpi", DEVICE_CPU, 60.0f);
  Ctx c;
  device_init(&c, DEVICE_CPU, 0);
  dist_connect(&pg, &c);
  char path[4096];
  rank_path(path, sizeof path, argv[3], pg.rank);
  size_t n;
  float *g = read_floats(path, &n);
  CommHook h;
  comm_hook_init(&h, &pg, kind, n, 1, 2, 42);
  DistWork w;
  dist_work_init(&pg, &w);
  comm_hook_run(&h, 0, g, 0, n, &w);
  comm_hook_wait(&h, 0, g, 0, n, &w);
  rank_path(path, sizeof path, argv[4], pg.rank);
  write_floats(path, NULL, 0, g, n);
  if (pg.rank == 0) printf("bytes %lld\n", dist_take_bytes(&w, 1));
  dist_work_free(&pg, &w);
  comm_hook_free(&h);
  free(g);
  dist_destroy(&pg);
  device_free(&c);
  return 0;
}

// path with "{rank}" and "{iter}" replaced
static void iter_path(char *out, size_t len, const char *tmpl, int rank, int iter) {
  char tmp[4096];
  const char *at = strstr(tmpl, "{iter}");
  if (!at) die(2, "%s: no {iter} in the path", tmpl);
  snprintf(tmp, sizeof tmp, "%.*s%d%s", (int)(at - tmpl), tmpl, iter, at + strlen("{iter}"));
  rank_path(out, len, tmp, rank);
}

static int powersgd_probe(int argc, char **argv) {
  if (argc != 6) die(2, "usage: hooks_probe powersgd Q IN1 IN2 OUT");
  ProcessGroup pg;
  dist_init(&pg, "mpi", DEVICE_CPU, 60.0f);
  Ctx c;
  device_init(&c, DEVICE_CPU, 0);
  dist_connect(&pg, &c);
  const int sizes[3] = {784, 64, 10};
  size_t n = 784 * 64 + 64 + 64 * 10 + 10, off = 0;
  CommHook h;
  comm_hook_init(&h, &pg, COMM_HOOK_POWERSGD, n, 1, 2, 42);
  for (int l = 0; l < 2; l++) {
    comm_hook_add_tensor(&h, 0, off, sizes[l + 1], sizes[l]);
    off += (size_t)sizes[l + 1] * sizes[l];
    comm_hook_add_tensor(&h, 0, off, sizes[l + 1], 1);
    off += (size_t)sizes[l + 1];
  }
  comm_hook_layout(&h);
  h.psgd.iter = h.psgd.start_iter;  // compress from the first call
  size_t nq;
  float *q = read_floats(argv[2], &nq);
  if (nq != h.psgd.b[0].q_len) die(2, "%s: %zu floats, the Q memory has %zu", argv[2], nq, h.psgd.b[0].q_len);
  powersgd_set_q(&h.psgd, 0, q);
  DistWork w;
  dist_work_init(&pg, &w);
  char path[4096];
  for (int it = 1; it <= 2; it++) {
    rank_path(path, sizeof path, argv[2 + it], pg.rank);
    size_t m;
    float *g = read_floats(path, &m);
    if (m != n) die(2, "%s: %zu floats, expected %zu", path, m, n);
    comm_hook_run(&h, 0, g, 0, n, &w);
    comm_hook_wait(&h, 0, g, 0, n, &w);
    iter_path(path, sizeof path, argv[5], pg.rank, it);
    write_floats(path, NULL, 0, g, n);
    free(g);
  }
  if (pg.rank == 0) printf("bytes %lld\n", dist_take_bytes(&w, 1));
  dist_work_free(&pg, &w);
  comm_hook_free(&h);
  free(q);
  dist_destroy(&pg);
  device_free(&c);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "clip") == 0) return clip_probe(argc, argv);
  if (argc > 1 && strcmp(argv[1], "hook") == 0) return hook_probe(argc, argv);
  if (argc > 1 && strcmp(argv[1], "powersgd") == 0) return powersgd_probe(argc, argv);
  die(2, "usage: hooks_probe clip MAX IN OUT SHARDS | hooks_probe hook NAME IN OUT");
}
