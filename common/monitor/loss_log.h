/**
 * @file
 * @brief The per-step loss, on its way from the device to the metrics file and the progress line
 * (what `loss.item()` plus a logger do in a PyTorch loop, without `item()`'s wait).
 *
 * Each step's loss is a float on the device. Reading it at once (dev_download()) would make the host
 * wait for the device to finish the step before it can queue the next one, so the GPU would idle
 * while the host launches work. A LossLog queues the read instead (readback.h) and logs each step
 * when its loss has arrived: a `step` record in the metrics file, a progress line (progress.h)
 * every `--log_interval` steps, and the epoch's running sum. The host runs at most LOSS_LOG_AHEAD steps
 * ahead of the device; loss_log_epoch() waits for the rest at the end of an epoch. On the CPU every
 * loss has arrived as soon as it is queued, so the log is written step by step, as it would be
 * without the queue.
 *
 * A loss that is not finite (NaN or infinity: training diverged) ends the job with a message naming
 * the step, before the epoch's checkpoint is written.
 */
#ifndef DDP_LOSS_LOG_H
#define DDP_LOSS_LOG_H

#include "device.h"
#include "metrics.h"
#include "progress.h"
#include "readback.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Steps whose loss may still be on its way when the next step is queued. */
#define LOSS_LOG_AHEAD 2

/** @brief The loss logger of a training run. */
typedef struct LossLog {
  Readback ring;                 ///< losses in flight, tagged with their step
  Readback norms;                ///< the steps' gradient norms in flight, when norm is set
  const float *norm;             ///< device, (1): each step's gradient norm (NULL: none logged)
  int epoch_of[READBACK_SLOTS];  ///< the epoch of each slot's step (same ring order)
  Metrics *metrics;              ///< where `step` records go
  Progress progress;             ///< the progress line's clock and counts
  int log_interval;              ///< steps between progress lines
  int epochs;                    ///< total epochs, for the progress line
  double sum;                    ///< sum of this epoch's logged losses
  long long count;               ///< this epoch's logged steps
} LossLog;

/**
 * @brief Starts a logger, and the progress line's clock (progress_start()).
 * @param[out] g           the logger.
 * @param[in] c            the context whose stream computes the losses.
 * @param[in] metrics      the metrics file (kept; may be disabled).
 * @param[in] log_interval steps between progress lines (`--log_interval`).
 * @param[in] epochs       total epochs (`--epochs`).
 * @param[in] first_step   optimizer steps already done (> 0 after a resume; they are not timed).
 * @param[in] total_steps  the optimizer step the run will end at (for the ETA).
 * @param[in] norm         device, (1): where each step leaves its gradient norm before loss_log_push()
 *                         (the clipper's, clip.h: `--clip_grad_norm`), logged as the step record's
 *                         `grad_norm`; NULL: none.
 */
void loss_log_init(LossLog *g, const Ctx *c, Metrics *metrics, int log_interval, int epochs,
                   long long first_step, long long total_steps, const float *norm);

/**
 * @brief Counts the step's samples for the progress line's samples/s (progress_add()), queues the
 * copy of its loss, then logs every step whose loss has arrived; waits for the oldest only when more
 * than LOSS_LOG_AHEAD steps are in flight.
 * @param[in,out] g   the logger.
 * @param[in] c       its context.
 * @param[in] loss    device, (1): the step's loss, after the work that computes it was queued.
 * @param[in] step    the global optimizer step it belongs to (1-based).
 * @param[in] epoch   the epoch of that step (0-based).
 * @param[in] samples the step's samples: this process's, or the global batch's (the caller decides).
 */
void loss_log_push(LossLog *g, const Ctx *c, const float *loss, long long step, int epoch, long long samples);

/**
 * @brief Waits for the losses still in flight, logs them, and returns the mean loss of the epoch's
 * steps (0 when it had none); the next epoch starts a new sum.
 * @param[in,out] g the logger.
 * @param[in] c     its context.
 * @return the epoch's mean loss.
 */
double loss_log_epoch(LossLog *g, const Ctx *c);

/**
 * @brief Ends the job when a step's loss is NaN or infinite: a diverged run must stop before it
 * saves. Prints `error: step N: the loss is nan: training diverged (try a smaller --lr); no
 * checkpoint was written for this epoch` (or `inf`, `-inf`) and exits with status 1, through the
 * abort hook once a process group exists (check.h's die()), so every rank ends. Returns when the
 * loss is finite. The logger calls it with every loss it logs (the all-reduced one from step 05 on,
 * which every rank agrees on, so all ranks stop at the same step).
 * @param[in] loss the step's loss.
 * @param[in] step the global optimizer step it belongs to (1-based, as logged).
 */
void loss_log_check_finite(float loss, long long step);

/** @brief Releases the logger (losses still in flight are dropped). */
void loss_log_free(LossLog *g, const Ctx *c);

#ifdef __cplusplus
}
#endif
#endif
