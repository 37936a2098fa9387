/**
 * @file
 * @brief Timelines in Chrome's trace-event JSON format (open in https://ui.perfetto.dev or
 * chrome://tracing): named spans on numbered tracks, one process per rank.
 *
 * The file is `{"traceEvents": [...]}` with one complete event (`"ph": "X"`) per span, times in
 * microseconds, `pid` = rank, `tid` = track, and `"args": {"step": S}`; track names are metadata
 * events (`"ph": "M"`, `thread_name`).
 *
 * trace_backward() writes the timeline of data-parallel training: when each layer's backward
 * finished and when each gradient all-reduce started and ended. Reading those times waits for the
 * device, so only the first TRACE_STEPS optimizer steps are written (those of this process: after a
 * resume, the steps from the checkpoint's on); each step's spans are flushed as they are written.
 *
 * Restarts: a restarted attempt (rankfile_attempt() A > 0: scripts/restart.sh, torchrun
 * `--max-restarts`) runs the same command line, but a trace cannot be appended to (one document per
 * process, each with its own time zero), so it writes the template with `.attemptA` before the
 * extension (`t_{rank}.json`: `t_{rank}.attempt1.json`), and the earlier attempts' files stay. The
 * first attempt, and a run started by hand (`--resume` too), create or truncate the path as given.
 */
#ifndef DDP_TRACE_H
#define DDP_TRACE_H

#include <stdbool.h>
#include <stdio.h>

#include "device.h"
#include "dist.h"
#include "mlp.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Optimizer steps trace_backward() writes (-DTRACE_STEPS=N changes it). */
#ifndef TRACE_STEPS
#define TRACE_STEPS 20
#endif

/** @brief An open trace file (or a disabled one). */
typedef struct Trace {
  FILE *f;          ///< output, NULL when disabled
  int rank;         ///< pid of every event
  long count;       ///< events written so far
  DevEvent origin;  ///< time zero: recorded by trace_open() (when enabled)
  int steps;        ///< steps trace_backward() has written
} Trace;

/**
 * @brief Opens `path_template` with `{rank}` replaced (and, in a restarted attempt, `.attemptA` before
 * the extension, saying so on rank 0); disabled when the template is NULL. Ends the job when the file
 * cannot be created, or when @p world_size > 1 and the template has no `{rank}`
 * (ranks writing one file would leave invalid JSON). An enabled trace's time zero is now, on @p c's
 * stream, and it has the model record its backward's events from now on (mlp_time_backward()), for
 * trace_backward(); a disabled one leaves the model untimed.
 * @param[out] t            the trace.
 * @param[in] c             the device context whose events the spans will be timed with.
 * @param[in,out] m         the model whose backward the trace will show.
 * @param[in] path_template path, `{rank}` replaced by @p rank.
 * @param[in] rank          this process's rank (the event's pid).
 * @param[in] world_size    number of ranks.
 */
void trace_open(Trace *t, const Ctx *c, Mlp *m, const char *path_template, int rank, int world_size);

/** @brief True when the trace is enabled. */
bool trace_on(const Trace *t);

/**
 * @brief Names a track (shown as a thread in the viewers).
 * @param[in,out] t trace.
 * @param[in] track track number.
 * @param[in] name  its name.
 */
void trace_track(Trace *t, int track, const char *name);

/**
 * @brief Writes one span.
 * @param[in,out] t   trace.
 * @param[in] track   track number.
 * @param[in] name    span name.
 * @param[in] begin   start, seconds since any fixed origin (the same for the whole file).
 * @param[in] end     end, seconds, >= @p begin.
 * @param[in] step    optimizer step, stored in the event's args.
 */
void trace_span(Trace *t, int track, const char *name, double begin, double end, long long step);

/**
 * @brief Writes one optimizer step of data-parallel training, for the first TRACE_STEPS steps (later
 * calls, and calls on a disabled trace, return at once): on track 1 a span per layer of the model's
 * last backward (timed since trace_open()), on track 2 a span per collective, from its start to its
 * end events, named by what ran (`all-reduce`, a communication hook's name), its elements in their
 * own type (`floats`, `fp16 values`, ...) and their size; an entry of @p work on which nothing ran
 * (no `what`) has no span. Waits for the device (the events' times).
 * @param[in,out] t  trace.
 * @param[in] c      context of the events.
 * @param[in] m      the model, with its backward's events.
 * @param[in] work   host, (n_work): the step's all-reduces, in the order they were started.
 * @param[in] n_work number of all-reduces.
 * @param[in] step   optimizer step (0-based), stored in each span.
 */
void trace_backward(Trace *t, const Ctx *c, const Mlp *m, const DistWork *work, int n_work, long long step);

/** @brief Finishes the JSON document and closes the file. */
void trace_close(Trace *t, const Ctx *c);

#ifdef __cplusplus
}
#endif
#endif
