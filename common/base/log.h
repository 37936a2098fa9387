/**
 * @file
 * @brief Rank-aware console output, and the clock the timings use.
 *
 * log0() prints on rank 0 only (the rank set with check_set_rank()), so a trainer's output does not
 * repeat once per process; errors go through check.h and are printed by any rank. The progress line
 * is progress.h's.
 */
#ifndef DDP_LOG_H
#define DDP_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief printf on rank 0 only, flushed at once (output of several ranks goes through one launcher).
 * @param[in] fmt printf format.
 */
void log0(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/**
 * @brief printf on every rank, prefixed with `[rank R] `.
 * @param[in] fmt printf format.
 */
void log_all(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/** @brief Monotonic wall-clock time in seconds. */
double log_clock(void);

#ifdef __cplusplus
}
#endif
#endif
