// trace.c: Chrome trace-event JSON writer.
#include "trace.h"

#include <string.h>

#include "check.h"
#include "log.h"
#include "rankfile.h"

// The template with ".attemptA" before the extension of its last component: t_{rank}.json becomes
// t_{rank}.attempt2.json (a name without an extension gets it at the end).
static void attempt_template(char *out, size_t len, const char *tmpl, int attempt) {
  const char *base = strrchr(tmpl, '/'), *dot;
  base = base ? base + 1 : tmpl;
  dot = strrchr(base, '.');
  int stem = dot && dot != base ? (int)(dot - tmpl) : (int)strlen(tmpl);
  if (snprintf(out, len, "%.*s.attempt%d%s", stem, tmpl, attempt, tmpl + stem) >= (int)len)
    die(1, "--trace: path '%s' is too long", tmpl);
}

void trace_open(Trace *t, const Ctx *c, Mlp *m, const char *path_template, int rank, int world_size) {
  memset(t, 0, sizeof *t);
  t->rank = rank;
  if (!path_template) return;
  // A restarted attempt runs the same command line; a trace is one JSON document per process, so it
  // cannot append: each attempt after the first writes a file of its own, the earlier ones stay.
  char renamed[4096];
  int attempt = rankfile_attempt();
  if (attempt > 0) {
    attempt_template(renamed, sizeof renamed, path_template, attempt);
    log0("--trace: attempt %d of a restarted job writes %s\n", attempt, renamed);
    path_template = renamed;
  }
  t->f = rankfile_open("--trace", path_template, rank, world_size);
  fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", t->f);
  dev_event_init(c, &t->origin);
  dev_event_record(c, &t->origin, NULL);
  mlp_time_backward(m, c);
}

bool trace_on(const Trace *t) { return t->f != NULL; }

static void separator(Trace *t) {
  if (t->count++) fputs(",\n", t->f);
}

void trace_track(Trace *t, int track, const char *name) {
  if (!t->f) return;
  separator(t);
  fprintf(t->f,
          "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, "
          "\"args\": {\"name\": \"%s\"}}",
          t->rank, track, name);
}

void trace_span(Trace *t, int track, const char *name, double begin, double end, long long step) {
  if (!t->f) return;
  separator(t);
  fprintf(t->f,
          "{\"ph\": \"X\", \"name\": \"%s\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, "
          "\"dur\": %.3f, \"args\": {\"step\": %lld}}",
          name, t->rank, track, 1e6 * begin, 1e6 * (end > begin ? end - begin : 0.0), step);
}

// A collective's elements as a person reads them (a 16-bit hook's are not floats), and their bytes.
static const char *elements(DistType type, size_t *bytes) {
  switch (type) {
    case DIST_HALF:
      *bytes = 2;
      return "fp16 values";
    case DIST_BF16:
      *bytes = 2;
      return "bf16 values";
    case DIST_INT:
      *bytes = 4;
      return "ints";
    case DIST_DOUBLE:
      *bytes = 8;
      return "doubles";
    default:
      *bytes = 4;
      return "floats";
  }
}

void trace_backward(Trace *t, const Ctx *c, const Mlp *m, const DistWork *work, int n_work, long long step) {
  if (!t->f || t->steps >= TRACE_STEPS) return;
  if (t->steps++ == 0) {
    trace_track(t, 1, "compute: backward");
    trace_track(t, 2, "communication");
  }
  char name[96];
  const DevEvent *prev = &m->backward_start;
  for (int l = m->n_layers - 1; l >= 0; l--) {
    snprintf(name, sizeof name, "backward layer %d", l);
    trace_span(t, 1, name, dev_event_elapsed(c, &t->origin, prev),
               dev_event_elapsed(c, &t->origin, &m->layer_done[l]), step);
    prev = &m->layer_done[l];
  }
  for (int i = 0; i < n_work; i++) {
    if (!work[i].what) continue;  // nothing ran on it (its events were never recorded)
    size_t size;
    const char *unit = elements(work[i].type, &size);
    snprintf(name, sizeof name, "%s bucket %d: %zu %s (%.2f MiB)", work[i].what, i, work[i].n, unit,
             (double)work[i].n * size / (1 << 20));
    trace_span(t, 2, name, dev_event_elapsed(c, &t->origin, &work[i].start),
               dev_event_elapsed(c, &t->origin, &work[i].end), step);
  }
  fflush(t->f);  // a process killed later leaves the steps it traced (a document without its end)
}

void trace_close(Trace *t, const Ctx *c) {
  if (!t->f) return;
  dev_event_free(c, &t->origin);
  fputs("\n]}\n", t->f);
  if (fclose(t->f) != 0) die(1, "cannot write the trace file");
  t->f = NULL;
}
