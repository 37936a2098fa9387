// fuzz_util.h: helpers shared by the fuzz targets: write a fuzz input to a temporary file, because
// the readers under test (dataset_load_idx, ckpt_load) take paths.
#ifndef DDP_FUZZ_UTIL_H
#define DDP_FUZZ_UTIL_H

#include <stddef.h>
#include <stdint.h>

/** @brief Entry point of every target (libFuzzer's signature; replay_main.c calls it without libFuzzer). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/**
 * @brief Path of temporary file @p slot (0 or 1) of this process, in a private directory under
 * $TMPDIR (default /tmp) that is removed at exit.
 */
const char *fuzz_tmp_path(int slot);

/** @brief Writes @p size bytes to @p path (truncating); aborts on I/O errors, which are not findings. */
void fuzz_write_file(const char *path, const uint8_t *data, size_t size);

#endif
