/**
 * @file
 * @brief The metrics file: JSON Lines that tests and plots read (`--metrics PATH`).
 *
 * Each rank writes its own file, PATH with `{rank}` replaced by its rank. Objects, one per line:
 * - per optimizer step: `{"type":"step","step":S,"epoch":E,"loss":L,"time":T}`, T the seconds since
 *   metrics_open() (for benchmarks: steady-state step times without a timer in the trainer), with
 *   `"grad_norm":N` after the loss when the step clipped its gradient (clip.h: the norm before
 *   clipping; metrics_step_norm());
 * - per epoch: `{"type":"epoch","epoch":E,"train_loss":L,"test_acc":A,"samples_per_s":R,"gflops":G,
 *   "mfu":U,"allreduce_bytes":Y}` (test_acc omitted when not evaluated; G: this process's GEMM GFLOP/s
 *   since the previous epoch object or metrics_open(), flops.h, omitted when none were counted; U: G
 *   over the device's peak, flops_peak(), in [0, 1], omitted when the peak is unknown; Y: the bytes
 *   this rank handed to the gradient collectives in the epoch, only from a trainer that counts them,
 *   metrics_epoch_bytes());
 * - last: `{"type":"final","world_size":W,"steps":S,"param_digest":"<16 hex digits>","peak_rss_kib":K,
 *   "attempt":A,"start_step":S0}` (K: the process's peak resident memory so far, in KiB, from getrusage;
 *   -1 if unknown; A: the attempt, rankfile_attempt(); S0: the step this process started from, 0 for a
 *   fresh run, the checkpoint's step after a resume: this process trained steps S0 + 1 to S).
 * Floats are printed with 9 significant digits, enough to round-trip a float32 exactly.
 *
 * Restarts: a restarted attempt (rankfile_attempt() > 0: scripts/restart.sh, torchrun `--max-restarts`)
 * runs the same command line, so it appends to the file instead of truncating it, and first writes
 * `{"type":"attempt","attempt":A}`. The file then holds every attempt in turn: the steps an attempt
 * trained after its last snapshot appear again, trained anew, after the next attempt's record (keep
 * the last record of each step for one per step), and `time` starts again from 0 at each attempt. The
 * first attempt (0, or no restart count) creates the file anew, as a run started by hand does, with
 * `--resume` too: give a resumed run by hand a path of its own to keep the earlier file.
 */
#ifndef DDP_METRICS_H
#define DDP_METRICS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief An open metrics file (or a disabled one). */
typedef struct Metrics {
  FILE *f;             ///< output stream, NULL when disabled
  double t0;           ///< monotonic time of metrics_open(), seconds
  double t_epoch;      ///< time of the last epoch object (t0 before the first)
  double flops_epoch;  ///< flops_total() at that time
  int attempt;         ///< rankfile_attempt() at metrics_open()
  long long start;     ///< the step before the first step object (-1 before it): the final's start_step
  long long bytes;     ///< the next epoch object's allreduce_bytes (-1: none)
} Metrics;

/**
 * @brief Opens the metrics file for @p rank; disabled when @p path_template is NULL. A restarted attempt
 * appends (and writes its attempt object), the first one creates or truncates. Ends the job when
 * the file cannot be created, or when @p world_size > 1 and the template has no `{rank}` (see
 * rankfile_open()).
 * @param[out] m            the metrics file.
 * @param[in] path_template path, `{rank}` replaced by @p rank.
 * @param[in] rank          this process's rank.
 * @param[in] world_size    number of ranks.
 */
void metrics_open(Metrics *m, const char *path_template, int rank, int world_size);

/** @brief Writes a step object. */
void metrics_step(Metrics *m, long long step, int epoch, float loss);

/**
 * @brief Writes a step object with the step's gradient norm (`grad_norm`, after the loss).
 * @param[in] m         metrics file.
 * @param[in] step      the global optimizer step (1-based).
 * @param[in] epoch     its epoch (0-based).
 * @param[in] loss      its loss.
 * @param[in] grad_norm host, (1): the norm before clipping, or NULL: no `grad_norm` (metrics_step()).
 */
void metrics_step_norm(Metrics *m, long long step, int epoch, float loss, const float *grad_norm);

/**
 * @brief Sets the next epoch object's `allreduce_bytes`: the bytes this rank handed to the gradient
 * collectives in that epoch (a trainer that does not call it writes none).
 * @param[in] m     metrics file.
 * @param[in] bytes the epoch's bytes.
 */
void metrics_epoch_bytes(Metrics *m, long long bytes);

/**
 * @brief Writes an epoch object.
 * @param[in] m             metrics file.
 * @param[in] epoch         epoch index (0-based).
 * @param[in] train_loss    mean training loss over the epoch.
 * @param[in] test_acc      test accuracy in [0, 1], or negative when not evaluated.
 * @param[in] samples_per_s training throughput over the epoch.
 * @param[in] partial       true when `--max_steps` stopped the epoch before its end: the object gets
 *                          `"partial":true`, and a run resumed from that stop writes a second object
 *                          for the same epoch (its own steps' loss and throughput).
 */
void metrics_epoch(Metrics *m, int epoch, float train_loss, double test_acc, double samples_per_s,
                   bool partial);

/**
 * @brief Writes a straggler object (`--straggler N`, straggler.h): steps @p first to @p last, each
 * rank's median data, compute and wait time and step (milliseconds; arrays indexed by rank), the rank
 * named (`late_rank`, null when none) and how late the latest rank arrived (`late_ms`).
 * @param[in] m         metrics file.
 * @param[in] first     the window's first step.
 * @param[in] last      its last step.
 * @param[in] world     ranks.
 * @param[in] fig       host, (world, 4): data, compute, wait and step of each rank, ms.
 * @param[in] late_rank the rank named, or -1.
 * @param[in] late_ms   the latest rank's arrival after the median of the others, ms.
 */
void metrics_straggler(Metrics *m, long long first, long long last, int world, const float *fig,
                       int late_rank, float late_ms);

/**
 * @brief Writes the final object: the world size, steps, the parameter digest, the peak memory, the
 * attempt and the step this process started from (the first step object's step - 1; @p steps when it
 * wrote none), then closes the file (metrics_close()): nothing comes after the final object.
 */
void metrics_final(Metrics *m, int world_size, long long steps, uint64_t param_digest);

/** @brief Closes the file (flushing it); does nothing once it is closed (or when disabled). */
void metrics_close(Metrics *m);

#ifdef __cplusplus
}
#endif
#endif
