// preempt.c: the preemption flag of preempt.h.
#define _POSIX_C_SOURCE 200809L
#include "preempt.h"

#include <signal.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "devmem.h"
#include "log.h"
#include "watchdog.h"

static volatile sig_atomic_t got_signal;  // set by the handler, read at the step boundary
static struct timespec first_signal;      // when the first signal came (the handler's own)

// A second signal, a second or more after the first (not a copy of it forwarded by a launcher: srun
// and torchrun pass on the SIGTERM that Slurm also sends to every task), ends the process at once by
// the signal's default action. The first one also tells the watchdog, which then ends a rank stuck in
// a collective after a short grace (watchdog_signal_arrived()): such a rank never reaches its step
// boundary, and ignored the signal until the launcher's SIGKILL.
static void on_signal(int sig) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  double since =
      (double)(now.tv_sec - first_signal.tv_sec) + 1e-9 * (double)(now.tv_nsec - first_signal.tv_nsec);
  if (got_signal && since >= 1.0) {
    signal(sig, SIG_DFL);
    raise(sig);  // delivered when this handler returns
    return;
  }
  if (!got_signal) first_signal = now;
  got_signal = 1;
  watchdog_signal_arrived();
}

void preempt_init(Preempt *p, const Ctx *c) {
  static const int values[2] = {0, 1};
  memset(p, 0, sizeof *p);
  p->flag = dev_alloc(c, sizeof(int));
  p->values = dev_alloc(c, sizeof values);
  dev_upload(c, p->values, values, sizeof values);
  p->sum = dev_host_alloc(c, sizeof(int));
  dev_event_init(c, &p->done);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a read or a write in progress goes on; the flag waits for the boundary
  if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGUSR1, &sa, NULL) != 0)
    die(1, "sigaction: cannot install the preemption handler");
}

bool preempt_agree(Preempt *p, ProcessGroup *pg, const Ctx *c, long long step) {
  if (p->stop) return true;
  bool signalled = got_signal;  // before this boundary's waits: passing them shows the rank is not stuck
  if (p->pending) {             // the previous boundary's sum: its step is done by now, or nearly
    dev_event_wait(c, &p->done);
    p->pending = false;
    if (*p->sum > 0) {
      log0("preempted: SIGTERM or SIGUSR1 on %d of %d ranks; stopping after step %lld\n", *p->sum,
           pg->world_size, step);
      p->stop = true;
      if (signalled) watchdog_signal_handled();
      return true;
    }
  }
  // On the stream, no host wait: copy 0 or 1 into the flag, sum it over the ranks, copy it back.
  dev_copy(c, p->flag, p->values + (got_signal ? 1 : 0), sizeof(int));
  dist_all_reduce(pg, p->flag, 1, DIST_INT, DIST_SUM);  // how many ranks got the signal
  dev_download_async(c, p->sum, p->flag, sizeof(int));
  dev_event_record(c, &p->done, NULL);
  p->pending = true;
  if (signalled) watchdog_signal_handled();
  return false;
}

bool preempt_save_due(Preempt *p, int save_interval, int save_steps) {
  if (!p->stop) return false;
  if (save_interval > 0 || save_steps > 0) return true;
  if (!p->unsaved)  // "0 = never": --ckpt_dir may hold another run's file, which a save would replace
    log0(
        "preempted: no checkpoint written: --save_interval and --save_steps are 0 (saving is off); exit "
        "status %d\n",
        PREEMPT_UNSAVED_EXIT_STATUS);
  p->unsaved = true;
  return false;
}

int preempt_exit_status(const Preempt *p) {
  if (!p->stop) return 0;
  return p->unsaved ? PREEMPT_UNSAVED_EXIT_STATUS : PREEMPT_EXIT_STATUS;
}

void preempt_free(Preempt *p, const Ctx *c) {
  if (p->pending) dev_event_wait(c, &p->done);  // the copy into `sum` must land before it is freed
  dev_event_free(c, &p->done);
  dev_host_free(c, p->sum);
  dev_free(c, p->values);
  dev_free(c, p->flag);
  p->flag = p->values = p->sum = NULL;
}
