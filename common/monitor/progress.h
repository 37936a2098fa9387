/**
 * @file
 * @brief The progress line a trainer prints every `--log_interval` steps (rank 0 only):
 * `epoch E/EE  step S/T  loss L  N samples/s  M ms/step  ETA mm:ss  G GFLOP/s  MFU P%`.
 *
 * samples/s and ms/step are measured over the steps since the previous line; the ETA extrapolates
 * the average since progress_start() (steps done before a resume excluded). GFLOP/s is this
 * process's GEMM FLOPs since the previous line (flops.h: 6·B·Σ in·out a step of B samples per rank)
 * over the time since that line; it is left out when no FLOPs were counted. MFU is that rate over the
 * device's peak (flops_peak()), left out when the peak is unknown (on the CPU without
 * `DDP_CPU_PEAK_GFLOPS`).
 */
#ifndef DDP_PROGRESS_H
#define DDP_PROGRESS_H

#ifdef __cplusplus
extern "C" {
#endif

/** @brief State of the progress line: start time and totals for the rates and the ETA. */
typedef struct Progress {
  double t_start;           ///< when progress_start() was called (log_clock())
  double t_last;            ///< time of the last progress line
  long long total;          ///< optimizer steps the run will take
  long long done_at_start;  ///< steps already done when the run started (resume)
  long long last_step;      ///< the step of the last progress line (done_at_start before the first)
  long long samples;        ///< samples processed since the last line
  double flops_last;        ///< flops_total() at the last progress line
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
 * @brief Prints (rank 0) `epoch E/EE  step S/T  loss L  N samples/s  M ms/step  ETA mm:ss`, then
 * `  G GFLOP/s` when FLOPs were counted and `  MFU P%` when the peak is known: the samples/s, the
 * mean milliseconds per optimizer step and the GEMM rate since the previous line. Resets the counts.
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
