// preempt.c: the preemption flag of preempt.h.
#define _POSIX_C_SOURCE 200809L
#include "preempt.h"

#include <signal.h>
#include <string.h>

#include "check.h"
#include "devmem.h"
#include "log.h"

static volatile sig_atomic_t got_signal;  // set by the handler, read at the step boundary

static void on_signal(int sig) {
  (void)sig;
  got_signal = 1;
}

void preempt_init(Preempt *p, const Ctx *c) {
  p->stop = false;
  p->flag = dev_alloc(c, sizeof(int));
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a read or a write in progress goes on; the flag waits for the boundary
  if (sigaction(SIGTERM, &sa, NULL) != 0 || sigaction(SIGUSR1, &sa, NULL) != 0)
    die(1, "sigaction: cannot install the preemption handler");
}

bool preempt_agree(Preempt *p, ProcessGroup *pg, const Ctx *c, long long step) {
  int mine = got_signal ? 1 : 0, ranks;
  dev_upload(c, p->flag, &mine, sizeof mine);
  dist_all_reduce(pg, p->flag, 1, DIST_INT, DIST_SUM);  // how many ranks got the signal
  dev_download(c, &ranks, p->flag, sizeof ranks);
  if (ranks > 0 && !p->stop)
    log0("preempted: SIGTERM or SIGUSR1 on %d of %d ranks; stopping after step %lld\n", ranks, pg->world_size,
         step);
  p->stop = p->stop || ranks > 0;
  return p->stop;
}

int preempt_exit_status(const Preempt *p) { return p->stop ? PREEMPT_EXIT_STATUS : 0; }

void preempt_free(Preempt *p, const Ctx *c) {
  dev_free(c, p->flag);
  p->flag = NULL;
}
