// fuzz_ckpt.c: fuzz target for the checkpoint reader, ckpt_load() (common/ckpt/ckpt.c).
//
// Input layout: byte 0 holds flags, the rest is the file. Flag bit 0: recompute the trailing CRC-32
// before writing the file, so that mutations reach the checks after the CRC (the shape comparison
// and the float decoding) instead of all stopping at "CRC mismatch". Flag bit 1: expect another
// shape than the file's (a --hidden mismatch).
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <libdeflate.h>

#include "ckpt.h"
#include "fuzz_util.h"

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  uint8_t flags = data[0];
  data++;
  size--;
  uint8_t *file = malloc(size ? size : 1);
  if (!file) return 0;
  memcpy(file, data, size);
  if ((flags & 1) && size >= 4) {
    uint32_t crc = libdeflate_crc32(0, file, size - 4);
    for (int i = 0; i < 4; i++) file[size - 4 + i] = (uint8_t)(crc >> (8 * i));
  }
  const char *path = fuzz_tmp_path(0);
  fuzz_write_file(path, file, size);

  // The caller's model: the file's own shape when the file is big enough to hold it (as when a run
  // resumes its own checkpoint), else a small 3-4-2 model. The output buffers are sized for it, as
  // a trainer sizes them for its model.
  CkptMeta expect = {0};
  expect.n_layers = 2;
  expect.sizes[0] = 3;
  expect.sizes[1] = 4;
  expect.sizes[2] = 2;
  if (size >= 56) {
    uint32_t L = le32(file + 52);
    if (L >= 1 && L <= MLP_MAX_LAYERS && size >= 56 + 4 * ((size_t)L + 1)) {
      CkptMeta m = {0};
      m.n_layers = (int)L;
      for (uint32_t l = 0; l <= L; l++) {
        uint32_t s = le32(file + 56 + 4 * l);
        m.sizes[l] = s > 0 && s <= (1u << 24) ? (int)s : 0;
      }
      size_t n = ckpt_param_count(&m);
      if (n > 0 && n <= size / 8) expect = m;  // buffers no bigger than the file itself
    }
  }
  if (flags & 2) expect.sizes[expect.n_layers] += 1;
  size_t n = ckpt_param_count(&expect);
  float *params = malloc(n * sizeof *params), *opt = malloc(n * sizeof *opt);
  CkptMeta meta;
  char err[512] = "";
  if (params && opt) {
    int rc = ckpt_load(path, &expect, &meta, params, opt, err, sizeof err);
    if (rc == 0) {
      // Success means the shape is the caller's.
      if (meta.n_layers != expect.n_layers) __builtin_trap();
      for (int l = 0; l <= meta.n_layers; l++)
        if (meta.sizes[l] != expect.sizes[l]) __builtin_trap();
    } else if (err[0] == '\0') {
      __builtin_trap();  // every failure says why
    }
  }
  free(opt);
  free(params);
  free(file);
  return 0;
}
