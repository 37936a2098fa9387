// progress.c: the progress line of progress.h.
#include "progress.h"

#include <stdio.h>

#include "flops.h"
#include "log.h"

void progress_start(Progress *p, long long total, long long done) {
  p->t_start = log_clock();
  p->t_last = p->t_start;
  p->total = total;
  p->done_at_start = done;
  p->last_step = done;
  p->samples = 0;
  p->flops_last = flops_total();
}

void progress_add(Progress *p, long long n) { p->samples += n; }

// "mm:ss", or "h:mm:ss" from one hour on; "--:--" when there is no estimate yet.
static void format_eta(char *buf, size_t len, double s) {
  if (!(s >= 0) || s > 1e8) {
    snprintf(buf, len, "--:--");
    return;
  }
  long t = (long)(s + 0.5);
  if (t >= 3600)
    snprintf(buf, len, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    snprintf(buf, len, "%02ld:%02ld", t / 60, t % 60);
}

double progress_print(Progress *p, int epoch, int epochs, long long step, float loss) {
  double now = log_clock();
  double dt = now - p->t_last;
  double rate = dt > 0 ? (double)p->samples / dt : 0.0;
  long long steps = step - p->last_step;
  double ms_per_step = steps > 0 ? 1e3 * dt / (double)steps : 0.0;
  // The ETA uses the average since the start, not the last interval: it is steadier, and steps done
  // before a resume are excluded because they took no time in this run.
  long long done = step - p->done_at_start;
  double elapsed = now - p->t_start;
  long long left = p->total > step ? p->total - step : 0;
  double eta = done > 0 && elapsed > 0 ? (double)left * elapsed / (double)done : -1.0;
  char eta_s[32];
  format_eta(eta_s, sizeof eta_s, eta);
  // The GEMM rate since the previous line, and its fraction of the peak where that is known.
  double flops = flops_total() - p->flops_last, peak = flops_peak();
  char rate_s[64] = "";
  if (flops > 0 && dt > 0) {
    int n = snprintf(rate_s, sizeof rate_s, "  %.2f GFLOP/s", flops / dt / 1e9);
    if (peak > 0) snprintf(rate_s + n, sizeof rate_s - (size_t)n, "  MFU %.1f%%", 100.0 * flops / dt / peak);
  }
  log0("epoch %d/%d  step %lld/%lld  loss %.4f  %.0f samples/s  %.1f ms/step  ETA %s%s\n", epoch, epochs,
       step, p->total, (double)loss, rate, ms_per_step, eta_s, rate_s);
  p->t_last = now;
  p->flops_last = flops_total();
  p->last_step = step;
  p->samples = 0;
  return rate;
}
