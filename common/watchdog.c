// watchdog.c: the watchdog thread of watchdog.h.
#define _POSIX_C_SOURCE 200809L
#include "watchdog.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "log.h"

#define TICK_NS 100000000L  // 100 ms between checks

static struct {
  pthread_mutex_t lock;
  pthread_t thread;
  bool running;
  double timeout;
  WatchdogPoll poll;
  void (*on_abort)(void *user);
  void *user;
  const char *what;  // the wait in progress, NULL when none
  double since;      // when it began
} W = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void fire(const char *why) {
  fprintf(stderr, "error: [rank %d] watchdog: %s; ending this rank so the job does not hang\n",
          check_rank(), why);
  fflush(stderr);
  if (W.on_abort) W.on_abort(W.user);
  _exit(1);
}

static void *watch(void *arg) {
  (void)arg;
  struct timespec tick = {0, TICK_NS};
  for (;;) {
    nanosleep(&tick, NULL);
    char why[256] = "";
    pthread_mutex_lock(&W.lock);
    if (!W.running) {
      pthread_mutex_unlock(&W.lock);
      return NULL;
    }
    if (W.what && now_seconds() - W.since > W.timeout)
      snprintf(why, sizeof why, "%s has waited more than %g s (--timeout): a peer is stuck, dead, or "
               "calling other collectives", W.what, W.timeout);
    WatchdogPoll poll = W.poll;
    double timeout = W.timeout;
    void *user = W.user;
    pthread_mutex_unlock(&W.lock);
    if (!why[0] && poll && poll(user, timeout, why) != 0 && !why[0])
      snprintf(why, sizeof why, "the process group reported an error");
    if (why[0]) fire(why);
  }
}

void watchdog_start(double timeout_s, WatchdogPoll poll, void (*on_abort)(void *user), void *user) {
  pthread_mutex_lock(&W.lock);
  W.timeout = timeout_s;
  W.poll = poll;
  W.on_abort = on_abort;
  W.user = user;
  bool start = !W.running;
  W.running = true;
  pthread_mutex_unlock(&W.lock);
  if (start && pthread_create(&W.thread, NULL, watch, NULL) != 0)
    die(1, "cannot start the watchdog thread");
}

void watchdog_enter(const char *what) {
  pthread_mutex_lock(&W.lock);
  W.what = what;
  W.since = now_seconds();
  pthread_mutex_unlock(&W.lock);
}

void watchdog_leave(void) {
  pthread_mutex_lock(&W.lock);
  W.what = NULL;
  pthread_mutex_unlock(&W.lock);
}

void watchdog_stop(void) {
  pthread_mutex_lock(&W.lock);
  bool was = W.running;
  W.running = false;
  W.what = NULL;
  W.poll = NULL;
  pthread_mutex_unlock(&W.lock);
  if (was) pthread_join(W.thread, NULL);
}
