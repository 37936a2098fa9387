// Issue 40, V9: after a preemption signal the watchdog's short grace (WATCHDOG_SIGNAL_GRACE_S) counts
// from the signal, not from the start of the wait. A rank that has waited longer than the grace
// before the signal came (the barrier behind rank 0's checkpoint write, which takes more than 5 s)
// is not ended at the signal; one that stays stuck is still ended a grace after it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>

extern "C" {
#include "log.h"
#include "watchdog.h"
}

namespace {
// Waits that began this long before the signal: more than the grace, less than the timeout (60 s).
constexpr double BEFORE_S = WATCHDOG_SIGNAL_GRACE_S + 0.7;

// A poll like NCCL's: a collective queued at `queued_at` (log_clock()) and not finished yet.
std::atomic<double> queued_at{0};
int poll_pending(void *, double, char *why) {
  if (!watchdog_overdue(queued_at.load())) return 0;
  std::snprintf(why, 256, "the queued collective has not finished");
  return 1;
}

void sleep_s(double s) { usleep(static_cast<useconds_t>(s * 1e6)); }
}  // namespace

// Rank 1 in the barrier while rank 0 writes: the signal comes after more than the grace; the write
// ends 1 s later, well inside the grace counted from the signal. Before the fix the watchdog ended
// the rank at the first tick after the signal (exit 1).
TEST(WatchdogGraceDeathTest, AWaitOlderThanTheGraceIsNotEndedAtTheSignal) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        watchdog_start(60, nullptr, nullptr, nullptr, nullptr);
        watchdog_enter("the barrier behind rank 0's checkpoint");
        sleep_s(BEFORE_S);  // the time this test is about: the wait ages past the grace
        watchdog_signal_arrived();
        sleep_s(1.0);  // the write goes on after the signal, then the barrier passes
        watchdog_leave();
        std::fprintf(stderr, "the wait ended normally\n");
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "the wait ended normally");
}

// The grace still ends a rank that stays stuck after the signal, naming the signal.
TEST(WatchdogGraceDeathTest, AStuckWaitStillEndsAGraceAfterTheSignal) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        watchdog_start(60, nullptr, nullptr, nullptr, nullptr);
        watchdog_enter("MPI_Allreduce");
        watchdog_signal_arrived();
        sleep(30);  // never leaves: the watchdog must end it after the grace, long before 60 s
        std::_Exit(7);
      },
      ::testing::ExitedWithCode(1),
      "MPI_Allreduce has waited more than 5 s \\(after a SIGTERM or SIGUSR1, counted from it");
}

// The same for a poll's own wait (NCCL's collective on the GPU): queued before the signal, older than
// the grace then, it is not reported at the signal; still pending a grace after it, it is.
TEST(WatchdogGraceDeathTest, APollsWaitCountsTheGraceFromTheSignal) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        queued_at = log_clock() - BEFORE_S;
        watchdog_start(60, poll_pending, nullptr, nullptr, nullptr);
        watchdog_signal_arrived();
        sleep_s(1.0);
        std::fprintf(stderr, "alive 1 s after the signal\n");
        sleep(30);
        std::_Exit(7);
      },
      ::testing::ExitedWithCode(1),
      "alive 1 s after the signal(.|\n)*the queued collective has not finished");
}
