"""The exercise checker's knowledge of the typical mistakes: what a failed run's output most likely
means. On import, hint() is registered with the harness (launch.HINTERS), whose run() adds the first
matching cause to a failure's sentence.
"""
import re

from tests.harness import launch
from tests.harness.env import small
from tests.harness.launch import run


ABORTED = ("a rank aborted (SIGABRT, exit status 134): when a run that trained aborts as it ends, the C library "
           "found its heap overwritten as memory was freed: something wrote past the end of a buffer, typically a "
           "count too large for it, e.g. a count in bytes where a call takes elements (dist_all_reduce's count is "
           "in elements of its type: CLIP_SUMS doubles, not CLIP_SUMS * sizeof(double)); a failed assert aborts too")

# Step 09's live recovery (exercise 09: exercises/checker/live09.py): the vote, the reshard, the heal
LIVE_NO_VOTE = ("the step in which a replica died was applied anyway: after each step every rank must vote "
                "(ft_should_commit, for step t->step + 1) and apply the step (commit) only when the vote says "
                "yes; when a collective of the step failed, nothing of it may be applied (`continue`: a new "
                "quorum forms and the step is done again)")
LIVE_BEFORE_VOTE = ("the update was applied before the vote: the failed step was reported not committed, yet its "
                    "partial gradient (a different one on each survivor: their all-reduce broke off) was already "
                    "in the parameters and the momentum: commit(t) must come after ft_should_commit, and only "
                    "when it returns true")
LIVE_NO_RESHARD = ("each rank continued from its own index in the order laid out for the old world: after a new "
                   "quorum the rest of the epoch must be resharded from the cursor for the new world (epoch_order "
                   "in recover(): this rank's samples of each block from cursor(t), for its new rank and world "
                   "size), and run_epoch reads them from their start: samples were trained twice and others never")
LIVE_HEAL_CURSOR = ("the members of one step read different blocks of the epoch: the replacement's position "
                    "(the cursor, cursor(t) = t->epoch_step · G) is not the others': the heal must take from its "
                    "source where it is in the epoch, t->epoch_step (with the step, the epoch, the epoch's world "
                    "and G), not only the step")
LIVE_HEAL_STEP = ("the replacement did not take the source's state: heal() must broadcast, from rank "
                  "t->ft.q.source of the new group, the parameters (t->model.params), the momentum (t->opt.buf) "
                  "and where the source is (its step, epoch, t->epoch_step, t->epoch_world, t->global_batch, "
                  "t->opt.steps), and take them all (t->step first: ft_healed reports it)")
LIVE_HEAL_MOMENTUM = ("the replacement's first step after the heal matched the resumed run's (same parameters), "
                      "the next ones did not: the heal gave it the parameters but not the optimizer's state: "
                      "broadcast the momentum buffer (t->opt.buf) too, and take the optimizer's step count "
                      "(t->opt.steps)")
LIVE_HEAL_PARAMS = ("the replacement's first step after the heal did not match the resumed run's: the heal did "
                    "not give it the source's parameters (broadcast t->model.params from rank t->ft.q.source), or "
                    "not its position (step, epoch, t->epoch_step, t->epoch_world, t->global_batch)")


def diagnose_disagree(text):
    """The lighthouse refused a quorum: the survivors' parameters differ. At the step before the one that failed
    (reported not committed): the failed step's update went in before the vote; with no step reported not
    committed: there was no vote."""
    at = re.search(r"replicas disagree at step (\d+)", text)
    gone = re.search(r"step (\d+): .*-> step \d+ not committed", text)
    if not gone:
        return LIVE_NO_VOTE
    if at and int(at.group(1)) == int(gone.group(1)) - 1:
        return LIVE_BEFORE_VOTE
    return ("the replicas' parameters differ at a quorum: a step was applied on some of them only, or a heal "
            "did not give every member the source's parameters (t->model.params)")


# What a failed run's output most likely means, for the typical mistakes of the exercises: (text in
# stdout or stderr, the likely cause[, the steps it is about]). The first match for the failed run's
# step is added to the failure's sentence: one message of dist.c (e.g. "dist_wait: no all-reduce in
# flight") has a different cause in step 06's reducer than in step 08's fsdp.c. A cause may be a
# function of the output, which runs the learner's program again to tell two causes apart.
HINTS = [
    # step 09 (exercise 09): the live drills' outputs, and live09.py's own sentences (check_tiling's)
    ("replicas disagree at step", diagnose_disagree, ("09",)),
    ("records of ranks", LIVE_NO_VOTE, ("09",)),  # a step committed by some ranks of its world only
    ("disagree on its block", LIVE_HEAL_CURSOR, ("09",)),
    ("samples trained,", LIVE_NO_RESHARD, ("09",)),  # blocks tile the epoch, samples do not
    ("a peer sent what this rank did not expect", "after a recovery the members called different collectives: "
     "they disagree on where they are in the epoch (a heal that did not take the source's position, "
     "t->epoch_step, or its epoch) or on the world", ("09",)),
    ("watchdog:", "the job hung and the watchdog ended it: likely a collective that only some ranks "
                  "reach (a dist_barrier or dist_all_reduce inside `if (rank == 0)`, or skipped on "
                  "some ranks), or that the ranks reach in a different order or number of times"),
    ('without calling "finalize"', "a rank ended without leaving the process group: call "
                                  "dist_destroy before the program ends (in cleanup)"),
    # step 08 (fsdp.c): the state machine's and dist.c's refusals, named after the FSDP mistake
    ("dist_all_gather_async: this handle is still in flight",
     "a layer's all-gather was started again while its previous one was never waited for: "
     "wait_for_unshard must dist_wait a GATHERING layer's gather (f->gather[f->gather_pass[l]][l]) before "
     "the layer runs on its buffer"),
    ("gathered buffer still holds", "a layer was gathered while the other layer of its buffer (l ± 2) was "
                                    "still gathered: prefetch only the layer that runs next (l + 1 in "
                                    "forward, l - 1 in backward), and reshard each layer when it is done"),
    ("a prefetch never waited for", "an all-gather was still pending when backward ended (a prefetch "
                                    "never waited for): no gather may be pending after backward: prefetch "
                                    "only a layer that runs next in the same pass (none after layer 0's "
                                    "backward); the next step's forward gathers layer 0 itself"),
    ("recv overlaps send but is not this rank's chunk", "the reduce-scatter receives, in place, outside "
     "this rank's own chunk of the send buffer: in fsdp.c rank r receives at g + r·f->shard[l] "
     "(f->pg->rank, not another rank's chunk)", ("08",)),
    ("recv overlaps send but is not this rank's chunk", lambda text: diagnose_zero_recv(), ("07",)),
    ("recv overlaps send but is not this rank's chunk", "the reduce-scatter receives, in place, outside this "
     "rank's own chunk of the send buffer, or its counts are not each rank's part of it: in fsdp.c rank r "
     "receives at g + r·f->shard[l]; in step 07's reducer.c at grads + rank·S + b->shard_offset, counts b->counts"),
    ("this handle is still in flight", "a layer's reduce-scatter was started again while its previous one was "
                                       "never waited for: in fsdp.c, fold_gradient must dist_wait each layer's "
                                       "reduce-scatter (f->reduce[l]) once per backward", ("08",)),
    ("this handle is still in flight", lambda text: diagnose_restarted_bucket(), ("06",)),
    ("this handle is still in flight", "an all-reduce was started on a bucket whose previous "
                                       "all-reduce was never waited for: reducer_finalize_backward must "
                                       "dist_wait every bucket, and each bucket is started once per step"),
    ("no all-reduce in flight on this handle", "dist_wait on a handle with no collective in flight: in fsdp.c, "
     "wait_for_unshard must dist_wait a layer's all-gather only while it is in flight (f->state[l] == "
     "FSDP_GATHERING): a layer already UNSHARDED (the last layer, kept from forward for backward) has none; "
     "and fold_gradient waits for each layer's reduce-scatter once", ("08",)),
    ("no all-reduce in flight on this handle", "dist_wait on a bucket that was not started, or was "
                                               "already waited for: wait for each bucket once, in "
                                               "reducer_finalize_backward"),
    ("buckets never became ready", "a bucket was never started: every tensor must be counted down in "
                                   "its bucket (mark_variable_ready) and every ready bucket started "
                                   "(mark_bucket_ready), on every rank: a layer whose hook is not called "
                                   "on some rank leaves its bucket unready there (PyTorch says \"Expected to "
                                   "have finished reduction in the prior iteration before starting a new "
                                   "one\": a parameter that took no part in the loss)"),
    # a rank that ended on SIGABRT (exit status 134; Open MPI: "exited on signal 6 (Aborted)"), often at the
    # very end of a run that trained: glibc's free() found its heap overwritten (issue 40, K3)
    *[(needle, ABORTED) for needle in ("signal 6 (Aborted)", "free(): ", "malloc(): ", "double free or corruption",
                                       "corrupted size vs", "stack smashing detected")],
    # scripts/launch.sh's line for a rank that died of SIGSEGV (128 + 11): under an environment launch
    # (Gloo) the process group has no communicator and no device context until dist_connect, under
    # mpirun MPI needs neither: a program that never calls it crashes under launch.sh, not under mpirun
    ("a rank exited with status 139", "a rank crashed (segmentation fault) under scripts/launch.sh (the Gloo "
                                      "backend): if the same program passes under mpirun, dist_connect was "
                                      "never called (MPI works without it; Gloo gets its communicator, and "
                                      "every backend the device context, from dist_connect, after "
                                      "device_init); else an index out of range"),
    ("Segmentation fault", "a rank crashed (segmentation fault): e.g. a collective before dist_connect "
                           "gave the process group its device context, or an index out of range"),
]


def hint(text, step=None):
    """The likely cause of a failed run of `step` (a program's name, or None: any step) from its output."""
    for needle, cause, *steps in HINTS:
        if needle in text and (not steps or (step is not None and step[:2] in steps[0])):
            return cause(text) if callable(cause) else cause
    return None

# A model whose 2 buckets are exactly the 2 ranks' shards (784-444-766-10: 697,080 parameters, S =
# 348,540; bucket 0, from the last layer back to layer 1's weight, is 348,540 floats, past the first 1 MiB
# limit: it closes at layer 1's weight, where shard 1 starts; bucket 1 is the rest): each bucket lies in
# one rank's shard from its start, so b->shard_offset is 0, and the receive pointer of every typical
# mistake (grads + b->offset, + b->shard_offset, + rank·S) is the right one; the counts are [0, S] and
# [S, 0], not equal shares.
ZERO_ALIGNED = small(dataset_size=512, hidden="444,766") + ["--batch_size", "64", "--epochs", "1", "--max_steps", "2",
                                                            "--bucket_cap_mb", "25"]


def diagnose_zero_recv():
    """Step 07's reduce-scatter was refused (recv overlaps send, not this rank's chunk of it): its
    receive pointer, or its counts? On ZERO_ALIGNED the pointer of every typical mistake is right, the
    counts must still be each rank's part of the bucket."""
    _, err = run("07_zero", ZERO_ALIGNED, np=2, expect_rc=None)
    if "recv overlaps send but is not this rank's chunk" in err:
        return ("in reducer.c the counts are not each rank's part of the bucket: on a model whose 2 buckets are "
                "exactly the 2 shards (each bucket's counts [0, S] or [S, 0]; the receive pointer is the start of "
                "this rank's shard whatever its form), the reduce-scatter was still refused: the counts must be "
                "b->counts (dist_shard_counts: how many of the bucket's floats lie in each rank's shard, uneven, "
                "often 0), not an equal share such as b->count / W")
    if "recv overlaps send" not in err and "error:" not in err:
        return ("in reducer.c the receive pointer is not this rank's part of the bucket: it must be where that "
                "part lies in the flat gradient buffer, grads + rank·S + b->shard_offset (r->pg->rank · r->shard "
                "floats in, then b->shard_offset), with the counts b->counts (on a model whose buckets are exactly "
                "the shards, where b->shard_offset is 0 and every bucket starts a shard, it works)")
    return ("the reduce-scatter receives, in place, outside this rank's own chunk of the send buffer: in step 07's "
            "reducer.c the receive pointer must be grads + rank·S + b->shard_offset and the counts b->counts")


# One step of step 06 at one rank, with 3 buckets (the --hidden and cap of step06_replicas_np2's
# first run): enough for a bucket to be started twice in one backward.
ONE_STEP_06 = small(hidden="16,9728") + ["--epochs", "1", "--max_steps", "1", "--bucket_cap_mb", "0.00005"]


def diagnose_restarted_bucket():
    """Step 06's reducer started a bucket whose all-reduce was still in flight: within one backward (a
    single step at one rank ends so too: the bucket was started twice, r->next_bucket not advanced past
    it), or in a later step (the previous step's all-reduce was never waited for)?"""
    _, err = run("06_full", ONE_STEP_06, expect_rc=None)
    if "this handle is still in flight" in err:
        return ("a bucket was started twice in one backward (a single step at one rank ends so too, so no "
                "earlier step's missing wait is the cause): in reducer.c mark_bucket_ready must advance "
                "r->next_bucket past each bucket it starts (int i = r->next_bucket++), so that its loop, and "
                "the next hook, go on from the first bucket not yet started")
    return ("an all-reduce was started on a bucket whose previous all-reduce was never waited for (a single "
            "step at one rank starts no bucket twice): reducer_finalize_backward must dist_wait every bucket, "
            "and each bucket is started once per step")


launch.HINTERS.append(hint)
