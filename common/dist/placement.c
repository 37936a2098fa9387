// placement.c: each rank's host and local rank, gathered and printed by rank 0 as one line.
#define _POSIX_C_SOURCE 200809L
#include "placement.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "devmem.h"
#include "log.h"

_Static_assert(sizeof(Placement) % 4 == 0, "Placement is gathered as int32");

void placement_self(Placement *p, int local_rank) {
  memset(p, 0, sizeof *p);
  if (gethostname(p->host, sizeof p->host - 1) != 0 || p->host[0] == '\0') strcpy(p->host, "?");
  p->host[sizeof p->host - 1] = '\0';  // gethostname need not terminate a name it cut
  p->local_rank = local_rank;
}

// A line being written into a fixed buffer; once full, it stays full and ends with "...".
typedef struct Line {
  char *out;
  size_t size, len;
  bool full;
} Line;

static void put(Line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(Line *l, const char *fmt, ...) {
  if (l->full) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(l->out + l->len, l->size - l->len, fmt, ap);
  va_end(ap);
  if (n >= 0 && (size_t)n < l->size - l->len) {
    l->len += (size_t)n;
    return;
  }
  l->full = true;
  strcpy(l->out + l->size - 4, "...");
}

static bool same_host(const Placement *a, const Placement *b) { return strcmp(a->host, b->host) == 0; }

// The local ranks of ranks [a, b) as runs of consecutive values: "0-1", "3", "1,0".
static void put_locals(Line *l, const Placement *all, int a, int b) {
  for (int r = a; r < b;) {
    int e = r;
    while (e + 1 < b && all[e + 1].local_rank == all[e].local_rank + 1) e++;
    put(l, r > a ? ",%d" : "%d", (int)all[r].local_rank);
    if (e > r) put(l, "-%d", (int)all[e].local_rank);
    r = e + 1;
  }
}

void placement_format(char *out, size_t size, const Placement *all, int W) {
  if (size < 8 || W < 1) die(1, "placement_format: %zu bytes for %d ranks", size, W);
  Line l = {out, size, 0, false};
  out[0] = '\0';
  put(&l, "ranks:");
  for (int a = 0; a < W;) {
    int b = a + 1;
    while (b < W && same_host(&all[b], &all[a])) b++;
    put(&l, "%s %s %d", a > 0 ? "," : "", all[a].host, a);
    if (b - 1 > a) put(&l, "-%d", b - 1);
    put(&l, " (local ");
    put_locals(&l, all, a, b);
    put(&l, ")");
    a = b;
  }
}

void placement_log(ProcessGroup *pg) {
  int W = pg->world_size;
  if (W <= 1) return;
  Placement self;
  placement_self(&self, pg->local_rank);
  size_t bytes = sizeof self;
  Placement *all = mallocCheck(bytes * (size_t)W);
  void *send = dev_alloc(pg->ctx, bytes), *recv = dev_alloc(pg->ctx, bytes * (size_t)W);
  dev_upload(pg->ctx, send, &self, bytes);
  dist_all_gather(pg, send, recv, bytes / 4, DIST_INT);
  dev_download(pg->ctx, all, recv, bytes * (size_t)W);
  dev_free(pg->ctx, recv);
  dev_free(pg->ctx, send);
  char line[PLACEMENT_LINE];
  placement_format(line, sizeof line, all, W);
  free(all);
  log0("%s\n", line);
}
