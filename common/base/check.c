// check.c: the error-reporting and job-ending half of check.h (CUDA/NCCL/MPI impls live beside
// their backends, so this file needs none of their headers).
#define _POSIX_C_SOURCE 200809L
#include "check.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int g_rank = 0;
static void (*g_abort)(int status) = NULL;
static atomic_bool g_ending;  // an abort is under way (check_set_ending)

void check_set_rank(int rank) { g_rank = rank; }
int check_rank(void) { return g_rank; }
void check_set_abort(void (*hook)(int status)) { g_abort = hook; }

static void (*g_last_words)(const char *kind) = NULL;
static atomic_flag g_said = ATOMIC_FLAG_INIT;

void check_set_last_words(void (*fn)(const char *kind)) { g_last_words = fn; }

void check_set_ending(void) { atomic_store(&g_ending, true); }

void check_stop_if_ending(void) {
  if (!atomic_load(&g_ending)) return;
  for (;;) pause();  // the thread that is aborting ends the process (_exit, MPI_Abort)
}

// kind: the failed check's ("MPI", "NCCL", ...), for the last words; NULL for die() (a refusal, not
// a failure: nothing to record).
_Noreturn static void end_job(int status, const char *kind) {
  check_set_ending();
  fflush(stdout);
  fflush(stderr);
  if (kind && g_last_words && !atomic_flag_test_and_set(&g_said)) g_last_words(kind);
  if (g_abort) g_abort(status);  // never returns: aborts every rank
  exit(status);
}

void check_fail(const char *kind, const char *file, int line, const char *fmt, ...) {
  const char *base = strrchr(file, '/');
  fprintf(stderr, "[%s ERROR] rank %d at %s:%d: ", kind, g_rank, base ? base + 1 : file, line);
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  end_job(1, kind);
}

void die(int status, const char *fmt, ...) {
  // One write of the whole line, so that the lines of several ranks do not interleave.
  char prefix[32] = "error: ";
  if (g_rank != 0) snprintf(prefix, sizeof prefix, "error: [rank %d] ", g_rank);
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  int len = vsnprintf(NULL, 0, fmt, ap);
  va_end(ap);
  char *text = len >= 0 ? malloc((size_t)len + 1) : NULL;
  if (text) vsnprintf(text, (size_t)len + 1, fmt, again);
  va_end(again);
  fprintf(stderr, "%s%s\n", prefix, text ? text : fmt);
  free(text);
  end_job(status, NULL);
}

void *malloc_check_impl(size_t bytes, const char *file, int line) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p) check_fail("ALLOC", file, line, "out of host memory allocating %zu bytes", bytes);
  memset(p, 0, bytes);  // touch every page now, not inside the training loop
  return p;
}

FILE *fopen_check_impl(const char *path, const char *mode, const char *file, int line) {
  FILE *f = fopen(path, mode);
  if (!f)
    check_fail("IO", file, line, "cannot open '%s' (mode %s): %s; check the path and permissions", path, mode,
               strerror(errno));
  return f;
}
