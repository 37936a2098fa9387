// log.c: rank-aware printing and the progress line of log.h.
#define _POSIX_C_SOURCE 200809L
#include "log.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>

#include "check.h"

void log0(const char *fmt, ...) {
  if (check_rank() != 0) return;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  fflush(stdout);  // ranks share the launcher's stdout; unflushed lines would interleave late
}

void log_all(const char *fmt, ...) {
  // One buffered write per call, so lines of different ranks do not mix mid-line.
  char buf[1024];
  int k = snprintf(buf, sizeof buf, "[rank %d] ", check_rank());
  va_list ap;
  va_start(ap, fmt);
  if (k > 0 && (size_t)k < sizeof buf) vsnprintf(buf + k, sizeof buf - (size_t)k, fmt, ap);
  va_end(ap);
  fputs(buf, stdout);
  fflush(stdout);
}

void loss_check_finite(float loss, long long step) {
  if (isfinite(loss)) return;
  die(1,
      "step %lld: the loss is %s: training diverged (try a smaller --lr); no checkpoint was "
      "written for this epoch",
      step, isnan(loss) ? "nan" : loss > 0 ? "inf" : "-inf");
}

double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void progress_start(Progress *p, long long total, long long done) {
  p->t_start = now_seconds();
  p->t_last = p->t_start;
  p->total = total;
  p->done_at_start = done;
  p->samples = 0;
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
  double now = now_seconds();
  double dt = now - p->t_last;
  double rate = dt > 0 ? (double)p->samples / dt : 0.0;
  // The ETA uses the average since the start, not the last interval: it is steadier, and steps done
  // before a resume are excluded because they took no time in this run.
  long long done = step - p->done_at_start;
  double elapsed = now - p->t_start;
  long long left = p->total > step ? p->total - step : 0;
  double eta = done > 0 && elapsed > 0 ? (double)left * elapsed / (double)done : -1.0;
  char eta_s[32];
  format_eta(eta_s, sizeof eta_s, eta);
  log0("epoch %d/%d  step %lld/%lld  loss %.4f  %.0f samples/s  ETA %s\n", epoch, epochs, step,
       p->total, (double)loss, rate, eta_s);
  p->t_last = now;
  p->samples = 0;
  return rate;
}
