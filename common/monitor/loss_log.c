// loss_log.c: the loss logger of loss_log.h.
#include "loss_log.h"

#include <math.h>
#include <string.h>

#include "check.h"

_Static_assert(LOSS_LOG_AHEAD < READBACK_SLOTS, "the losses of AHEAD + 1 steps must fit in flight");

void loss_log_init(LossLog *g, const Ctx *c, Metrics *metrics, int log_interval, int epochs,
                   long long first_step, long long total_steps, const float *norm) {
  memset(g, 0, sizeof *g);
  g->norm = norm;
  readback_init(&g->ring, c);
  readback_init(&g->norms, c);
  g->metrics = metrics;
  progress_start(&g->progress, total_steps, first_step);
  g->log_interval = log_interval;
  g->epochs = epochs;
}

void loss_log_check_finite(float loss, long long step) {
  if (isfinite(loss)) return;
  die(1,
      "step %lld: the loss is %s: training diverged (try a smaller --lr); no checkpoint was "
      "written for this epoch",
      step,
      isnan(loss) ? "nan"
      : loss > 0  ? "inf"
                  : "-inf");
}

// Logs every loss that has arrived, waiting while more than max_ahead are in flight.
static void take_arrived(LossLog *g, const Ctx *c, int max_ahead) {
  float loss;
  long long step;
  for (int slot = g->ring.head; readback_take(&g->ring, c, max_ahead, &loss, &step); slot = g->ring.head) {
    int epoch = g->epoch_of[slot];
    loss_log_check_finite(loss, step);  // a diverged run stops here, before the epoch's checkpoint
    g->sum += loss;
    g->count++;
    float norm;  // queued before the loss, on the same stream: it has arrived too
    long long norm_step;
    bool has_norm = g->norms.count > 0 && readback_take(&g->norms, c, 0, &norm, &norm_step);
    metrics_step_norm(g->metrics, step, epoch, loss, has_norm && norm_step == step ? &norm : NULL);
    if (step % g->log_interval == 0) progress_print(&g->progress, epoch + 1, g->epochs, step, loss);
  }
}

void loss_log_push(LossLog *g, const Ctx *c, const float *loss, long long step, int epoch,
                   long long samples) {
  progress_add(&g->progress, samples);
  g->epoch_of[(g->ring.head + g->ring.count) % READBACK_SLOTS] = epoch;
  if (g->norm) readback_push(&g->norms, c, g->norm, step);
  readback_push(&g->ring, c, loss, step);
  take_arrived(g, c, LOSS_LOG_AHEAD);
}

double loss_log_epoch(LossLog *g, const Ctx *c) {
  take_arrived(g, c, 0);
  double mean = g->count ? g->sum / (double)g->count : 0.0;
  g->sum = 0.0;
  g->count = 0;
  return mean;
}

void loss_log_free(LossLog *g, const Ctx *c) {
  readback_free(&g->norms, c);
  readback_free(&g->ring, c);
}
