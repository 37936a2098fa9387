/**
 * @file
 * @brief Per-rank output files: a path template whose `{rank}` becomes each rank's number (the
 * `--metrics` and `--trace` files), so that every rank writes a file of its own.
 */
#ifndef DDP_RANKFILE_H
#define DDP_RANKFILE_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Expands every `{rank}` in a path template.
 * @param[out] out     result buffer.
 * @param[in] out_len  size of @p out.
 * @param[in] tmpl     template.
 * @param[in] rank     rank.
 * @return 0, or -1 when the result does not fit.
 */
int rankfile_path(char *out, size_t out_len, const char *tmpl, int rank);

/**
 * @brief Creates (or truncates) the file a per-rank path template names, for writing: the template
 * with `{rank}` expanded. Ends the job with a message naming @p flag when the path is too long or
 * the file cannot be created, and with status 2 when @p world_size > 1 and the template has no
 * `{rank}`: the ranks would all write one file, each truncating and overwriting the others' lines.
 * @param[in] flag          the command-line flag the template came from, e.g. "--metrics".
 * @param[in] path_template the template.
 * @param[in] rank          this process's rank.
 * @param[in] world_size    number of ranks.
 * @return the open file, never NULL.
 */
FILE *rankfile_open(const char *flag, const char *path_template, int rank, int world_size);

/**
 * @brief rankfile_open() with an fopen() mode of the caller's: "w" creates or truncates (as
 * rankfile_open()), "a" creates or appends.
 * @param[in] flag          the command-line flag the template came from, e.g. "--metrics".
 * @param[in] path_template the template.
 * @param[in] rank          this process's rank.
 * @param[in] world_size    number of ranks.
 * @param[in] mode          "w" or "a".
 * @return the open file, never NULL.
 */
FILE *rankfile_open_mode(const char *flag, const char *path_template, int rank, int world_size,
                         const char *mode);

/**
 * @brief Which attempt of a restarted job this process belongs to: `TORCHELASTIC_RESTART_COUNT`, which
 * scripts/restart.sh and torchrun set (0 for the first attempt, then 1, 2, ...); 0 when it is unset.
 * Ends the job (status 2) when it is set to anything but a decimal number.
 * @return the attempt, >= 0.
 */
int rankfile_attempt(void);

#ifdef __cplusplus
}
#endif
#endif
