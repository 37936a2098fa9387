/**
 * @file
 * @brief The straggler report (`--straggler N`, steps 06–09): which rank makes the others wait.
 *
 * Step times cannot show a straggler: the gradient all-reduce inside backward is a barrier, so every
 * rank's step lasts as long as the slowest one's. What shows it is when each rank *arrives* at its
 * first gradient collective. Each step, every rank notes its data time (loader_batch()), its compute
 * time up to that arrival, and its wait in collectives (dist_wait() and the blocking ones), all from the
 * process group's lap (dist_lap()). Every N steps one small all-gather brings each rank's medians over those
 * N steps to every rank, and rank 0 prints one line, e.g.
 * `straggler, steps 191-200: rank 1 arrives 50.2 ms after the others (data 0.1 + compute 57.0 ms,
 * against 6.8 ms); they wait 49.9 ms per step for it, 78 % of the 64.3 ms step`, or that no rank
 * arrives late, and writes the figures to its metrics file (a `straggler` object). A rank is named
 * when the others lose more than STRAGGLER_SHARE of the median step waiting for it: a threshold on
 * what the lateness costs, which grows with the step when a loaded machine slows every rank alike.
 * On a GPU the times are the host's (when the work was queued), not the device's.
 */
#ifndef DDP_STRAGGLER_H
#define DDP_STRAGGLER_H

#include <stdbool.h>

#include "device.h"
#include "dist.h"
#include "loader.h"
#include "metrics.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief The largest N of `--straggler N`. */
#define STRAGGLER_MAX_EVERY 100000
/** @brief A rank is named when the others wait for it more than this share of the median step. */
#define STRAGGLER_SHARE 0.25
/** @brief Figures per rank and report: data, compute to arrival, wait, step (milliseconds). */
#define STRAGGLER_FIGS 4

/** @brief One rank's figures, step by step, and what a report gathers. */
typedef struct Straggler {
  int every;           ///< `--straggler N`: a report every N steps; 0: none
  ProcessGroup *pg;    ///< the process group, whose lap (dist_lap()) gives the times
  const Loader *data;  ///< the training loader: its busy_s is the data time
  Metrics *metrics;    ///< where rank 0 writes each report
  double data_s;       ///< data->busy_s when the lap began
  int n;               ///< steps of the current window so far
  long long first;     ///< the window's first step
  float *steps;        ///< host, (STRAGGLER_FIGS, every): this rank's figures of each step, ms
  float *all;          ///< device, (world_size, STRAGGLER_FIGS): every rank's medians (in place)
  float *host;         ///< host, (world_size, STRAGGLER_FIGS): @ref all, read back
} Straggler;

/**
 * @brief Starts the report (nothing but the lap's clock when @p every is 0).
 * @param[out] s     the report.
 * @param[in] every  `--straggler N`: steps per report, 0 .. STRAGGLER_MAX_EVERY.
 * @param[in] pg     the connected process group (its context holds the gathered figures).
 * @param[in] data   the training loader.
 * @param[in] m      rank 0's metrics file (or a disabled one).
 */
void straggler_init(Straggler *s, int every, ProcessGroup *pg, const Loader *data, Metrics *m);

/**
 * @brief Ends a step: notes this rank's figures and, every `every` steps, gathers every rank's and
 * has rank 0 report. Called by every rank at the same steps, after the step's loss all-reduce.
 * @param[in,out] s  the report.
 * @param[in] step   the optimizer step just done (1-based).
 */
void straggler_step(Straggler *s, long long step);

/**
 * @brief The verdict of one report, from every rank's figures (what rank 0 prints; a pure function,
 * tested on its own).
 * @param[in] fig       host, (world, STRAGGLER_FIGS): each rank's data, compute, wait and step, ms.
 * @param[in] world     ranks.
 * @param[out] late_ms  how long the latest rank arrives after the median of the others.
 * @param[out] wait_ms  the median wait of the others.
 * @param[out] step_ms  the median step.
 * @return the rank named (its lateness costs the others more than STRAGGLER_SHARE of the step), or -1.
 */
int straggler_verdict(const float *fig, int world, float *late_ms, float *wait_ms, float *step_ms);

/** @brief Frees the report's buffers. */
void straggler_free(Straggler *s);

#ifdef __cplusplus
}
#endif
#endif
