/**
 * @file
 * @brief What a path is, for the messages of the readers that accept only regular files (the IDX
 * reader, the checkpoint reader): a FIFO would block every rank and /dev/zero would be read until
 * memory runs out, so both refuse anything else and say what it was.
 */
#ifndef DDP_FILE_H
#define DDP_FILE_H

#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Names the kind of a file that is not a regular one.
 * @param[in] mode `st_mode` from stat/fstat.
 * @return "a directory", "a FIFO", "a character device", "a block device", "a socket" or
 *         "not a plain file".
 */
const char *file_kind(mode_t mode);

#ifdef __cplusplus
}
#endif
#endif
