// metrics.c: the JSON Lines file of metrics.h. Each line is flushed as soon as it is written, so a run
// that crashes still leaves every line it reached.
#include "metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <sys/resource.h>

#include "check.h"
#include "flops.h"
#include "log.h"
#include "rankfile.h"

static void end_line(Metrics *m);

void metrics_open(Metrics *m, const char *path_template, int rank, int world_size) {
  m->f = NULL;
  if (!path_template) return;
  // A restarted attempt runs the same command line: truncating would wipe the earlier attempts' lines.
  m->attempt = rankfile_attempt();
  m->f = rankfile_open_mode("--metrics", path_template, rank, world_size, m->attempt > 0 ? "a" : "w");
  m->t0 = log_clock();
  m->t_epoch = m->t0;
  m->flops_epoch = flops_total();
  m->start = -1;
  m->bytes = -1;
  if (m->attempt > 0) {
    fprintf(m->f, "{\"type\":\"attempt\",\"attempt\":%d", m->attempt);
    end_line(m);
  }
}

// A float as JSON: 9 significant digits round-trip any float32; NaN and infinities have no JSON
// spelling, so they become null (a diverged run must still leave a readable file).
static void put_float(FILE *f, double x) {
  if (isfinite(x))
    fprintf(f, "%.9g", x);
  else
    fputs("null", f);
}

// Ends the line and flushes it; a metrics file that silently loses lines would mislead the tests.
static void end_line(Metrics *m) {
  fputs("}\n", m->f);
  if (fflush(m->f) != 0 || ferror(m->f)) die(1, "cannot write the metrics file: %s", strerror(errno));
}

void metrics_step(Metrics *m, long long step, int epoch, float loss) {
  metrics_step_norm(m, step, epoch, loss, NULL);
}

void metrics_step_norm(Metrics *m, long long step, int epoch, float loss, const float *grad_norm) {
  if (!m->f) return;
  if (m->start < 0) m->start = step - 1;  // steps come in order, from the one after the start
  fprintf(m->f, "{\"type\":\"step\",\"step\":%lld,\"epoch\":%d,\"loss\":", step, epoch);
  put_float(m->f, (double)loss);
  if (grad_norm) {
    fputs(",\"grad_norm\":", m->f);
    put_float(m->f, (double)*grad_norm);
  }
  fprintf(m->f, ",\"time\":%.6f", log_clock() - m->t0);
  end_line(m);
}

void metrics_epoch(Metrics *m, int epoch, float train_loss, double test_acc, double samples_per_s,
                   bool partial) {
  if (!m->f) return;
  fprintf(m->f, "{\"type\":\"epoch\",\"epoch\":%d,\"train_loss\":", epoch);
  put_float(m->f, (double)train_loss);
  if (!(test_acc < 0)) {  // negative: not evaluated; a NaN accuracy is still written (as null)
    fputs(",\"test_acc\":", m->f);
    put_float(m->f, test_acc);
  }
  fputs(",\"samples_per_s\":", m->f);
  put_float(m->f, samples_per_s);
  double now = log_clock(), flops = flops_total() - m->flops_epoch, dt = now - m->t_epoch;
  if (flops > 0 && dt > 0) {  // the GEMM rate since the previous epoch object
    fputs(",\"gflops\":", m->f);
    put_float(m->f, flops / dt / 1e9);
    if (flops_peak() > 0) {
      fputs(",\"mfu\":", m->f);
      put_float(m->f, flops / dt / flops_peak());
    }
  }
  m->t_epoch = now;
  m->flops_epoch = flops_total();
  if (m->bytes >= 0) fprintf(m->f, ",\"allreduce_bytes\":%lld", m->bytes);
  m->bytes = -1;
  if (partial) fputs(",\"partial\":true", m->f);
  end_line(m);
}

void metrics_epoch_bytes(Metrics *m, long long bytes) { m->bytes = bytes; }

void metrics_straggler(Metrics *m, long long first, long long last, int world, const float *fig,
                       int late_rank, float late_ms) {
  if (!m->f) return;
  static const char *const NAMES[4] = {"data_ms", "compute_ms", "wait_ms", "step_ms"};
  fprintf(m->f, "{\"type\":\"straggler\",\"first_step\":%lld,\"step\":%lld", first, last);
  for (int k = 0; k < 4; k++) {
    fprintf(m->f, ",\"%s\":[", NAMES[k]);
    for (int r = 0; r < world; r++) {
      if (r) fputc(',', m->f);
      put_float(m->f, (double)fig[(size_t)r * 4 + (size_t)k]);
    }
    fputc(']', m->f);
  }
  if (late_rank >= 0)
    fprintf(m->f, ",\"late_rank\":%d", late_rank);
  else
    fputs(",\"late_rank\":null", m->f);
  fputs(",\"late_ms\":", m->f);
  put_float(m->f, (double)late_ms);
  end_line(m);
}

void metrics_final(Metrics *m, int world_size, long long steps, uint64_t param_digest) {
  if (!m->f) return;
  struct rusage ru;
  long peak_kib = getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;  // Linux: KiB
  fprintf(m->f,
          "{\"type\":\"final\",\"world_size\":%d,\"steps\":%lld,\"param_digest\":\"%016" PRIx64
          "\",\"peak_rss_kib\":%ld,\"attempt\":%d,\"start_step\":%lld",
          world_size, steps, param_digest, peak_kib, m->attempt, m->start < 0 ? steps : m->start);
  end_line(m);
  metrics_close(m);
}

void metrics_close(Metrics *m) {
  if (!m->f) return;
  if (fclose(m->f) != 0) {
    m->f = NULL;
    die(1, "cannot close the metrics file: %s", strerror(errno));
  }
  m->f = NULL;
}
