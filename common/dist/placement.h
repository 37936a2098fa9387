/**
 * @file
 * @brief Where the ranks run: each rank's host name and local rank, gathered once the process group
 * is connected and printed by rank 0 as one line, e.g.
 * `ranks: nodea 0-1 (local 0-1), nodeb 2-3 (local 0-1)`.
 *
 * Only rank 0 prints (the output contract), so without this line a multi-node job would never show
 * which node a rank landed on. Consecutive ranks on the same host make one group, so the line stays
 * one line however many ranks there are (it ends with "..." past PLACEMENT_LINE bytes).
 */
#ifndef DDP_PLACEMENT_H
#define DDP_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>

#include "dist.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Host name bytes kept per rank, with the NUL (a longer name is cut). */
#define PLACEMENT_HOST 32
/** @brief Longest placement line, with its NUL. */
#define PLACEMENT_LINE 1024

/** @brief One rank's place, as gathered (a multiple of 4 bytes: all-gathered as int32). */
typedef struct Placement {
  char host[PLACEMENT_HOST];  ///< gethostname(), NUL-terminated, cut to PLACEMENT_HOST - 1 bytes
  int32_t local_rank;         ///< rank among the processes on its node
} Placement;

/**
 * @brief Fills @p p with this process's host name (cut to PLACEMENT_HOST - 1 bytes; "?" when
 * gethostname fails) and @p local_rank.
 * @param[out] p          this rank's place.
 * @param[in] local_rank  the process group's local rank.
 */
void placement_self(Placement *p, int local_rank);

/**
 * @brief Formats the places of ranks 0 .. @p W - 1 as `ranks: HOST R0-R1 (local L0-L1), ...`: one
 * group per run of consecutive ranks on the same host, its local ranks as runs (`0-1`, or `1,0`
 * when out of order). A line longer than @p size ends with "...".
 * @param[out] out  the line, NUL-terminated, without a newline.
 * @param[in] size  bytes of @p out (at least 8).
 * @param[in] all   host, (W): rank r's place at all[r].
 * @param[in] W     number of ranks (at least 1).
 */
void placement_format(char *out, size_t size, const Placement *all, int W);

/**
 * @brief All-gathers every rank's Placement over @p pg and prints placement_format()'s line on rank
 * 0 (log0). Nothing (and no collective) when the world size is 1. Every rank must call it.
 * @param[in] pg a connected process group (dist_connect() calls this at its end).
 */
void placement_log(ProcessGroup *pg);

#ifdef __cplusplus
}
#endif
#endif
