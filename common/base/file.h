/**
 * @file
 * @brief Files and folders: what a path is, for the messages of the readers that accept only regular
 * files (the IDX reader, the checkpoint reader: a FIFO would block every rank and /dev/zero would be
 * read until memory runs out, so both refuse anything else and say what it was); and the two folder
 * operations of the writers that must survive a crash (the checkpoint, PowerSGD's state): create a
 * folder with its parents, and make a rename in it durable.
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

/**
 * @brief `mkdir -p`: creates @p dir and any missing parents.
 * @param[in] dir the folder.
 * @return 0 when @p dir exists at the end, a folder or not (the caller says which it needs, as
 * ckpt_dir_check does); -1 with errno set (ENAMETOOLONG beyond 4095 bytes, ENOENT for an empty path,
 * ENOTDIR where a parent on the way is not a folder).
 */
int file_make_dirs(const char *dir);

/**
 * @brief Makes the renames and creations in @p dir durable: fsync of the folder itself, not only of
 * the files (a rename is an entry of the folder).
 * @param[in] dir the folder.
 * @return 0 on success; -1 with errno set (EINVAL: the file system cannot fsync folders at all).
 */
int file_sync_dir(const char *dir);

#ifdef __cplusplus
}
#endif
#endif
