// data_cache.h: generated datasets kept on disk between runs (only when DDP_SYNTHETIC_CACHE is set).
#ifndef DATA_CACHE_H
#define DATA_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Reads the @p count floats cached under @p key into @p x, and their CRC-32 into @p crc.
 *
 * Only where the environment variable DDP_SYNTHETIC_CACHE names a folder (the test suite sets one:
 * the same synthetic datasets are generated there thousands of times). The file's header must match
 * @p count, and its floats their recorded CRC-32 (a torn or corrupt file is a miss).
 * @return true when @p x was filled; false on any miss (then @p x may hold garbage).
 */
bool data_cache_load(const char *key, float *x, size_t count, uint32_t *crc);

/**
 * @brief Caches @p count floats under @p key (with their CRC-32 @p crc), if DDP_SYNTHETIC_CACHE is set.
 *
 * Best effort: written to a temporary file, then renamed, so that concurrent writers (every rank
 * generates the same data) and readers never see a partial file; any failure leaves no file.
 */
void data_cache_store(const char *key, const float *x, size_t count, uint32_t crc);

#ifdef __cplusplus
}
#endif

#endif  // DATA_CACHE_H
