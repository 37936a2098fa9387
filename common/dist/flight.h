/**
 * @file
 * @brief The flight recorder: each rank's last FLIGHT_RING collectives, kept in a preallocated ring
 * and written out when a job hangs, so that `scripts/fr_analyze.py` can name the rank that never
 * arrived or the first collective on which the ranks disagree (the analogue of PyTorch's Flight
 * Recorder, `TORCH_NCCL_TRACE_BUFFER_SIZE` and `fr_trace`).
 *
 * The process group records every collective it runs (dist.c): its sequence number (1, 2, … on every
 * rank in the same order, which is what lets the rings be aligned), the operation, the element type
 * and count, a tag saying what it carries (`bucket 1`, `loss`, or the calling function), the times it
 * was queued, started and finished, and its state. Recording takes a lock and writes one entry: no
 * allocation, no I/O. The ring is written out, one JSON object per line, as `fr_<rank>.jsonl` in the
 * folder given to flight_set_dir(): by the watchdog before it ends a hung job, by the abort path of a
 * failed collective, and on `SIGUSR2` (flight_request_dump(); the watchdog's thread writes it).
 */
#ifndef DDP_FLIGHT_H
#define DDP_FLIGHT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Entries in each rank's ring: the last 256 collectives. */
#define FLIGHT_RING 256
/** @brief Longest folder of the ring's file, terminating zero included. */
#define FLIGHT_DIR_MAX 512
/** @brief Longest tag, terminating zero included. */
#define FLIGHT_TAG 40

/** @brief Where a collective is. */
typedef enum FlightState {
  FLIGHT_QUEUED = 0,  ///< handed to the backend, which has not said it started (NCCL: on the stream)
  FLIGHT_STARTED,     ///< in progress on this rank
  FLIGHT_DONE,        ///< complete on this rank
  FLIGHT_FAILED,      ///< ended by an error or the watchdog
} FlightState;

/** @brief One collective, as the ring keeps it. */
typedef struct FlightEntry {
  uint64_t seq;          ///< 1, 2, …: this rank's collectives in the order it called them
  const char *op;        ///< "all-reduce", "reduce-scatter", "all-gather", "broadcast", "barrier"
  const char *type;      ///< the element type, as dist_type_name() says: "float32", "int32", "fp16", …
  size_t count;          ///< elements (all-gather: this rank's part)
  char tag[FLIGHT_TAG];  ///< what it carries: "bucket 1", "loss", … or the calling function
  double queued;         ///< wall-clock seconds (CLOCK_REALTIME, comparable across the ranks of a node)
  double started;        ///< 0 until it started
  double finished;       ///< 0 until it finished or failed
  FlightState state;     ///< where it is
} FlightEntry;

/**
 * @brief Records a new collective, queued now.
 * @param[in] op    the operation (a string that lives for the whole run).
 * @param[in] type  the element type (likewise).
 * @param[in] count elements.
 * @param[in] tag   what it carries; NULL or "" for none. Truncated to FLIGHT_TAG - 1 characters.
 * @return its sequence number, for flight_mark().
 */
uint64_t flight_record(const char *op, const char *type, size_t count, const char *tag);

/**
 * @brief Moves collective @p seq to @p state (FLIGHT_STARTED, FLIGHT_DONE or FLIGHT_FAILED), stamping
 * the time; nothing when it has left the ring.
 */
void flight_mark(uint64_t seq, FlightState state);

/**
 * @brief Skips a sequence number without recording it: what `DDP_TEST_SKIP_COLLECTIVE` makes a rank
 * do, so that the rings show a rank that never called collective N.
 * @return the sequence number skipped.
 */
uint64_t flight_skip(void);

/** @brief The sequence number the next collective will get. */
uint64_t flight_next_seq(void);

/**
 * @brief The oldest collective of the ring that is not done (queued, started or failed): what a hung
 * rank waits on.
 * @param[out] out a copy of it.
 * @return false when every collective in the ring is done.
 */
bool flight_oldest_pending(FlightEntry *out);

/**
 * @brief Describes @p e in one line for messages, e.g.
 * `collective #418 (all-reduce, bucket 1, float x 786432 = 3.0 MiB) started 300.0 s ago`.
 */
void flight_describe(const FlightEntry *e, char *out, size_t len);

/**
 * @brief Sets where the ring is written (the folder is made when needed), this rank and the world size.
 * @param[in] dir   folder; NULL or "" keeps the current one (default "out").
 * @param[in] rank  the file's rank, `fr_<rank>.jsonl`.
 * @param[in] world the world size, for the file's first line.
 * @return 0; -1 (nothing changed) when @p dir is longer than FLIGHT_DIR_MAX - 1 bytes.
 */
int flight_set_dir(const char *dir, int rank, int world);

/** @brief The folder the ring is written to. */
const char *flight_dir(void);

/**
 * @brief Writes the ring to `<dir>/fr_<rank>.jsonl` (a first line about the rank and why, then one
 * line per entry, oldest first), through a temporary file and a rename.
 * @param[in] why  why it is written: "watchdog: ...", "SIGUSR2", …
 * @param[out] path where it was written (or would have been), or NULL.
 * @param[in] len  bytes of @p path.
 * @return 0, or the errno of the write that failed (nothing is left half-written).
 */
int flight_dump(const char *why, char *path, size_t len);

/**
 * @brief flight_dump(), then one line on stderr: where the ring is and the command that reads the
 * rings (`scripts/fr_analyze.py 'DIR/fr_{rank}.jsonl'`), or why it could not be written. Before the
 * first collective (a hang in the rendezvous) there is nothing to write: it says so instead.
 * @param[in] why why it is written.
 */
void flight_write(const char *why);

/** @brief A gap of this many seconds between two of the watchdog's ticks (100 ms apart) is a stall. */
#define FLIGHT_STALL_S 2.0

/**
 * @brief The watchdog's tick (each 100 ms): a dump that finds the last tick more than FLIGHT_STALL_S
 * old notes the gap as a stall that ends now. A frozen process (SIGSTOP) that is continued may write
 * its ring at once from another thread (a collective that failed while it was stopped) before the
 * watchdog's thread has run again: the stall is in the ring all the same.
 */
void flight_note_tick(void);

/**
 * @brief Notes that this process did not run for @p seconds, until now (the watchdog sees its own
 * ticks stop: SIGSTOP, a debugger, a paused machine). The longest such stall goes into the ring's
 * first line, so that the analyzer can name a frozen rank even when it froze inside a collective.
 */
void flight_note_stall(double seconds);

/** @brief Asks for a dump (async-signal-safe: what the SIGUSR2 handler calls). */
void flight_request_dump(void);

/** @brief True once after each flight_request_dump(): the watchdog's thread then dumps. */
bool flight_take_request(void);

/** @brief Empties the ring and restarts the numbering at 1 (a new process group). */
void flight_reset(void);

#ifdef __cplusplus
}
#endif
#endif
