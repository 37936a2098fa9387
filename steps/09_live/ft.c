/*
 * ft.c — step 09's manager of live recovery: see ft.h.
 */
#define _POSIX_C_SOURCE 200809L
#include "ft.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "devmem.h"
#include "log.h"

// A whole number from the environment, `fallback` when unset; ends the job when it is not one.
static int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  if (!v || !*v) return fallback;
  char *end;
  long x = strtol(v, &end, 10);
  if (*end || x < 0 || x > 1000000) die(2, "%s=%s: expected a whole number 0..1000000", name, v);
  return (int)x;
}

// Test hook DDP_TEST_FT_KILL=REPLICA:STEP[:stop]: the replica signals itself as it starts STEP, before any
// collective of it, so that the tests know which step failed.
static void read_kill_hook(Ft *ft) {
  ft->kill_replica = -1;
  const char *v = getenv("DDP_TEST_FT_KILL");
  if (!v || !*v) return;
  char how[8] = "";
  if (sscanf(v, "%d:%lld:%7s", &ft->kill_replica, &ft->kill_step, how) < 2 || ft->kill_step < 1 ||
      (how[0] && strcmp(how, "stop") != 0))
    die(2, "DDP_TEST_FT_KILL=%s: expected REPLICA:STEP or REPLICA:STEP:stop", v);
  ft->kill_sig = how[0] ? SIGSTOP : SIGKILL;
  if (ft->incarnation > 0) ft->kill_replica = -1;  // the first incarnation only: a replacement lives
}

// Test hook DDP_TEST_FT_CORRUPT=REPLICA:STEP: the replica's parameters part from the others' without a
// word (a bit flip, a bug), which only the lighthouse's digest check can see.
static void read_spoil_hook(Ft *ft) {
  ft->spoil_replica = -1;
  const char *v = getenv("DDP_TEST_FT_CORRUPT");
  if (v && *v && (sscanf(v, "%d:%lld", &ft->spoil_replica, &ft->spoil_step) != 2 || ft->spoil_step < 1))
    die(2, "DDP_TEST_FT_CORRUPT=%s: expected REPLICA:STEP", v);
}

// The timeouts nest (pytorch/torchtitan#2899): a survivor sees a frozen peer (--ft_op_timeout) and the
// lighthouse drops it (--heartbeat_timeout), then waits for late members (--join_timeout), all within a
// replica's wait for its quorum (--ft_quorum_timeout), itself within the watchdog's (--timeout).
static void check_timeouts(const Args *a) {
  double detect = a->ft_op_timeout > a->heartbeat_timeout ? a->ft_op_timeout : a->heartbeat_timeout;
  const char *which = a->ft_op_timeout > a->heartbeat_timeout ? "--ft_op_timeout" : "--heartbeat_timeout";
  if (!(detect + a->join_timeout < a->ft_quorum_timeout))
    die(2,
        "--ft_quorum_timeout %g must exceed %s %g + --join_timeout %g: a replica would give up on its "
        "quorum before the lighthouse could form one without a frozen member",
        (double)a->ft_quorum_timeout, which, detect, (double)a->join_timeout);
  if (!(a->ft_quorum_timeout < a->timeout))
    die(2,
        "--timeout %g must exceed --ft_quorum_timeout %g: the watchdog would end a replica still "
        "waiting for its quorum",
        (double)a->timeout, (double)a->ft_quorum_timeout);
}

void ft_init(Ft *ft, const Args *a, ProcessGroup *pg) {
  memset(ft, 0, sizeof *ft);
  const char *lighthouse = getenv("DDP_LIGHTHOUSE");
  ft->on = lighthouse && *lighthouse;
  ft->replica = env_int("REPLICA_ID", pg->rank);
  // (a restarted job's attempt counts as an incarnation: the kill hook fires in the first one only, so
  // that bench/payoff.py recovery can kill the same step under scripts/restart.sh)
  ft->incarnation = env_int("REPLICA_INCARNATION", env_int("TORCHELASTIC_RESTART_COUNT", 0));
  read_kill_hook(ft);
  if (!ft->on) return;
  ft->quorum_timeout = a->ft_quorum_timeout;
  check_timeouts(a);
  // Per-rank state that a heal does not carry, and collectives counted per rank: refused, not risked
  if (a->straggler > 0)
    die(2,
        "--straggler is not built for --ft: its report counts steps per rank and sizes itself for the "
        "launch's world, which a quorum changes");
  if (a->comm_hook && strcmp(a->comm_hook, "powersgd") == 0)
    die(2,
        "--comm_hook powersgd is not built for --ft: its state (error feedback, iteration) changes "
        "before a step's vote and is not healed; use allreduce, fp16 or bf16");
  read_spoil_hook(ft);
  const char *samples = getenv("DDP_TEST_SAMPLES");
  if (samples && *samples) {
    char path[4096];
    snprintf(path, sizeof path, "%s_%d_%d.txt", samples, ft->replica, ft->incarnation);
    if (!(ft->samples = fopen(path, "w"))) die(1, "DDP_TEST_SAMPLES: cannot write %s", path);
  }
  dist_set_recoverable(pg, a->ft_op_timeout);
  ft->lh = lighthouse_join(lighthouse, ft->replica, ft->incarnation, a->heartbeat_timeout / 4,
                           a->ft_quorum_timeout);
}

// Asks for a quorum and joins its group; the phases' times go to ft.
static void join_quorum(Ft *ft, ProcessGroup *pg, const Ctx *ctx, long long step, uint64_t digest) {
  char why[1024];
  double t0 = log_clock();
  int rc = lighthouse_quorum(ft->lh, step, digest, ft->quorum_timeout, &ft->q, why, sizeof why);
  if (rc == 1) {
    fprintf(stderr, "replica %d: the lighthouse refused a quorum: %s\n", ft->replica, why);
    exit(strstr(why, "(it was left out of it") ? FT_EXIT_LEFT_OUT : FT_EXIT_REFUSED);
  }
  if (rc != 0) die(1, "replica %d: no quorum: %s", ft->replica, why);
  double t1 = log_clock();
  char prefix[32];
  snprintf(prefix, sizeof prefix, "q%d/", ft->q.id);
  DistMeeting m = {ft->q.store_host, ft->q.store_port, prefix,
                   ft->q.rank,       ft->q.world_size, ft->quorum_timeout};
  dist_reconnect(pg, ctx, &m);
  ft->quorum_s = t1 - t0;
  ft->reconnect_s = log_clock() - t1;
  if (!ft->flag) {  // the first group: the joiner flag's buffer and handle
    ft->flag = dev_alloc(ctx, sizeof(int));
    dist_work_init(pg, &ft->join_work);
  }
}

void ft_connect(Ft *ft, ProcessGroup *pg, const Ctx *ctx) {
  if (!ft->on) {
    dist_connect(pg, ctx);
    return;
  }
  if (ft->incarnation > 0) {  // a replacement: alone until its data and model are ready (ft_join())
    DistMeeting alone = {"", 0, "", 0, 1, 0};
    dist_reconnect(pg, ctx, &alone);
    check_set_rank(ft->replica);  // (not "rank 0" in its messages: it has no rank yet)
    fprintf(stderr, "replica %d (incarnation %d): loads its data and builds its model, then asks to join\n",
            ft->replica, ft->incarnation);
    return;
  }
  join_quorum(ft, pg, ctx, 0, 0);  // every replica starts at step 0 (a resume: all from one file)
  log0("live recovery: replica %d, quorum %d of %d replicas\n", ft->replica, ft->q.id, ft->q.world_size);
}

bool ft_join(Ft *ft, ProcessGroup *pg, const Ctx *ctx) {
  if (!ft->on || ft->incarnation == 0) return false;
  // Asked only now, with its data loaded and its model built: the members it joins wait for no start-up
  join_quorum(ft, pg, ctx, 0, 0);
  ft->joining =
      ft->q.id > 1;  // the launch's replicas meet in quorum 1 (a replacement before it: one of them)
  if (ft->joining)
    fprintf(stderr, "replica %d (incarnation %d): joins quorum %d as rank %d of %d; heals from rank %d\n",
            ft->replica, ft->incarnation, ft->q.id, ft->q.rank, ft->q.world_size, ft->q.source);
  return ft->joining;
}

bool ft_join_requested(Ft *ft, ProcessGroup *pg, const Ctx *ctx) {
  if (!ft->on) return false;
  int agreed = 0;
  if (ft->join_pending) {  // the sum started after the previous step: one rank heard it, all go now
    dist_wait(pg, &ft->join_work);
    dev_download(ctx, &agreed, ft->flag, sizeof agreed);
    ft->join_pending = false;
  }
  if (agreed > 0 && !dist_failure(pg)) return true;  // (a failure: the next step's start recovers)
  int heard = lighthouse_join_waiting(ft->lh);
  dev_upload(ctx, ft->flag, &heard, sizeof heard);
  dist_all_reduce_async(pg, ft->flag, 1, DIST_INT, DIST_SUM, &ft->join_work);
  ft->join_pending = true;
  return false;
}

void ft_start_step(Ft *ft, long long step, float *params, const Ctx *ctx) {
  ft->t_step = log_clock();
  if (ft->replica == ft->kill_replica && step == ft->kill_step) {
    fprintf(stderr, "replica %d (pid %ld): test hook: SIG%s at the start of step %lld\n", ft->replica,
            (long)getpid(), ft->kill_sig == SIGKILL ? "KILL" : "STOP", step);
    fflush(NULL);
    raise(ft->kill_sig);
  }
  if (!ft->on) return;
  if (ft->replica == ft->spoil_replica && step == ft->spoil_step) {
    float x;
    dev_download(ctx, &x, params, sizeof x);
    x += 1.0f;
    dev_upload(ctx, params, &x, sizeof x);
    fprintf(stderr, "replica %d: test hook: its first parameter corrupted at the start of step %lld\n",
            ft->replica, step);
  }
}

void ft_committed(Ft *ft, const ProcessGroup *pg, int epoch, long long step, long long cursor, int G,
                  const int *ids, int n) {
  if (!ft->samples) return;
  fprintf(ft->samples, "epoch %d step %lld cursor %lld G %d W %d rank %d:", epoch, step, cursor, G,
          pg->world_size, pg->rank);
  for (int i = 0; i < n; i++) fprintf(ft->samples, "%s%d", i ? "," : " ", ids[i]);
  fputc('\n', ft->samples);
  fflush(ft->samples);  // a SIGKILL loses nothing it committed
}

bool ft_failed(Ft *ft, ProcessGroup *pg) { return ft->on && dist_failure(pg) != NULL; }

bool ft_should_commit(Ft *ft, ProcessGroup *pg, long long step) {
  const char *why = ft->on ? dist_failure(pg) : NULL;
  if (!why && ft->redo) {  // the recovery ends with the redone step: its phases, one line
    ft->redo = false;
    double now = log_clock();
    log0(
        "recovery: step %lld redone at %d ranks; detect %.3f s, quorum %.3f s, reconnect %.3f s, heal %lld B "
        "in "
        "%.3f s, redo %.3f s (total %.3f s)\n",
        step, pg->world_size, ft->t_seen - ft->t_begin, ft->quorum_s, ft->reconnect_s, ft->heal_bytes,
        ft->heal_s, now - ft->t_ready, now - ft->t_begin);
  }
  if (!why) return true;
  if (!ft->failed) {
    ft->failed = step;
    ft->t_begin = ft->t_step;
    ft->t_seen = log_clock();
    fprintf(stderr, "rank %d of %d (replica %d): step %lld: %s -> step %lld not committed\n", pg->rank,
            pg->world_size, ft->replica, step, why, step);
  }
  return false;
}

void ft_quorum(Ft *ft, ProcessGroup *pg, const Ctx *ctx, long long step, uint64_t digest) {
  bool join = !dist_failure(pg);  // nothing failed: a replica waits to join
  if (join) {
    ft->t_seen = ft->t_begin = log_clock();
    fprintf(stderr, "rank %d of %d (replica %d): after step %lld: a replica waits to join\n", pg->rank,
            pg->world_size, ft->replica, step);
  } else if (!ft->failed) {  // failed after the step's vote (a later collective): seen now
    ft->failed = step + 1;
    ft->t_seen = ft->t_begin = log_clock();
    fprintf(stderr, "rank %d of %d (replica %d): after step %lld: %s\n", pg->rank, pg->world_size,
            ft->replica, step, dist_failure(pg));
  }
  int before = pg->world_size;
  if (ft->join_pending) dist_wait(pg, &ft->join_work);  // (done, or failed with the group)
  ft->join_pending = false;
  dist_abandon(pg);  // at once: a peer still waiting on this rank fails now, not after its timeout
  join_quorum(ft, pg, ctx, step, digest);
  char ids[256] = "";  // the members, as the lighthouse's line names them; one write, not interleaved
  for (int i = 0, n = 0; i < ft->q.world_size && n < (int)sizeof ids - 16; i++)
    n += snprintf(ids + n, sizeof ids - (size_t)n, "%s%d", i ? ", " : "", ft->q.replicas[i]);
  fprintf(
      stderr,
      "rank %d of %d (replica %d): quorum %d = replicas [%s], max_step %lld, world %d -> %d; detect %.3f s, "
      "quorum %.3f s, reconnect %.3f s\n",
      ft->q.rank, ft->q.world_size, ft->replica, ft->q.id, ids, ft->q.max_step, before, ft->q.world_size,
      ft->t_seen - ft->t_begin, ft->quorum_s, ft->reconnect_s);
  ft->failed = 0;
  ft->redo = !join;
  ft->heal_bytes = 0;
  ft->heal_s = 0;
  ft->t_ready = log_clock();
}

void ft_healed(Ft *ft, const ProcessGroup *pg, long long step, long long bytes, double seconds) {
  ft->heal_bytes = bytes;
  ft->heal_s = seconds;
  ft->t_ready = log_clock();
  if (ft->joining) {  // this replacement's own heal: it has joined
    ft->joining = false;
    fprintf(stderr, "replica %d (incarnation %d): healed at step %lld: %lld B in %.3f s\n", ft->replica,
            ft->incarnation, step, bytes, seconds);
    return;
  }
  if (ft->redo) return;  // a failed step's recovery ends with its redo (ft_should_commit)
  log0(
      "recovery: %d ranks from step %lld; quorum %.3f s, reconnect %.3f s, heal %lld B in %.3f s (total %.3f "
      "s)\n",
      pg->world_size, step, ft->quorum_s, ft->reconnect_s, bytes, seconds, ft->t_ready - ft->t_begin);
}

void ft_free(Ft *ft, ProcessGroup *pg, const Ctx *ctx) {
  if (ft->join_pending) dist_wait(pg, &ft->join_work);
  if (ft->flag) dist_work_free(pg, &ft->join_work);
  if (ft->lh) lighthouse_leave(ft->lh);
  if (ft->flag) dev_free(ctx, ft->flag);
  if (ft->samples) fclose(ft->samples);
  ft->samples = NULL;
  ft->lh = NULL;
  ft->flag = NULL;
}
