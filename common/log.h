/**
 * @file
 * @brief Rank-aware console output and progress lines.
 *
 * log0() prints on rank 0 only (the rank set with check_set_rank()), so a trainer's output does not
 * repeat once per process; errors go through check.h and are printed by any rank.
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

/**
 * @brief Ends the job when a step's loss is NaN or infinite: a diverged run must stop before it
 * saves. Prints `error: step N: the loss is nan: training diverged (try a smaller --lr); no
 * checkpoint was written for this epoch` (or `inf`, `-inf`) and exits with status 1, through the
 * abort hook once a process group exists (check.h's die()), so every rank ends. Returns when the
 * loss is finite. Call it with the loss every rank agrees on (the all-reduced one), so that all
 * ranks stop at the same step.
 * @param[in] loss the step's loss.
 * @param[in] step the global optimizer step it belongs to (1-based, as logged).
 */
void loss_check_finite(float loss, long long step);

/** @brief Monotonic wall-clock time in seconds. */
double now_seconds(void);

/** @brief State of the progress line: start time and totals for the samples/s and ETA estimates. */
typedef struct Progress {
  double t_start;      ///< when progress_start() was called
  double t_last;       ///< time of the last progress line
  long long total;     ///< optimizer steps the run will take
  long long done_at_start;  ///< steps already done when the run started (resume)
  long long samples;   ///< samples processed since the last line
} Progress;

/**
 * @brief Starts timing.
 * @param[out] p        state.
 * @param[in] total     total optimizer steps of the run (for the ETA).
 * @param[in] done      steps already done (after a resume).
 */
void progress_start(Progress *p, long long total, long long done);

/**
 * @brief Counts samples processed (by this process, or globally: the caller decides).
 * @param[in,out] p state.
 * @param[in] n     samples.
 */
void progress_add(Progress *p, long long n);

/**
 * @brief Prints (rank 0) `epoch E/EE  step S/T  loss L  N samples/s  ETA mm:ss` and resets the sample
 * count.
 * @param[in,out] p  state.
 * @param[in] epoch  current epoch (1-based for display).
 * @param[in] epochs total epochs.
 * @param[in] step   global optimizer step just completed.
 * @param[in] loss   loss to show.
 * @return the samples/s since the previous line.
 */
double progress_print(Progress *p, int epoch, int epochs, long long step, float loss);

#ifdef __cplusplus
}
#endif
#endif
