// replay_main.c: runs a fuzz target's LLVMFuzzerTestOneInput on files, without libFuzzer, so that a
// plain gcc build can replay the committed corpus (and any crash file) in CTest.
//
// Usage: fuzz_replay_<target> FILE_OR_DIR...   (directories: every regular file in them, sorted)
//
// Like libFuzzer's -rss_limit_mb, the address space is capped (2 GiB, except under AddressSanitizer,
// which reserves terabytes of shadow), so an input that makes a reader allocate gigabytes fails here
// (mallocCheck ends the process) instead of passing slowly or swapping the machine.
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "fuzz_util.h"

#if defined(__SANITIZE_ADDRESS__)
#define REPLAY_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define REPLAY_ASAN 1
#endif
#endif

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    return -1;
  }
  size_t cap = 4096, len = 0;
  unsigned char *buf = malloc(cap);
  size_t got;
  while (buf && (got = fread(buf + len, 1, cap - len, f)) > 0) {
    len += got;
    if (len == cap) {
      unsigned char *bigger = realloc(buf, cap *= 2);
      if (!bigger) free(buf);
      buf = bigger;
    }
  }
  fclose(f);
  if (!buf) return -1;
  LLVMFuzzerTestOneInput(buf, len);
  free(buf);
  return 0;
}

static int cmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int main(int argc, char **argv) {
  int files = 0, bad = 0;
#ifndef REPLAY_ASAN
  struct rlimit cap = {(rlim_t)2 << 30, (rlim_t)2 << 30};
  if (setrlimit(RLIMIT_AS, &cap) != 0) perror("setrlimit");
#endif
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      perror(argv[i]);
      return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
      bad |= run_file(argv[i]) != 0;
      files++;
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d) {
      perror(argv[i]);
      return 1;
    }
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
      if (e->d_name[0] == '.') continue;
      char **more = realloc(names, (n + 1) * sizeof *names);
      if (!more) return 1;
      names = more;
      size_t k = strlen(argv[i]) + strlen(e->d_name) + 2;
      names[n] = malloc(k);
      snprintf(names[n++], k, "%s/%s", argv[i], e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp);
    for (size_t j = 0; j < n; j++) {
      if (stat(names[j], &st) == 0 && S_ISREG(st.st_mode)) {
        bad |= run_file(names[j]) != 0;
        files++;
      }
      free(names[j]);
    }
    free(names);
  }
  printf("replayed %d inputs%s\n", files, bad ? " (some could not be read)" : "");
  return files == 0 || bad;
}
