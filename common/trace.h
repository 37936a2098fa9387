/**
 * @file
 * @brief Timelines in Chrome's trace-event JSON format (open in https://ui.perfetto.dev or
 * chrome://tracing): named spans on numbered tracks, one process per rank.
 *
 * The file is `{"traceEvents": [...]}` with one complete event (`"ph": "X"`) per span, times in
 * microseconds, `pid` = rank, `tid` = track, and `"args": {"step": S}`; track names are metadata
 * events (`"ph": "M"`, `thread_name`).
 */
#ifndef DDP_TRACE_H
#define DDP_TRACE_H

#include <stdbool.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief An open trace file (or a disabled one). */
typedef struct Trace {
  FILE *f;     ///< output, NULL when disabled
  int rank;    ///< pid of every event
  long count;  ///< events written so far
} Trace;

/**
 * @brief Opens `path_template` with `{rank}` replaced; disabled when the template is NULL. Ends the
 * job when the file cannot be created, or when @p world_size > 1 and the template has no `{rank}`
 * (ranks writing one file would leave invalid JSON).
 * @param[out] t            the trace.
 * @param[in] path_template path, `{rank}` replaced by @p rank.
 * @param[in] rank          this process's rank (the event's pid).
 * @param[in] world_size    number of ranks.
 */
void trace_open(Trace *t, const char *path_template, int rank, int world_size);

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

/** @brief Finishes the JSON document and closes the file. */
void trace_close(Trace *t);

#ifdef __cplusplus
}
#endif
#endif
