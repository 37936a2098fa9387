// fuzz_idx.c: fuzz target for the IDX reader, dataset_load_idx() (common/data/data.c).
//
// Input layout: byte 0 = --dataset_size limit (0 = all), bytes 1..4 = length L of the image file
// (little-endian u32, clamped to what is left), then L bytes of image file, then the label file.
// Either file may be gzip-compressed (detected from the content, as for real data), with one member
// or several: the reader's one gzip path (libdeflate, member by member, the header CRC checked).
#include <stdint.h>
#include <stdio.h>

#include "data.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 5) return 0;
  int limit = data[0];
  size_t len = (size_t)data[1] | (size_t)data[2] << 8 | (size_t)data[3] << 16 | (size_t)data[4] << 24;
  data += 5;
  size -= 5;
  if (len > size) len = size;
  const char *images = fuzz_tmp_path(0), *labels = fuzz_tmp_path(1);
  fuzz_write_file(images, data, len);
  fuzz_write_file(labels, data + len, size - len);
  Dataset ds = {0};
  char err[1024];
  if (dataset_load_idx(&ds, images, labels, limit, 0.2860f, 0.3530f, err, sizeof err) == 0) {
    // A success must describe what it returned: every label a class, every row readable.
    if (ds.n < 1 || ds.dim < 1 || ds.n_classes != 10) __builtin_trap();
    for (int i = 0; i < ds.n; i++)
      if (ds.y[i] < 0 || ds.y[i] >= ds.n_classes) __builtin_trap();
    if (!ds.pixels || ds.x) __builtin_trap();
    volatile uint8_t sink = ds.pixels[(size_t)ds.n * ds.dim - 1];
    (void)sink;
    dataset_free(&ds);
  } else if (err[0] == '\0') {
    __builtin_trap();  // every failure says why
  }
  return 0;
}
