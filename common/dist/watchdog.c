// watchdog.c: the watchdog thread of watchdog.h.
#define _POSIX_C_SOURCE 200809L
#include "watchdog.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "flight.h"
#include "log.h"

#define TICK_NS 100000000L  // 100 ms between checks
#define MAX_DEPTH 8         // nested waits (e.g. an MPI_Bcast inside the NCCL start-up)

static struct {
  pthread_mutex_t lock;     // guards the fields below
  pthread_mutex_t polling;  // held by the thread while it binds and polls, and by watchdog_start()
  pthread_t thread;
  bool running;
  double timeout;
  WatchdogPoll poll;
  WatchdogHook bind;
  WatchdogHook on_abort;
  void *user;
  unsigned settings;  // incremented by every watchdog_start(): the thread binds again
  int depth;          // waits in progress (only the first MAX_DEPTH are timed)
  const char *what[MAX_DEPTH];
  double since[MAX_DEPTH];
  double signal_seen;  // log_clock() when the thread first saw a preemption signal (0: not yet)
  bool hurry;          // the grace applies now (set by the thread at each tick)
  bool signal_ring;    // the flight recorder's ring was written for the preemption signal
} W = {.lock = PTHREAD_MUTEX_INITIALIZER, .polling = PTHREAD_MUTEX_INITIALIZER};

// 0: no preemption signal; 1: one arrived, no step boundary passed since (the grace applies); 2: handled
static volatile sig_atomic_t g_signal;

void watchdog_signal_arrived(void) {
  if (g_signal == 0) g_signal = 1;
}

void watchdog_signal_handled(void) { g_signal = 2; }

// Whether a wait that began at @p since is over its time at @p t: the timeout from its start, or,
// while the grace applies, the grace from the later of its start and the signal; under the lock.
static bool overdue(double since, double t) {
  if (t - since > W.timeout) return true;
  double from = since > W.signal_seen ? since : W.signal_seen;
  return W.hurry && t - from > WATCHDOG_SIGNAL_GRACE_S;
}

bool watchdog_overdue(double since) {
  pthread_mutex_lock(&W.lock);
  bool late = overdue(since, log_clock());
  pthread_mutex_unlock(&W.lock);
  return late;
}

// ---- bounded calls ------------------------------------------------------------------------------------

typedef struct Call {
  WatchdogHook fn;
  void *arg;
  pthread_mutex_t lock;
  pthread_cond_t done_cv;
  bool done;
} Call;

static void *call_thread(void *p) {
  Call *c = p;
  c->fn(c->arg);
  pthread_mutex_lock(&c->lock);
  c->done = true;
  pthread_cond_signal(&c->done_cv);
  pthread_mutex_unlock(&c->lock);
  return NULL;
}

bool watchdog_call_bounded(WatchdogHook fn, void *arg, double seconds) {
  // On time-out the thread still uses the Call, so it is never freed then (the process is ending).
  Call *c = calloc(1, sizeof *c);
  if (!c) return false;
  c->fn = fn;
  c->arg = arg;
  pthread_mutex_init(&c->lock, NULL);
  pthread_cond_init(&c->done_cv, NULL);
  pthread_t t;
  if (pthread_create(&t, NULL, call_thread, c) != 0) return false;
  pthread_detach(t);
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);  // the clock of pthread_cond_timedwait
  double end = until.tv_sec + until.tv_nsec * 1e-9 + seconds;
  until.tv_sec = (time_t)end;
  until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
  pthread_mutex_lock(&c->lock);
  int err = 0;
  while (!c->done && err != ETIMEDOUT) err = pthread_cond_timedwait(&c->done_cv, &c->lock, &until);
  bool done = c->done;
  pthread_mutex_unlock(&c->lock);
  if (done) free(c);
  return done;
}

// ---- the thread -----------------------------------------------------------------------------------------

typedef struct Settings {
  WatchdogHook bind, on_abort;
  void *user;
} Settings;

static void bound_abort(void *p) {
  const Settings *s = p;
  if (s->bind) s->bind(s->user);  // a thread of its own: select the rank's GPU first
  s->on_abort(s->user);
}

static void fire(const char *why, Settings s, double timeout) {
  check_set_ending();  // from here on the main thread starts nothing new (check_stop_if_ending)
  FlightEntry e;
  char entry[256] = "";
  if (flight_oldest_pending(&e)) {
    flight_describe(&e, entry + 2, sizeof entry - 2);
    memcpy(entry, ": ", 2);
  }
  fprintf(stderr, "error: [rank %d] watchdog: %s%s; ending this rank so the job does not hang\n",
          check_rank(), why, entry);
  fflush(stderr);
  char reason[400];
  snprintf(reason, sizeof reason, "watchdog: %s", why);
  flight_write(reason);
  double bound = timeout < WATCHDOG_ABORT_S ? timeout : WATCHDOG_ABORT_S;
  if (s.on_abort && !watchdog_call_bounded(bound_abort, &s, bound)) {
    fprintf(stderr,
            "error: [rank %d] watchdog: the abort did not finish within %g s; exiting "
            "without it\n",
            check_rank(), bound);
    fflush(stderr);
  }
  _exit(1);
}

static void *watch(void *arg) {
  (void)arg;
  struct timespec tick = {0, TICK_NS};
  unsigned bound = 0;  // settings the thread has bound for (0: none yet)
  // From the thread's start: a process stopped before the first tick completed (the first steps of a
  // fast job) still shows the gap at the tick after it is continued.
  double last_tick = log_clock();
  flight_note_tick();
  for (;;) {
    nanosleep(&tick, NULL);
    char why[256] = "";
    pthread_mutex_lock(&W.polling);
    pthread_mutex_lock(&W.lock);
    if (!W.running) {
      pthread_mutex_unlock(&W.lock);
      pthread_mutex_unlock(&W.polling);
      return NULL;
    }
    double t = log_clock();
    // Ticks 100 ms apart: a gap of seconds means this whole process did not run (SIGSTOP, a debugger,
    // a paused machine), which the flight recorder's ring then says.
    if (t - last_tick > FLIGHT_STALL_S) flight_note_stall(t - last_tick);
    last_tick = t;
    flight_note_tick();
    // after a SIGTERM or SIGUSR1, until the next step boundary: the grace instead of the timeout,
    // counted from when this thread first saw the signal (a wait that began before it, e.g. the
    // barrier behind rank 0's checkpoint write, gets the whole grace after the signal too)
    if (g_signal == 1 && W.signal_seen == 0) W.signal_seen = t;
    bool hurry = g_signal == 1 && W.timeout > WATCHDOG_SIGNAL_GRACE_S;
    double timeout = hurry ? WATCHDOG_SIGNAL_GRACE_S : W.timeout;
    W.hurry = hurry;
    // A launcher stops every rank when one fails (mpirun's MPI_Abort: SIGTERM, SIGKILL 1 s later): a
    // rank that waits in a collective then writes its ring at once, so that the analyzer has them all.
    bool ring_now = g_signal == 1 && W.depth > 0 && !W.signal_ring;
    if (ring_now) W.signal_ring = true;
    int depth = W.depth < MAX_DEPTH ? W.depth : MAX_DEPTH;
    for (int i = 0; i < depth && !why[0]; i++)
      if (overdue(W.since[i], t))
        snprintf(why, sizeof why,
                 "%s has waited more than %g s (%s): a peer is stuck, "
                 "dead, missing, or calling other collectives",
                 W.what[i], hurry && t - W.since[i] <= W.timeout ? timeout : W.timeout,
                 hurry && t - W.since[i] <= W.timeout
                     ? "after a SIGTERM or SIGUSR1, counted from it: a stuck rank ends at once"
                     : "--timeout");
    Settings s = {W.bind, W.on_abort, W.user};
    WatchdogPoll poll = W.poll;
    unsigned settings = W.settings;
    pthread_mutex_unlock(&W.lock);
    if (!why[0] && poll) {
      if (bound != settings && s.bind) s.bind(s.user);  // before this thread's first CUDA call
      bound = settings;
      if (poll(s.user, timeout, why) != 0 && !why[0])
        snprintf(why, sizeof why, "the process group reported an error");
      else if (why[0] && hurry)
        strncat(why, " (after a SIGTERM or SIGUSR1: a stuck rank ends at once)",
                sizeof why - strlen(why) - 1);
    }
    pthread_mutex_unlock(&W.polling);
    if (ring_now && !why[0]) flight_write("SIGTERM or SIGUSR1 while waiting in a collective");
    if (why[0]) fire(why, s, timeout);
    if (flight_take_request()) flight_write("SIGUSR2");  // kill -USR2 <pid>: the ring of a running job
  }
}

static void on_usr2(int sig) {
  (void)sig;
  flight_request_dump();  // the watchdog's thread writes it at its next tick
}

// SIGUSR2 asks for the flight recorder's ring, unless the program handles SIGUSR2 itself.
static void catch_usr2(void) {
  struct sigaction old;
  if (sigaction(SIGUSR2, NULL, &old) != 0 || old.sa_handler != SIG_DFL) return;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_usr2;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGUSR2, &sa, NULL);
}

void watchdog_start(double timeout_s, WatchdogPoll poll, WatchdogHook bind, WatchdogHook on_abort,
                    void *user) {
  pthread_mutex_lock(&W.polling);  // no poll with the old settings runs after this returns
  pthread_mutex_lock(&W.lock);
  W.timeout = timeout_s;
  W.poll = poll;
  W.bind = bind;
  W.on_abort = on_abort;
  W.user = user;
  W.settings++;
  bool start = !W.running;
  W.running = true;
  pthread_mutex_unlock(&W.lock);
  pthread_mutex_unlock(&W.polling);
  if (start) catch_usr2();
  if (start && pthread_create(&W.thread, NULL, watch, NULL) != 0) die(1, "cannot start the watchdog thread");
}

void watchdog_enter(const char *what) {
  pthread_mutex_lock(&W.lock);
  if (W.depth < MAX_DEPTH) {
    W.what[W.depth] = what;
    W.since[W.depth] = log_clock();
  }
  W.depth++;
  pthread_mutex_unlock(&W.lock);
}

void watchdog_leave(void) {
  pthread_mutex_lock(&W.lock);
  if (W.depth > 0) W.depth--;
  pthread_mutex_unlock(&W.lock);
}

void watchdog_stop(void) {
  pthread_mutex_lock(&W.lock);
  bool was = W.running;
  W.running = false;
  W.depth = 0;
  W.poll = NULL;
  W.bind = NULL;
  W.on_abort = NULL;
  pthread_mutex_unlock(&W.lock);
  if (was) pthread_join(W.thread, NULL);
}
