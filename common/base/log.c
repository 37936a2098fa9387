// log.c: rank-aware printing and the clock of log.h.
#define _POSIX_C_SOURCE 200809L
#include "log.h"

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

double log_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
