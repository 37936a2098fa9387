// straggler.c: the straggler report of straggler.h.
#include "straggler.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "devmem.h"
#include "log.h"

void straggler_init(Straggler *s, int every, ProcessGroup *pg, const Loader *data, Metrics *m) {
  if (every < 0 || every > STRAGGLER_MAX_EVERY)
    die(2, "--straggler %d: expected 0 (off) to %d steps", every, STRAGGLER_MAX_EVERY);
  memset(s, 0, sizeof *s);
  s->every = every;
  s->pg = pg;
  s->data = data;
  s->metrics = m;
  s->data_s = data->busy_s;
  dist_lap(pg);  // the first step's lap starts now
  if (every == 0) return;
  size_t all = (size_t)pg->world_size * STRAGGLER_FIGS;
  s->steps = mallocCheck((size_t)every * STRAGGLER_FIGS * sizeof *s->steps);
  s->all = dev_alloc(pg->ctx, all * sizeof *s->all);
  s->host = mallocCheck(all * sizeof *s->host);
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

// The median of @p n floats (sorts them in place): the middle one, or the mean of the two middle ones.
static float median(float *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_float);
  return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

int straggler_verdict(const float *fig, int world, float *late_ms, float *wait_ms, float *step_ms) {
  float *v = mallocCheck((size_t)world * sizeof *v);
  int late = 0;
  *late_ms = 0;
  for (int r = 0; r < world && world > 1; r++) {  // each rank's arrival after the others' median
    int n = 0;
    for (int q = 0; q < world; q++)
      if (q != r) v[n++] = fig[q * STRAGGLER_FIGS + 0] + fig[q * STRAGGLER_FIGS + 1];
    float after = fig[r * STRAGGLER_FIGS + 0] + fig[r * STRAGGLER_FIGS + 1] - median(v, n);
    if (r == 0 || after > *late_ms) late = r, *late_ms = after;
  }
  int n = 0;
  for (int q = 0; q < world; q++)
    if (q != late || world == 1) v[n++] = fig[q * STRAGGLER_FIGS + 2];
  *wait_ms = median(v, n);
  for (int q = 0; q < world; q++) v[q] = fig[q * STRAGGLER_FIGS + 3];
  *step_ms = median(v, world);
  free(v);
  return world > 1 && *late_ms > STRAGGLER_SHARE * *step_ms ? late : -1;
}

// Rank 0's line and metrics object for the window that ends at @p step.
static void report(Straggler *s, long long step) {
  int W = s->pg->world_size;
  float late_ms, wait_ms, step_ms;
  int late = straggler_verdict(s->host, W, &late_ms, &wait_ms, &step_ms);
  metrics_straggler(s->metrics, s->first, step, W, s->host, late, late_ms);
  if (late >= 0) {
    const float *f = s->host + late * STRAGGLER_FIGS;
    log0(
        "straggler, steps %lld-%lld: rank %d arrives %.1f ms after the others (data %.1f + compute %.1f ms, "
        "theirs %.1f ms), %.0f %% of the %.1f ms step; they wait %.1f ms per step\n",
        s->first, step, late, late_ms, f[0], f[1], f[0] + f[1] - late_ms, 100 * late_ms / step_ms, step_ms,
        wait_ms);
  } else {
    log0(
        "straggler, steps %lld-%lld: no rank arrives late (the latest %.1f ms after the others, %.0f %% of "
        "the %.1f ms step; named above %.0f %%)\n",
        s->first, step, late_ms, step_ms > 0 ? 100 * late_ms / step_ms : 0.0, step_ms, 100 * STRAGGLER_SHARE);
  }
}

void straggler_step(Straggler *s, long long step) {
  DistLap lap = dist_lap(s->pg);
  double now = s->pg->lap.start, data = s->data->busy_s - s->data_s;
  s->data_s = s->data->busy_s;
  if (s->every == 0) return;
  if (s->n == 0) s->first = step;
  double arrived = lap.arrived > 0 ? lap.arrived : now;  // no gradient collective: the whole step
  double compute = arrived - lap.start - data;
  float *f = s->steps + s->n;  // figure k of step i at steps[k * every + i]
  f[0] = (float)(1e3 * data);
  f[s->every] = (float)(1e3 * (compute > 0 ? compute : 0));
  f[2 * s->every] = (float)(1e3 * lap.wait_s);
  f[3 * s->every] = (float)(1e3 * (now - lap.start));
  if (++s->n < s->every) return;
  float mine[STRAGGLER_FIGS];
  for (int k = 0; k < STRAGGLER_FIGS; k++) mine[k] = median(s->steps + k * s->every, s->every);
  float *slot = s->all + (size_t)s->pg->rank * STRAGGLER_FIGS;  // the in-place all-gather's part
  dev_upload(s->pg->ctx, slot, mine, sizeof mine);
  dist_all_gather(s->pg, slot, s->all, STRAGGLER_FIGS, DIST_FLOAT);
  dev_download(s->pg->ctx, s->host, s->all, (size_t)s->pg->world_size * STRAGGLER_FIGS * sizeof *s->host);
  if (s->pg->rank == 0) report(s, step);
  s->n = 0;
}

void straggler_free(Straggler *s) {
  free(s->steps);
  free(s->host);
  if (s->all) dev_free(s->pg->ctx, s->all);
  s->steps = NULL, s->host = NULL, s->all = NULL;
}
