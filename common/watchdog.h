/**
 * @file
 * @brief A watchdog thread that ends this process when a collective waits too long, so that a job
 * whose peer is stuck (or whose ranks disagree about which collectives to call) fails with a message
 * instead of hanging for ever (the analogue of the `timeout` of `init_process_group` and PyTorch's
 * NCCL watchdog).
 *
 * The process group announces every blocking wait with watchdog_enter() / watchdog_leave(), and may
 * register a poll function (NCCL: the communicator's asynchronous error, and whether the last
 * collective has finished on the GPU). The thread wakes up every 100 ms; when a wait has lasted more
 * than the timeout, or the poll reports an error, it prints one line naming the rank and the wait,
 * calls the registered abort function (e.g. `ncclCommAbort`) and ends the process with `_exit(1)`.
 * The launcher then ends the other ranks (mpirun does; see dist.h for the others).
 */
#ifndef DDP_WATCHDOG_H
#define DDP_WATCHDOG_H

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Polled by the watchdog thread every tick, from that thread.
 * @param[in] user     the pointer given to watchdog_start().
 * @param[in] timeout  the timeout in seconds.
 * @param[out] why     on a problem, a short description (at most 255 characters).
 * @return 0 while all is well, non-zero when the process must end.
 */
typedef int (*WatchdogPoll)(void *user, double timeout, char *why);

/**
 * @brief Starts the watchdog thread (once per process; later calls only change the settings).
 * @param[in] timeout_s  longest allowed wait in seconds, > 0.
 * @param[in] poll       extra check, or NULL.
 * @param[in] on_abort   called before exiting (e.g. to abort a communicator), or NULL.
 * @param[in] user       passed to @p poll and @p on_abort.
 */
void watchdog_start(double timeout_s, WatchdogPoll poll, void (*on_abort)(void *user), void *user);

/**
 * @brief A blocking wait begins.
 * @param[in] what what is being waited for (a string literal, e.g. "MPI_Allreduce").
 */
void watchdog_enter(const char *what);

/** @brief The wait announced by watchdog_enter() is over. */
void watchdog_leave(void);

/** @brief Stops the watchdog thread (before the process group is destroyed). */
void watchdog_stop(void);

#ifdef __cplusplus
}
#endif
#endif
