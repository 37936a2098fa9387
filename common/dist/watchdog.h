/**
 * @file
 * @brief A watchdog thread that ends this process when a wait takes too long, so that a job whose
 * peer is stuck, dead or missing (or whose ranks disagree about which collectives to call) fails with
 * a message instead of hanging for ever (the analogue of the `timeout` of `init_process_group` and
 * PyTorch's NCCL watchdog).
 *
 * The process group starts it before it joins the job and stops it only after it has left, so that
 * start-up (`MPI_Init`, `ncclCommInitRank`), every collective and shutdown (`ncclCommDestroy`,
 * `MPI_Finalize`) are covered. Each blocking wait is announced with watchdog_enter() /
 * watchdog_leave() (they nest). Once the communicator exists the process group may register a poll
 * function (NCCL: the communicator's asynchronous error, and whether the last collective has
 * finished on the GPU), a bind function that every thread of this module calls before its first
 * poll or abort (NCCL: `cudaSetDevice` to the rank's GPU, so that no thread makes a context on GPU 0)
 * and an abort function (NCCL: `ncclCommAbort`).
 *
 * The thread wakes up every 100 ms. When a wait has lasted more than the timeout, or the poll reports
 * an error, it marks the job as ending (check_stop_if_ending(): the other threads start no new
 * collective and no checkpoint from then on), prints one line naming the rank and the wait, runs
 * the abort function on a thread of its own for at most min(timeout, 10 s) (`ncclCommAbort` can
 * hang when peers are dead), and ends the process with `_exit(1)` whatever the abort did. The
 * launcher then ends the other ranks (mpirun does; see dist.h for the others).
 */
#ifndef DDP_WATCHDOG_H
#define DDP_WATCHDOG_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Longest time, in seconds, that the abort function may take before the process exits. */
#define WATCHDOG_ABORT_S 10.0

/**
 * @brief Polled by the watchdog thread every tick, from that thread, after the bind function.
 * @param[in] user     the pointer given to watchdog_start().
 * @param[in] timeout  the timeout in seconds.
 * @param[out] why     on a problem, a short description (at most 255 characters).
 * @return 0 while all is well, non-zero when the process must end.
 */
typedef int (*WatchdogPoll)(void *user, double timeout, char *why);

/**
 * @brief A bind or abort function of the watchdog.
 * @param[in] user the pointer given to watchdog_start().
 */
typedef void (*WatchdogHook)(void *user);

/**
 * @brief Starts the watchdog thread, or changes its settings when it runs. When this returns, no poll
 * with the previous settings is still running, so the caller may free what they used.
 * @param[in] timeout_s  longest allowed wait in seconds, > 0.
 * @param[in] poll       extra check, or NULL.
 * @param[in] bind       run once on the watchdog thread before its first poll with these settings,
 *                       and on the abort thread before @p on_abort; or NULL.
 * @param[in] on_abort   run (bounded, see above) before the process exits; or NULL.
 * @param[in] user       passed to @p poll, @p bind and @p on_abort.
 */
void watchdog_start(double timeout_s, WatchdogPoll poll, WatchdogHook bind, WatchdogHook on_abort,
                    void *user);

/**
 * @brief A blocking wait begins. Waits nest (up to 8 deep): each is timed from its own start.
 * @param[in] what what is being waited for (a string literal, e.g. "MPI_Allreduce").
 */
void watchdog_enter(const char *what);

/** @brief The innermost wait announced by watchdog_enter() is over. */
void watchdog_leave(void);

/**
 * @brief Runs the statement @p call as a wait announced to the watchdog as @p what: between
 * watchdog_enter() and watchdog_leave(). For every call that may block on a peer, including the host
 * side of a call that only queues work (an NCCL collective connects its peers inside the call).
 */
#define WATCHDOG_WAIT(what, call) \
  do {                            \
    watchdog_enter(what);         \
    call;                         \
    watchdog_leave();             \
  } while (0)

/** @brief Longest wait, in seconds, after a preemption signal and before the next step boundary. */
#define WATCHDOG_SIGNAL_GRACE_S 5.0

/**
 * @brief A preemption signal (SIGTERM, SIGUSR1) has arrived: called from the signal handler, it only
 * sets a flag (async-signal-safe). From then until watchdog_signal_handled(), a wait, or (through the
 * poll) a collective, that lasts more than min(timeout, WATCHDOG_SIGNAL_GRACE_S) after the signal
 * (the watchdog thread sees it within a tick) ends the process as a wait past the timeout does: a
 * wait that began before the signal, as the barrier behind rank 0's long checkpoint write, is not
 * cut short by the time it had already waited. A rank stuck in a collective never reaches the step boundary
 * at which it would stop, and would otherwise outlive the signal until the launcher's SIGKILL (10 s after it
 * with scripts/launch.sh, 30 s with torchrun) or the timeout.
 */
void watchdog_signal_arrived(void);

/**
 * @brief Whether a wait (of the poll's own, e.g. a collective queued on the GPU) that began at
 * @p since is over its time now: longer than the timeout, or, after a preemption signal and until
 * watchdog_signal_handled(), longer than WATCHDOG_SIGNAL_GRACE_S counted from the later of @p since
 * and the moment the watchdog thread saw the signal (a wait that began before the signal gets the
 * whole grace after it). For the poll function; any thread may call it.
 * @param[in] since when the wait began (log_clock()).
 * @return true when the process must end.
 */
bool watchdog_overdue(double since);

/**
 * @brief The rank has passed a step boundary since the signal, so it is not stuck: the timeout is the
 * full one again (for the checkpoint that follows, whose barrier waits for rank 0's write).
 */
void watchdog_signal_handled(void);

/** @brief Stops the watchdog thread (after the process group has left the job). */
void watchdog_stop(void);

/**
 * @brief Runs `fn(arg)` on a new thread and waits for it at most @p seconds. On time-out the thread is
 * left running (the caller is about to exit). Used for aborts that may hang (`ncclCommAbort`).
 * @param[in] fn       the function.
 * @param[in] arg      its argument.
 * @param[in] seconds  longest wait, > 0.
 * @return true when @p fn returned in time, false when it did not (or no thread could be started).
 */
bool watchdog_call_bounded(WatchdogHook fn, void *arg, double seconds);

#ifdef __cplusplus
}
#endif
#endif
