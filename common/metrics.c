// metrics.c: the JSON Lines file of metrics.h. Each line is flushed as soon as it is written, so a run
// that crashes still leaves every line it reached.
#include "metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "check.h"
#include "log.h"

int metrics_expand_path(char *out, size_t out_len, const char *tmpl, int rank) {
  static const char KEY[] = "{rank}";
  const size_t key_len = sizeof KEY - 1;
  size_t used = 0;
  for (const char *p = tmpl; *p;) {
    const char *piece;
    size_t len;
    char num[16];
    if (strncmp(p, KEY, key_len) == 0) {
      snprintf(num, sizeof num, "%d", rank);
      piece = num;
      len = strlen(num);
      p += key_len;
    } else {
      piece = p;
      len = 1;
      p++;
    }
    if (used + len >= out_len) return -1;  // keep room for the NUL
    memcpy(out + used, piece, len);
    used += len;
  }
  if (out_len == 0) return -1;
  out[used] = '\0';
  return 0;
}

FILE *metrics_open_rank_file(const char *flag, const char *path_template, int rank, int world_size) {
  // Ranks sharing one file would truncate and overwrite each other's lines (a shared trace was
  // invalid JSON): refuse, rather than guess where the rank should go in the name.
  if (world_size > 1 && !strstr(path_template, "{rank}")) {
    const char *base = strrchr(path_template, '/'), *dot = strrchr(base ? base : path_template, '.');
    int stem = dot && dot != (base ? base + 1 : path_template) ? (int)(dot - path_template)
                                                                : (int)strlen(path_template);
    die(2, "%s %s: at %d ranks the path must contain {rank} (e.g. %.*s_{rank}%s), or every rank "
        "would write the same file", flag, path_template, world_size, stem, path_template,
        path_template + stem);
  }
  char path[4096];
  if (metrics_expand_path(path, sizeof path, path_template, rank) != 0)
    die(1, "%s: path '%s' is too long", flag, path_template);
  return fopenCheck(path, "w");
}

void metrics_open(Metrics *m, const char *path_template, int rank, int world_size) {
  m->f = NULL;
  if (!path_template) return;
  m->f = metrics_open_rank_file("--metrics", path_template, rank, world_size);
  m->t0 = now_seconds();
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
  if (!m->f) return;
  fprintf(m->f, "{\"type\":\"step\",\"step\":%lld,\"epoch\":%d,\"loss\":", step, epoch);
  put_float(m->f, (double)loss);
  fprintf(m->f, ",\"time\":%.6f", now_seconds() - m->t0);
  end_line(m);
}

void metrics_epoch(Metrics *m, int epoch, float train_loss, double test_acc, double samples_per_s) {
  if (!m->f) return;
  fprintf(m->f, "{\"type\":\"epoch\",\"epoch\":%d,\"train_loss\":", epoch);
  put_float(m->f, (double)train_loss);
  if (!(test_acc < 0)) {  // negative: not evaluated; a NaN accuracy is still written (as null)
    fputs(",\"test_acc\":", m->f);
    put_float(m->f, test_acc);
  }
  fputs(",\"samples_per_s\":", m->f);
  put_float(m->f, samples_per_s);
  end_line(m);
}

void metrics_final(Metrics *m, int world_size, long long steps, uint64_t param_digest) {
  if (!m->f) return;
  fprintf(m->f, "{\"type\":\"final\",\"world_size\":%d,\"steps\":%lld,\"param_digest\":\"%016" PRIx64 "\"",
          world_size, steps, param_digest);
  end_line(m);
}

void metrics_close(Metrics *m) {
  if (!m->f) return;
  if (fclose(m->f) != 0) {
    m->f = NULL;
    die(1, "cannot close the metrics file: %s", strerror(errno));
  }
  m->f = NULL;
}
