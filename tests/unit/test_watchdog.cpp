// The watchdog ends a rank whose wait takes too long, and lets normal waits through; its threads
// bind (select the rank's GPU) before they poll or abort; an abort that hangs does not keep the rank
// alive; a call that blocks before its collective is recorded for the poll is still ended; once an
// abort has begun, no collective and no checkpoint save starts.
#include <gtest/gtest.h>

#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <unistd.h>

extern "C" {
#include "check.h"
#include "ckpt.h"
#include "dist.h"
#include "watchdog.h"
}

namespace {
int poll_error(void *, double, char *why) {
  std::snprintf(why, 256, "injected error");
  return 1;
}
void announce_abort(void *) { std::fprintf(stderr, "abort hook ran\n"); }
void hang(void *) {
  for (;;) pause();  // like ncclCommAbort waiting for peers that are gone
}

// The bind hook records the thread it ran on; the poll and the abort say whether it ran on theirs.
thread_local bool bound_here = false;
void bind(void *) { bound_here = true; }
int poll_reports_binding(void *, double, char *why) {
  std::snprintf(why, 256, "%s", bound_here ? "poll ran after bind on its thread" : "poll ran UNBOUND");
  return 1;
}
void abort_reports_binding(void *) {
  std::fprintf(stderr, "%s\n", bound_here ? "abort ran after bind on its thread" : "abort ran UNBOUND");
}

std::atomic<int> calls{0};
void count(void *) { calls++; }

// A poll like NCCL's: it sees a collective only once its call has returned and recorded it (an
// event queued after it), and reports it when it is older than the timeout.
std::atomic<double> recorded_at{0};
int poll_recorded(void *, double timeout, char *why) {
  double t = recorded_at.load();
  if (t > 0 && static_cast<double>(time(nullptr)) - t > timeout) {
    std::snprintf(why, 256, "the recorded collective has not finished");
    return 1;
  }
  return 0;
}
// The host side of a collective that blocks before it returns (NCCL >= 2.22 connecting its peers
// inside the first call of each algorithm, and the peer never comes): it never gets to record itself.
std::atomic<bool> peer_arrived{false};
void enqueue_that_blocks() {
  // Nothing but the announcement ends this wait: give up after 10 s with a status the test does not
  // expect, so that a regression fails instead of hanging.
  for (int i = 0; i < 10000 && !peer_arrived; i++) usleep(1000);
  if (!peer_arrived) _exit(7);
  recorded_at = static_cast<double>(time(nullptr));
}

// An abort that takes a while (ncclCommAbort), during which the main thread would run on.
std::atomic<bool> abort_began{false};
void slow_abort(void *) {
  abort_began = true;
  sleep(2);
}
void *exit_later(void *) {
  sleep(1);
  _exit(3);  // the abort under way ends the process
}
}  // namespace

TEST(Watchdog, ShortWaitsPass) {
  watchdog_start(0.5, nullptr, nullptr, nullptr, nullptr);
  for (int i = 0; i < 5; i++) {
    watchdog_enter("MPI_Allreduce");
    usleep(50 * 1000);  // well under the timeout
    watchdog_leave();
  }
  usleep(700 * 1000);  // longer than the timeout, but no wait is in progress
  watchdog_stop();
  SUCCEED();
}

TEST(Watchdog, BoundedCallReturnsWhatFinished) {
  calls = 0;
  EXPECT_TRUE(watchdog_call_bounded(count, nullptr, 30.0));
  EXPECT_EQ(calls.load(), 1);
  EXPECT_FALSE(watchdog_call_bounded(hang, nullptr, 0.2));  // returns although fn never does
}

TEST(WatchdogDeathTest, EndsAStuckWait) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        watchdog_start(0.3, nullptr, nullptr, announce_abort, nullptr);
        watchdog_enter("MPI_Allreduce");
        sleep(10);  // a peer that never joins
      },
      ::testing::ExitedWithCode(1), "MPI_Allreduce has waited more than 0.3 s(.|\n)*abort hook ran");
}

// Waits nest (an MPI_Bcast inside the NCCL start-up): leaving the inner one keeps the outer one timed.
TEST(WatchdogDeathTest, NestedWaitsKeepTheOuterOne) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        watchdog_start(0.3, nullptr, nullptr, nullptr, nullptr);
        watchdog_enter("ncclCommInitRank");
        watchdog_enter("MPI_Bcast");
        watchdog_leave();
        sleep(10);
      },
      ::testing::ExitedWithCode(1), "ncclCommInitRank has waited more than 0.3 s");
}

TEST(WatchdogDeathTest, EndsOnAReportedError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        watchdog_start(60, poll_error, nullptr, nullptr, nullptr);
        sleep(10);
      },
      ::testing::ExitedWithCode(1), "watchdog: injected error");
}

// A hanging abort (ncclCommAbort with dead peers) is given up after its bound: the rank still ends.
// Without the bound this test would hang until CTest's timeout.
TEST(WatchdogDeathTest, AHangingAbortDoesNotKeepTheRankAlive) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        watchdog_start(0.3, nullptr, nullptr, hang, nullptr);
        watchdog_enter("MPI_Allreduce");
        for (;;) pause();
      },
      ::testing::ExitedWithCode(1), "the abort did not finish within 0.3 s; exiting without it");
}

// Every thread of the watchdog that may touch CUDA calls the bind hook first (NCCL: cudaSetDevice to
// the rank's GPU; without it, the thread's first CUDA call makes a context on GPU 0).
TEST(WatchdogDeathTest, PollAndAbortRunAfterBindOnTheirThreads) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        watchdog_start(60, poll_reports_binding, bind, abort_reports_binding, nullptr);
        sleep(10);
      },
      ::testing::ExitedWithCode(1),
      "poll ran after bind on its thread(.|\n)*abort ran after bind on its thread");
}

// The poll alone cannot see a collective whose host call blocks before it is recorded; announcing
// the host call (as dist_nccl.c does for every NCCL call that talks to peers) ends the rank.
TEST(WatchdogDeathTest, EndsAHostCallThatBlocksBeforeItsCollectiveIsRecorded) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        watchdog_start(0.3, poll_recorded, nullptr, nullptr, nullptr);
        WATCHDOG_WAIT("ncclAllReduce (NCCL host call)", enqueue_that_blocks());
      },
      ::testing::ExitedWithCode(1), "ncclAllReduce \\(NCCL host call\\) has waited more than 0.3 s");
}

// While the watchdog's abort runs (2 s here), the main thread must not start another collective:
// exit status 5 would say that dist_barrier() returned after the abort had begun.
TEST(WatchdogDeathTest, NoCollectiveStartsOnceTheAbortHasBegun) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ProcessGroup pg;
        std::memset(&pg, 0, sizeof pg);  // one process, MPI backend: every collective is the identity
        watchdog_start(60, poll_error, nullptr, slow_abort, nullptr);
        for (;;) {
          bool began = abort_began;
          dist_barrier(&pg);
          if (began) _exit(5);
          usleep(1000);
        }
      },
      ::testing::ExitedWithCode(1), "watchdog: injected error");
}

// Nor a checkpoint save (its parameters may be partly reduced): exit status 4 would say that
// ckpt_save() ran; 3 is the abort ending the process.
TEST(WatchdogDeathTest, NoCheckpointIsSavedOnceTheJobIsEnding) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        pthread_t aborting;
        pthread_create(&aborting, nullptr, exit_later, nullptr);
        check_set_ending();
        CkptMeta meta;
        std::memset(&meta, 0, sizeof meta);
        char err[256];
        ckpt_save("never.bin", &meta, nullptr, nullptr, err, sizeof err);
        _exit(4);
      },
      ::testing::ExitedWithCode(3), "");
}
