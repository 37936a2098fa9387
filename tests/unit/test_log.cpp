// log.h: loss_check_finite lets a finite loss through and ends the job on NaN or an infinity.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <limits>

#include "log.h"

TEST(LossCheck, FiniteLossesReturn) {
  loss_check_finite(0.0f, 1);
  loss_check_finite(2.3f, 12);
  loss_check_finite(-1e30f, 3);  // huge but finite: not this check's business
  loss_check_finite(std::numeric_limits<float>::max(), 4);
  loss_check_finite(std::numeric_limits<float>::denorm_min(), 5);
  SUCCEED();
}

TEST(LossCheckDeathTest, NonFiniteLossEndsTheJobNamingTheStep) {
  EXPECT_EXIT(
      {
        loss_check_finite(std::nanf(""), 12);
        std::exit(100);
      },
      ::testing::ExitedWithCode(1),
      "error: step 12: the loss is nan: training diverged \\(try a smaller --lr\\); no checkpoint "
      "was written for this epoch");
  EXPECT_EXIT(
      {
        loss_check_finite(INFINITY, 7);
        std::exit(100);
      },
      ::testing::ExitedWithCode(1), "step 7: the loss is inf: training diverged");
  EXPECT_EXIT(
      {
        loss_check_finite(-INFINITY, 3000000000LL);
        std::exit(100);
      },
      ::testing::ExitedWithCode(1), "step 3000000000: the loss is -inf");
}
