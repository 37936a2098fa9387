// trace.c: Chrome trace-event JSON writer.
#include "trace.h"

#include <string.h>

#include "check.h"
#include "metrics.h"

void trace_open(Trace *t, const char *path_template, int rank, int world_size) {
  memset(t, 0, sizeof *t);
  t->rank = rank;
  if (!path_template) return;
  t->f = metrics_open_rank_file("--trace", path_template, rank, world_size);
  fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", t->f);
}

bool trace_on(const Trace *t) { return t->f != NULL; }

static void separator(Trace *t) {
  if (t->count++) fputs(",\n", t->f);
}

void trace_track(Trace *t, int track, const char *name) {
  if (!t->f) return;
  separator(t);
  fprintf(t->f, "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": %d, \"tid\": %d, "
          "\"args\": {\"name\": \"%s\"}}", t->rank, track, name);
}

void trace_span(Trace *t, int track, const char *name, double begin, double end, long long step) {
  if (!t->f) return;
  separator(t);
  fprintf(t->f, "{\"ph\": \"X\", \"name\": \"%s\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, "
          "\"dur\": %.3f, \"args\": {\"step\": %lld}}", name, t->rank, track, 1e6 * begin,
          1e6 * (end > begin ? end - begin : 0.0), step);
}

void trace_close(Trace *t) {
  if (!t->f) return;
  fputs("\n]}\n", t->f);
  if (fclose(t->f) != 0) die(1, "cannot write the trace file");
  t->f = NULL;
}
