// data_cache.c: generated datasets kept on disk between runs, in the folder DDP_SYNTHETIC_CACHE names.
//
// Generating the synthetic dataset is most of a short CPU run's work (every rank draws 2 normals
// per feature: 10,000 x 784 of them, with a log and a cosine each): measured on the 2-core build VM,
// half the CPU time of a 2-epoch run on 2,048 samples. The test suite starts some 3,000 such
// processes on a handful of datasets, so CTest sets DDP_SYNTHETIC_CACHE (tests/CMakeLists.txt); a
// learner's runs generate as before. The key names everything the data depends on, the generator's
// source included (data.c's caller: DDP_SYNTHETIC_SOURCE, a hash of data.c and rng.c made at build
// time), so a changed generator never reads an old file. A file holds a header (magic, count, CRC-32)
// and the floats in host order; its CRC-32 is checked on every read.
#define _POSIX_C_SOURCE 200809L  // mkdir(), rename()

#include "data_cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <libdeflate.h>

#define CACHE_MAGIC "DDPSYN1"  // with its NUL: 8 bytes

typedef struct {
  char magic[8];
  uint64_t count;
  uint32_t crc;
  uint32_t pad;
} CacheHeader;

// The file of @p key in DDP_SYNTHETIC_CACHE; returns the folder, or NULL when the variable is unset
// or the path too long.
static const char *cache_path(char *out, size_t len, const char *key) {
  const char *dir = getenv("DDP_SYNTHETIC_CACHE");
  if (!dir || !*dir || (size_t)snprintf(out, len, "%s/%s.bin", dir, key) >= len) return NULL;
  return dir;
}

bool data_cache_load(const char *key, float *x, size_t count, uint32_t *crc) {
  char path[4096];
  if (!cache_path(path, sizeof path, key)) return false;
  FILE *f = fopen(path, "rb");
  if (!f) return false;
  CacheHeader h;
  bool ok = fread(&h, sizeof h, 1, f) == 1 && memcmp(h.magic, CACHE_MAGIC, sizeof h.magic) == 0 &&
            h.count == count && fread(x, sizeof *x, count, f) == count &&
            libdeflate_crc32(0, x, count * sizeof *x) == h.crc;
  fclose(f);
  if (ok) *crc = h.crc;
  return ok;
}

void data_cache_store(const char *key, const float *x, size_t count, uint32_t crc) {
  char path[4096], tmp[4160];
  const char *dir = cache_path(path, sizeof path, key);
  if (!dir) return;
  (void)mkdir(dir, 0755);  // one level; an existing folder is fine
  snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) return;
  CacheHeader h = {.count = count, .crc = crc};
  memcpy(h.magic, CACHE_MAGIC, sizeof h.magic);
  bool ok = fwrite(&h, sizeof h, 1, f) == 1 && fwrite(x, sizeof *x, count, f) == count;
  if (fclose(f) != 0) ok = false;
  if (!ok || rename(tmp, path) != 0) unlink(tmp);
}
