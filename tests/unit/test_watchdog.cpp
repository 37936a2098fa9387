// The watchdog ends a rank whose collective waits too long, and lets normal waits through.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <unistd.h>

#include "watchdog.h"

namespace {
int poll_error(void *, double, char *why) {
  std::snprintf(why, 256, "injected error");
  return 1;
}
void announce_abort(void *) { std::fprintf(stderr, "abort hook ran\n"); }
}  // namespace

TEST(Watchdog, ShortWaitsPass) {
  watchdog_start(0.5, nullptr, nullptr, nullptr);
  for (int i = 0; i < 5; i++) {
    watchdog_enter("MPI_Allreduce");
    usleep(50 * 1000);  // well under the timeout
    watchdog_leave();
  }
  usleep(700 * 1000);  // longer than the timeout, but no wait is in progress
  watchdog_stop();
  SUCCEED();
}

TEST(WatchdogDeathTest, EndsAStuckWait) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        watchdog_start(0.3, nullptr, announce_abort, nullptr);
        watchdog_enter("MPI_Allreduce");
        sleep(10);  // a peer that never joins
      },
      ::testing::ExitedWithCode(1), "MPI_Allreduce has waited more than 0.3 s(.|\n)*abort hook ran");
}

TEST(WatchdogDeathTest, EndsOnAReportedError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        watchdog_start(60, poll_error, nullptr, nullptr);
        sleep(10);
      },
      ::testing::ExitedWithCode(1), "watchdog: injected error");
}
