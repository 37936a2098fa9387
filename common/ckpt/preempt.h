/**
 * @file
 * @brief Preemption: SIGTERM (or SIGUSR1) makes every rank stop after the same step, at most one step
 * after the one in progress when the signal came.
 *
 * Slurm's `scancel`, a preemption or `--signal` send SIGTERM, then SIGKILL a little later. The handler
 * only sets a flag (a `volatile sig_atomic_t`: nothing else is async-signal-safe, MPI included). At
 * each step boundary the ranks sum their flags in one tiny all-reduce, so that every rank stops after
 * the same step even when only one of them got the signal; a rank that left alone would leave the
 * others waiting in the next collective. The sum is queued on the stream and read one step later (a
 * pinned copy and an event), so the agreement never makes the host wait for the device's queue: the
 * ranks stop after the step that follows the one at which the signal was seen, all of them at the
 * same step, since every rank reads step k's sum at step k + 1. The trainer then writes its checkpoint,
 * passes the barrier after it, and exits with PREEMPT_EXIT_STATUS, which scripts/restart.sh reports as a
 * preemption. With saving off (`--save_interval 0` and `--save_steps 0`: "never") it writes nothing, not
 * even then, since --ckpt_dir may hold another run's checkpoint (preempt_save_due()), says so, and exits
 * with PREEMPT_UNSAVED_EXIT_STATUS instead: nothing claims a checkpoint.
 *
 * mpirun (Open MPI) turns a SIGTERM to itself into SIGTERM to every rank and SIGKILL one second later
 * (`OMPI_MCA_odls_base_sigkill_timeout`); it forwards SIGUSR1 to every rank as it is, with no
 * SIGKILL after it: `kill -USR1 <mpirun>` is the way to preempt an mpirun job from outside.
 *
 * A rank stuck in a collective (a peer died or froze) never reaches a step boundary, so the flag alone
 * would leave it running until the launcher's SIGKILL or the watchdog's --timeout. Two ways end it
 * at once: after the first signal, until the rank passes a step boundary, the watchdog allows any wait
 * only WATCHDOG_SIGNAL_GRACE_S seconds, counted from the signal (watchdog_signal_arrived()); and a second
 * signal, a second or more after the first, ends the process by the signal's default action (a copy of the
 * first, forwarded within milliseconds by srun or torchrun, does not count).
 */
#ifndef DDP_PREEMPT_H
#define DDP_PREEMPT_H

#include <stdbool.h>

#include "device.h"
#include "devmem.h"
#include "dist.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Exit status after a preemption (sysexits.h's EX_TEMPFAIL: the checkpoint is written, try again). */
#define PREEMPT_EXIT_STATUS 75

/**
 * @brief Exit status after a preemption with saving off, when no checkpoint was written: 128 + SIGTERM,
 * what a process that SIGTERM ended reports (every rank, whichever signal came).
 */
#define PREEMPT_UNSAVED_EXIT_STATUS 143

/** @brief The preemption flag's state on this rank. */
typedef struct Preempt {
  int *flag;      ///< device, (1): this rank's flag, summed over the ranks at each step boundary
  int *values;    ///< device, (2): the constants 0 and 1, copied into `flag` on the stream
  int *sum;       ///< pinned host, (1): the last sum, valid once `done` has passed
  DevEvent done;  ///< recorded after the copy of the sum to `sum`
  bool pending;   ///< a sum is on its way to `sum` (read at the next boundary)
  bool stop;      ///< true once the ranks agreed to stop (the same step on every rank)
  bool unsaved;   ///< the stop wrote no checkpoint: saving is off (preempt_save_due())
} Preempt;

/**
 * @brief Installs the SIGTERM and SIGUSR1 handler (it only sets a flag) and allocates the flag's buffer.
 * @param[out] p  the state.
 * @param[in] c   the device context the process group communicates through.
 */
void preempt_init(Preempt *p, const Ctx *c);

/**
 * @brief The step-boundary agreement: a collective (every rank of @p pg calls it after every step).
 * Reads the sum of the ranks' flags queued at the previous boundary (waiting only for that step's
 * work), then queues this boundary's sum. When any rank had got a signal, sets `p->stop` on every rank
 * and prints (rank 0) `preempted: SIGTERM or SIGUSR1 on R of W ranks; stopping after step S`.
 * @param[in,out] p  the state.
 * @param[in] pg     the connected process group.
 * @param[in] c      its device context.
 * @param[in] step   the step just finished (for the message).
 * @return `p->stop`.
 */
bool preempt_agree(Preempt *p, ProcessGroup *pg, const Ctx *c, long long step);

/**
 * @brief Whether the agreed stop is to write the checkpoint now: true after a stop when saving is on
 * (`--save_interval` or `--save_steps` > 0). With both 0 (saving off), false: it prints (rank 0, once)
 * `preempted: no checkpoint written: --save_interval and --save_steps are 0 (saving is off); exit
 * status 143`, and preempt_exit_status() becomes PREEMPT_UNSAVED_EXIT_STATUS. False before a stop.
 * @param[in,out] p the state.
 * @param[in] save_interval `--save_interval`.
 * @param[in] save_steps    `--save_steps`.
 * @return true when the trainer must save because of the preemption.
 */
bool preempt_save_due(Preempt *p, int save_interval, int save_steps);

/**
 * @brief The process's exit status: PREEMPT_EXIT_STATUS after an agreed stop, PREEMPT_UNSAVED_EXIT_STATUS
 * after one that wrote no checkpoint (preempt_save_due()), else 0.
 * @param[in] p the state.
 */
int preempt_exit_status(const Preempt *p);

/**
 * @brief Frees the flag's buffers (the handler stays: a late signal still only sets the flag).
 * @param[in,out] p  the state.
 * @param[in] c      the context it was allocated on.
 */
void preempt_free(Preempt *p, const Ctx *c);

#ifdef __cplusplus
}
#endif
#endif
