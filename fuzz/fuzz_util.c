// fuzz_util.c: temporary files for the fuzz targets (see fuzz_util.h).
#define _POSIX_C_SOURCE 200809L
#include "fuzz_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[4096];
static char g_path[2][4200];

static void remove_tmp(void) {
  for (int i = 0; i < 2; i++)
    if (g_path[i][0]) unlink(g_path[i]);
  if (g_dir[0]) rmdir(g_dir);
}

const char *fuzz_tmp_path(int slot) {
  if (!g_dir[0]) {
    const char *base = getenv("TMPDIR");
    snprintf(g_dir, sizeof g_dir, "%s/ddp-fuzz-XXXXXX", base && *base ? base : "/tmp");
    if (!mkdtemp(g_dir)) {
      perror("mkdtemp");
      abort();
    }
    for (int i = 0; i < 2; i++) snprintf(g_path[i], sizeof g_path[i], "%s/in%d", g_dir, i);
    atexit(remove_tmp);
  }
  return g_path[slot & 1];
}

void fuzz_write_file(const char *path, const uint8_t *data, size_t size) {
  FILE *f = fopen(path, "wb");
  if (!f || (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0) {
    perror(path);
    abort();
  }
}
