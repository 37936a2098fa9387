// agree.c: the start-up comparison of agree.h. Each rank's list is a fixed-size table of text; one
// all-gather brings every rank's table to every rank, and every rank compares them the same way, so
// every rank reaches the same verdict and ends with the same message.
#include "agree.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libdeflate.h>

#include "check.h"
#include "devmem.h"

// 64-bit FNV-1a: keeps a value that is too long to show comparable by its tail.
static uint64_t fnv1a(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

void agree_add(Agreement *a, const char *name, const char *fmt, ...) {
  if (a->n >= AGREE_MAX) die(1, "agree_add: more than %d settings (raise AGREE_MAX)", AGREE_MAX);
  char full[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(full, sizeof full, fmt, ap);
  va_end(ap);
  snprintf(a->name[a->n], AGREE_NAME, "%s", name);
  size_t len = strlen(full);
  if (len < AGREE_VALUE)
    memcpy(a->value[a->n], full, len + 1);  // fits (snprintf here draws -Wformat-truncation)
  else
    snprintf(a->value[a->n], AGREE_VALUE, "%.*s... (hash %016llx)", AGREE_VALUE - 32, full,
             (unsigned long long)fnv1a(full));
  a->n++;
}

// The running executable: its file name and the CRC-32 of its bytes ("unreadable" if /proc is not
// there; then every rank says so and only the name is compared).
static void program_identity(Agreement *a) {
  char path[4096] = "";
  const char *base = "unknown";
  FILE *f = fopen("/proc/self/exe", "rb");
  uint32_t crc = 0;  // CRC-32's initial value
  if (f) {
    unsigned char buf[65536];
    for (size_t got; (got = fread(buf, 1, sizeof buf, f)) > 0;) crc = libdeflate_crc32(crc, buf, got);
    fclose(f);
  }
  FILE *cmd = fopen("/proc/self/comm", "r");
  if (cmd && fgets(path, sizeof path, cmd)) {
    path[strcspn(path, "\n")] = '\0';
    base = path;
  }
  if (cmd) fclose(cmd);
  if (f)
    agree_add(a, "the program", "%s (executable crc %08x)", base, (unsigned)crc);
  else
    agree_add(a, "the program", "%s (executable unreadable)", base);
}

void agree_init(Agreement *a) {
  memset(a, 0, sizeof *a);
  program_identity(a);
}

void agree_args(Agreement *a, const char *settings) {
  for (const char *line = settings; *line;) {
    const char *tab = strchr(line, '\t'), *end = strchr(line, '\n');
    if (!tab || !end || tab > end) die(1, "agree_args: '%.40s' is not a NAME<TAB>VALUE line", line);
    char name[AGREE_NAME];
    snprintf(name, sizeof name, "%.*s", (int)(tab - line), line);
    agree_add(a, name, "%.*s", (int)(end - tab - 1), tab + 1);
    line = end + 1;
  }
}

void agree_model(Agreement *a, const int *sizes, int n_layers) {
  char shape[AGREE_VALUE] = "";
  size_t used = 0;
  for (int l = 0; l <= n_layers && used < sizeof shape; l++)
    used += (size_t)snprintf(shape + used, sizeof shape - used, l ? "-%d" : "%d", sizes[l]);
  agree_add(a, "the model", "%s", shape);
}

void agree_data(Agreement *a, const DataId *id) {
  char text[AGREE_VALUE];
  dataset_id_str(text, sizeof text, id);
  agree_add(a, "the data", "%s", text);
}

// Appends "ranks 0, 2: VALUE; rank 1: VALUE2" for setting i to msg: each distinct value once, with
// the ranks that hold it (at most 8 named per value).
static void describe(char *msg, size_t len, const Agreement *all, int world_size, int i) {
  size_t used = strlen(msg);
  for (int r = 0; r < world_size && used < len; r++) {
    int seen = 0;
    for (int q = 0; q < r && !seen; q++) seen = strcmp(all[q].value[i], all[r].value[i]) == 0;
    if (seen) continue;
    int count = 0;
    for (int q = r; q < world_size; q++) count += strcmp(all[q].value[i], all[r].value[i]) == 0;
    used += (size_t)snprintf(msg + used, len - used, "%s%s ", used && msg[used - 1] != '(' ? "; " : "",
                             count > 1 ? "ranks" : "rank");
    int shown = 0;
    for (int q = r; q < world_size && used < len; q++) {
      if (strcmp(all[q].value[i], all[r].value[i]) != 0) continue;
      if (shown++ == 8) {
        used += (size_t)snprintf(msg + used, len - used, ", ...");
        break;
      }
      used += (size_t)snprintf(msg + used, len - used, "%s%d", shown > 1 ? ", " : "", q);
    }
    if (used < len) used += (size_t)snprintf(msg + used, len - used, ": %s", all[r].value[i]);
  }
}

int agree_compare(char *msg, size_t len, const Agreement *all, int world_size) {
  msg[0] = '\0';
  for (int r = 1; r < world_size; r++) {
    if (all[r].n != all[0].n) {  // different programs add different settings: show "program"
      snprintf(msg, len, "the ranks disagree on %s (", all[0].name[0]);
      describe(msg, len, all, world_size, 0);
      strncat(msg, ")", len - strlen(msg) - 1);
      return 1;
    }
  }
  int first = -1;
  char also[256] = "";
  for (int i = 0; i < all[0].n; i++) {
    int differs = 0;
    for (int r = 1; r < world_size && !differs; r++)
      differs = strcmp(all[r].name[i], all[0].name[i]) != 0 || strcmp(all[r].value[i], all[0].value[i]) != 0;
    if (!differs) continue;
    if (first < 0) {
      first = i;
    } else if (strlen(also) + strlen(all[0].name[i]) + 3 < sizeof also) {
      strcat(also, also[0] ? ", " : "");
      strcat(also, all[0].name[i]);
    }
  }
  if (first < 0) return 0;
  snprintf(msg, len, "the ranks disagree on %s (", all[0].name[first]);
  describe(msg, len, all, world_size, first);
  size_t used = strlen(msg);
  snprintf(msg + used, len - used, ")%s%s: start every rank with the same settings, model and data",
           also[0] ? "; also on " : "", also);
  return 1;
}

void agree_check(const Agreement *a, ProcessGroup *pg, const Ctx *c) {
  int W = pg->world_size;
  if (W <= 1) return;        // alone (or, in an unfinished exercise, no process group): nothing to compare
  size_t bytes = sizeof *a;  // a multiple of 4: gathered as ints
  _Static_assert(sizeof(Agreement) % 4 == 0, "Agreement is gathered as int32");
  Agreement *all = mallocCheck(bytes * (size_t)W);
  void *send = dev_alloc(c, bytes), *recv = dev_alloc(c, bytes * (size_t)W);
  dev_upload(c, send, a, bytes);
  dist_all_gather(pg, send, recv, bytes / 4, DIST_INT);
  dev_download(c, all, recv, bytes * (size_t)W);
  dev_free(c, recv);
  dev_free(c, send);
  if (dist_failure(pg)) {  // a recoverable group failed meanwhile: nothing gathered to compare (its caller
    free(all);             // recovers, and checks again on the next group)
    return;
  }
  char msg[1024];
  int differ = agree_compare(msg, sizeof msg, all, W);
  free(all);
  if (differ) die(1, "%s", msg);
}
