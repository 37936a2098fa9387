// rankfile.c: the per-rank output files of rankfile.h.
#include "rankfile.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

int rankfile_path(char *out, size_t out_len, const char *tmpl, int rank) {
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

FILE *rankfile_open(const char *flag, const char *path_template, int rank, int world_size) {
  return rankfile_open_mode(flag, path_template, rank, world_size, "w");
}

FILE *rankfile_open_mode(const char *flag, const char *path_template, int rank, int world_size,
                         const char *mode) {
  // Ranks sharing one file would truncate and overwrite each other's lines (a shared trace was
  // invalid JSON): refuse, rather than guess where the rank should go in the name.
  if (world_size > 1 && !strstr(path_template, "{rank}")) {
    const char *base = strrchr(path_template, '/'), *dot = strrchr(base ? base : path_template, '.');
    int stem = dot && dot != (base ? base + 1 : path_template) ? (int)(dot - path_template)
                                                               : (int)strlen(path_template);
    die(2,
        "%s %s: at %d ranks the path must contain {rank} (e.g. %.*s_{rank}%s), or every rank "
        "would write the same file",
        flag, path_template, world_size, stem, path_template, path_template + stem);
  }
  char path[4096];
  if (rankfile_path(path, sizeof path, path_template, rank) != 0)
    die(1, "%s: path '%s' is too long", flag, path_template);
  return fopenCheck(path, mode);
}

int rankfile_attempt(void) {
  const char *v = getenv("TORCHELASTIC_RESTART_COUNT");
  if (!v || !*v) return 0;
  char *end;
  errno = 0;
  long n = strtol(v, &end, 10);
  if (*end || errno || n < 0 || n > INT_MAX || !isdigit((unsigned char)*v))
    die(2, "TORCHELASTIC_RESTART_COUNT='%s' is not a restart count (0, 1, 2, ...)", v);
  return (int)n;
}
