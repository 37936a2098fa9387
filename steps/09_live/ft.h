/*
 * ft.h — step 09's manager of live recovery (torchft's Manager, cut down): the replica's link to the
 * lighthouse, the vote before a step commits, and the new quorum after a step failed.
 *
 * Under scripts/launch.sh --ft (which starts the lighthouse and sets DDP_LIGHTHOUSE, REPLICA_ID and
 * REPLICA_INCARNATION) the process group is recoverable (dist.h): a collective that fails because a
 * peer died or froze does not end the job; it marks the step failed, and the rest of the step's
 * collectives return at once. The step then commits nowhere on this rank (ft_should_commit()), and the
 * next one starts with ft_quorum(): the lighthouse names the new members, the group is rebuilt, and the
 * trainer heals those behind and reshards the epoch. Without --ft every call here is free and the step
 * trains as stage 1 did.
 */
#ifndef FT_H
#define FT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "args.h"
#include "device.h"
#include "dist.h"
#include "lighthouse.h"

#define FT_EXIT_REFUSED 76  // the lighthouse refused a quorum: too few replicas, or replicas that disagree
#define FT_EXIT_LEFT_OUT \
  78  // it refused this replica: left out of a quorum (frozen while the others went
      // on), its state is an old quorum's; a new incarnation may join

typedef struct Ft {
  bool on;                       // under scripts/launch.sh --ft
  int replica;                   // REPLICA_ID: this process's slot, which names it to the lighthouse
  int incarnation;               // REPLICA_INCARNATION: how many times the slot was started before
  Lighthouse *lh;                // the connection and its heartbeat
  Quorum q;                      // the quorum this replica trains in
  double quorum_timeout;         // --ft_quorum_timeout
  long long failed;              // the step that failed (0: none since the last quorum)
  double t_step;                 // when the step in progress began (log_clock())
  double t_begin, t_seen;        // when the failed step began, and when its failure was seen
  double quorum_s, reconnect_s;  // the last recovery's phases
  double heal_s, t_ready;        // its heal (ft_healed()), and when the redo began
  long long heal_bytes;
  bool redo;                   // a recovery is in progress until the redone step commits
  bool joining;                // this process joins a running job (its first quorum was not the first)
  int *flag;                   // device, (1): the all-reduced "a replica waits to join"
  DistWork join_work;          // its all-reduce, started after a step and read after the next
  bool join_pending;           // join_work is in flight
  int kill_replica, kill_sig;  // test hook DDP_TEST_FT_KILL=REPLICA:STEP[:stop]: this replica
  long long kill_step;         // signals itself (SIGKILL, or SIGSTOP) as it starts that step
  FILE *samples;               // test hook DDP_TEST_SAMPLES=PREFIX: each committed step's samples
  int spoil_replica;           // test hook DDP_TEST_FT_CORRUPT=REPLICA:STEP: this replica adds 1 to
  long long spoil_step;        // its first parameter as it starts that step (silent divergence)
} Ft;

// Reads the launch (DDP_LIGHTHOUSE, REPLICA_ID, REPLICA_INCARNATION) and, under --ft, checks the timeout
// hierarchy (ends the job naming the pair out of order) and makes the group recoverable.
void ft_init(Ft *ft, const Args *a, ProcessGroup *pg);
// The first quorum and its group (instead of dist_connect()): every replica of the launch, ranks in
// replica-id order; a replacement stays a group of one until ft_join(). Without --ft: dist_connect().
void ft_connect(Ft *ft, ProcessGroup *pg, const Ctx *ctx);
// A replacement (REPLICA_INCARNATION > 0) asks to join now, its data loaded and its model built (until
// then ft_connect() left it a group of one); returns whether it joined a running job, and so takes its
// state from a peer (the trainer's heal) instead of a checkpoint or its own initialisation. False for
// the launch's replicas (and for a replacement that came before the first quorum: it starts with them).
bool ft_join(Ft *ft, ProcessGroup *pg, const Ctx *ctx);
// After a step: whether a replica waits to join, agreed by every rank so that all go to the quorum at
// the same step boundary. The flag's all-reduce overlaps the next step (read one step later, as
// preempt_agree() reads SIGTERM's): no step waits for it.
bool ft_join_requested(Ft *ft, ProcessGroup *pg, const Ctx *ctx);
// Marks the start of optimizer step `step` (the test hooks fire here: a kill, a parameter corrupted).
void ft_start_step(Ft *ft, long long step, float *params, const Ctx *ctx);
// The vote: true when every collective of step `step` completed on this rank, so that it may apply
// the step; false (once said, with the reason) when one failed: nothing of the step may be applied.
bool ft_should_commit(Ft *ft, ProcessGroup *pg, long long step);
// A committed step's record for the tests (DDP_TEST_SAMPLES=PREFIX: PREFIX_<replica>_<incarnation>.txt, a
// line `epoch E step S cursor C G W rank R: i,j,...` with this rank's `n` samples, flushed at once).
void ft_committed(Ft *ft, const ProcessGroup *pg, int epoch, long long step, long long cursor, int G,
                  const int *ids, int n);
// Whether the group has failed since the last quorum (a step's collectives, or any collective after).
bool ft_failed(Ft *ft, ProcessGroup *pg);
// A new quorum (reporting the committed `step` and the parameters' `digest`) and its group: ends the
// process with FT_EXIT_REFUSED when the lighthouse refuses. The trainer then heals and reshards.
void ft_quorum(Ft *ft, ProcessGroup *pg, const Ctx *ctx, long long step, uint64_t digest);
// Records the heal this replica took part in (bytes received or sent, seconds), and ends a recovery that
// redoes no step (a join): its phases, one line.
void ft_healed(Ft *ft, const ProcessGroup *pg, long long step, long long bytes, double seconds);
// Leaves the lighthouse (after the process group).
void ft_free(Ft *ft, ProcessGroup *pg, const Ctx *ctx);

#endif
