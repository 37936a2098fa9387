// flight.c: the ring of each rank's last collectives, and its JSON Lines dump (flight.h).
#define _POSIX_C_SOURCE 200809L
#include "flight.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "file.h"
#include "json.h"

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static FlightEntry g_ring[FLIGHT_RING];  // entry seq lives at g_ring[seq % FLIGHT_RING]
static uint64_t g_next = 1;              // the next sequence number
static char g_dir[FLIGHT_DIR_MAX] = "out";
static int g_rank, g_world = 1;
static volatile sig_atomic_t g_requested;
static double g_stall, g_stall_end;  // the longest stall noted, and when it ended (wall clock)
static double g_tick;                // the watchdog's last tick (CLOCK_MONOTONIC; 0: none yet)

static void note_stall_in_progress(void);

static double clock_s(clockid_t id) {
  struct timespec ts;
  clock_gettime(id, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double now(void) { return clock_s(CLOCK_REALTIME); }

uint64_t flight_record(const char *op, const char *type, size_t count, const char *tag) {
  pthread_mutex_lock(&g_lock);
  uint64_t seq = g_next++;
  FlightEntry *e = &g_ring[seq % FLIGHT_RING];
  *e = (FlightEntry){.seq = seq, .op = op, .type = type, .count = count, .queued = now()};
  snprintf(e->tag, sizeof e->tag, "%s", tag ? tag : "");
  pthread_mutex_unlock(&g_lock);
  return seq;
}

void flight_mark(uint64_t seq, FlightState state) {
  pthread_mutex_lock(&g_lock);
  FlightEntry *e = &g_ring[seq % FLIGHT_RING];
  if (e->seq == seq) {
    double t = now();
    if (state == FLIGHT_STARTED)
      e->started = t;
    else
      e->finished = t;
    e->state = state;
  }
  pthread_mutex_unlock(&g_lock);
}

uint64_t flight_skip(void) {
  pthread_mutex_lock(&g_lock);
  uint64_t seq = g_next++;
  pthread_mutex_unlock(&g_lock);
  return seq;
}

uint64_t flight_next_seq(void) {
  pthread_mutex_lock(&g_lock);
  uint64_t seq = g_next;
  pthread_mutex_unlock(&g_lock);
  return seq;
}

// The ring's entries, oldest first, copied under the lock; returns how many.
static int snapshot(FlightEntry *out) {
  pthread_mutex_lock(&g_lock);
  int n = 0;
  uint64_t first = g_next > FLIGHT_RING ? g_next - FLIGHT_RING : 1;
  for (uint64_t s = first; s < g_next; s++)
    if (g_ring[s % FLIGHT_RING].seq == s) out[n++] = g_ring[s % FLIGHT_RING];
  pthread_mutex_unlock(&g_lock);
  return n;
}

bool flight_oldest_pending(FlightEntry *out) {
  static FlightEntry all[FLIGHT_RING];  // the watchdog's thread is the only caller
  int n = snapshot(all);
  for (int i = 0; i < n; i++)
    if (all[i].state != FLIGHT_DONE) {
      *out = all[i];
      return true;
    }
  return false;
}

static size_t type_bytes(const char *type) {
  return !strcmp(type, "float64")                         ? 8
         : !strcmp(type, "fp16") || !strcmp(type, "bf16") ? 2
                                                          : 4;  // dist_type_name()
}

void flight_describe(const FlightEntry *e, char *out, size_t len) {
  double mib = (double)(e->count * type_bytes(e->type)) / (1024.0 * 1024.0);
  double t = now();
  int n = snprintf(out, len, "collective #%llu (%s, %s, %s x %zu = %.1f MiB)", (unsigned long long)e->seq,
                   e->op, e->tag[0] ? e->tag : "untagged", e->type, e->count, mib);
  if (n < 0 || (size_t)n >= len) return;
  if (e->state == FLIGHT_QUEUED)
    snprintf(out + n, len - (size_t)n, " queued %.1f s ago, not started", t - e->queued);
  else if (e->state == FLIGHT_STARTED)
    snprintf(out + n, len - (size_t)n, " started %.1f s ago", t - e->started);
  else
    snprintf(out + n, len - (size_t)n, " %s %.1f s ago", e->state == FLIGHT_DONE ? "done" : "failed",
             t - e->finished);
}

int flight_set_dir(const char *dir, int rank, int world) {
  if (dir && strlen(dir) >= sizeof g_dir) return -1;
  pthread_mutex_lock(&g_lock);
  if (dir && dir[0]) snprintf(g_dir, sizeof g_dir, "%s", dir);
  g_rank = rank;
  g_world = world;
  pthread_mutex_unlock(&g_lock);
  return 0;
}

const char *flight_dir(void) { return g_dir; }

static const char *state_name(FlightState s) {
  return s == FLIGHT_QUEUED    ? "queued"
         : s == FLIGHT_STARTED ? "started"
         : s == FLIGHT_DONE    ? "done"
                               : "failed";
}

int flight_dump(const char *why, char *where, size_t len) {
  static FlightEntry all[FLIGHT_RING];
  static pthread_mutex_t dumping = PTHREAD_MUTEX_INITIALIZER;  // one dump at a time (all[] is shared)
  pthread_mutex_lock(&dumping);
  note_stall_in_progress();
  int n = snapshot(all);
  char path[600], tmp[620];
  snprintf(path, sizeof path, "%s/fr_%d.jsonl", g_dir, g_rank);
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
  if (where) snprintf(where, len, "%s", path);
  int err = file_make_dirs(g_dir) != 0 ? errno : 0;
  FILE *f = err ? NULL : fopen(tmp, "w");
  if (!f) {
    err = err ? err : errno;
    pthread_mutex_unlock(&dumping);
    return err;
  }
  fprintf(f,
          "{\"rank\": %d, \"world_size\": %d, \"pid\": %d, \"dumped\": %.6f, \"next_seq\": %llu, "
          "\"stalled_s\": %.3f, \"stalled_until\": %.6f, \"why\": \"",
          g_rank, g_world, (int)getpid(), now(), (unsigned long long)flight_next_seq(), g_stall, g_stall_end);
  json_put_escaped(f, why ? why : "");
  fprintf(f, "\"}\n");
  for (int i = 0; i < n; i++) {
    const FlightEntry *e = &all[i];
    fprintf(f, "{\"seq\": %llu, \"op\": \"%s\", \"type\": \"%s\", \"count\": %zu, \"tag\": \"",
            (unsigned long long)e->seq, e->op, e->type, e->count);
    json_put_escaped(f, e->tag);
    fprintf(f, "\", \"state\": \"%s\", \"queued\": %.6f, \"started\": %.6f, \"finished\": %.6f}\n",
            state_name(e->state), e->queued, e->started, e->finished);
  }
  err = ferror(f) ? EIO : 0;
  if (fflush(f) != 0 && !err) err = errno;
  if (fclose(f) != 0 && !err) err = errno;
  if (!err && rename(tmp, path) != 0) err = errno;
  if (err) unlink(tmp);
  pthread_mutex_unlock(&dumping);
  return err;
}

void flight_write(const char *why) {
  if (flight_next_seq() == 1) {  // before the first collective (the rendezvous): nothing to write
    fprintf(stderr, "[rank %d] flight recorder: no collective was called yet: no ring written\n", g_rank);
    return;
  }
  char path[640];
  int err = flight_dump(why, path, sizeof path);
  if (err)
    fprintf(stderr, "error: [rank %d] flight recorder: cannot write %s: %s\n", g_rank, path, strerror(err));
  else
    fprintf(stderr,
            "[rank %d] flight recorder: %s written (scripts/fr_analyze.py '%s/fr_{rank}.jsonl' names the "
            "culprit)\n",
            g_rank, path, g_dir);
  fflush(stderr);
}

// Under g_lock.
static void note_stall_locked(double seconds) {
  if (seconds > g_stall) {
    g_stall = seconds;
    g_stall_end = now();
  }
}

void flight_note_stall(double seconds) {
  pthread_mutex_lock(&g_lock);
  note_stall_locked(seconds);
  pthread_mutex_unlock(&g_lock);
}

void flight_note_tick(void) {
  pthread_mutex_lock(&g_lock);
  g_tick = clock_s(CLOCK_MONOTONIC);
  pthread_mutex_unlock(&g_lock);
}

// A stall the watchdog's thread has not seen yet: its last tick is older than FLIGHT_STALL_S.
static void note_stall_in_progress(void) {
  pthread_mutex_lock(&g_lock);
  double gap = g_tick > 0 ? clock_s(CLOCK_MONOTONIC) - g_tick : 0;
  if (gap > FLIGHT_STALL_S) note_stall_locked(gap);
  pthread_mutex_unlock(&g_lock);
}

void flight_request_dump(void) { g_requested = 1; }

bool flight_take_request(void) {
  if (!g_requested) return false;
  g_requested = 0;
  return true;
}

void flight_reset(void) {
  pthread_mutex_lock(&g_lock);
  memset(g_ring, 0, sizeof g_ring);
  g_next = 1;
  pthread_mutex_unlock(&g_lock);
}
