// loss_log.h on the CPU: every pushed step is logged once, in order, with its epoch; the epoch's
// mean is returned and the next epoch starts afresh; the progress line comes every log_interval
// steps; a non-finite loss ends the job naming the step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "device.h"
#include "loss_log.h"

namespace {
class LossLogCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    path = std::string(DDP_TEST_TMPDIR) + "/loss_log.jsonl";
    device_init(&c, DEVICE_CPU, 0);
    metrics_open(&m, path.c_str(), 0, 1);
    loss_log_init(&g, &c, &m, 1000, 2, 0, 100, nullptr);
  }
  void TearDown() override {
    loss_log_free(&g, &c);
    device_free(&c);
  }
  // The "step" records of the metrics file, as (step, epoch, loss) text triples.
  std::vector<std::string> steps() {
    metrics_close(&m);
    std::ifstream in(path);
    std::vector<std::string> out;
    for (std::string line; std::getline(in, line);)
      if (line.find("\"type\":\"step\"") != std::string::npos) out.push_back(line);
    return out;
  }
  std::string path;
  Ctx c = {};
  Metrics m = {};
  LossLog g = {};
};
}  // namespace

TEST_F(LossLogCpu, EveryStepOnceInOrderAndTheEpochMean) {
  float dev = 0.0f;  // on the CPU, "device memory" is host memory
  for (int i = 1; i <= 5; i++) {
    dev = (float)i;
    loss_log_push(&g, &c, &dev, i, 0, 32);
  }
  EXPECT_DOUBLE_EQ(loss_log_epoch(&g, &c), 3.0);  // (1 + 2 + 3 + 4 + 5) / 5
  dev = 10.0f;
  loss_log_push(&g, &c, &dev, 6, 1, 32);
  EXPECT_DOUBLE_EQ(loss_log_epoch(&g, &c), 10.0);  // a new epoch, a new mean
  EXPECT_DOUBLE_EQ(loss_log_epoch(&g, &c), 0.0);   // an epoch without steps
  auto s = steps();
  ASSERT_EQ(s.size(), 6u);
  for (int i = 0; i < 6; i++)
    EXPECT_NE(s[i].find("\"step\":" + std::to_string(i + 1) + ","), std::string::npos) << s[i];
  EXPECT_NE(s[4].find("\"epoch\":0"), std::string::npos) << s[4];
  EXPECT_NE(s[5].find("\"epoch\":1"), std::string::npos) << s[5];
}

TEST_F(LossLogCpu, NonFiniteLossEndsTheJobNamingTheStep) {
  float dev = 1.0f;
  loss_log_push(&g, &c, &dev, 1, 0, 32);
  dev = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EXIT(loss_log_push(&g, &c, &dev, 2, 0, 32), ::testing::ExitedWithCode(1),
              "step 2: the loss is nan: training diverged");
  dev = std::numeric_limits<float>::infinity();
  EXPECT_EXIT(loss_log_push(&g, &c, &dev, 7, 0, 32), ::testing::ExitedWithCode(1), "step 7: the loss is inf");
}

// The logger owns the progress line: one every log_interval steps, with the run's range (a resumed
// run's first step and its last) and the samples pushed since the previous line.
TEST_F(LossLogCpu, PrintsTheProgressLineEveryIntervalWithTheSamplesPushed) {
  loss_log_free(&g, &c);
  loss_log_init(&g, &c, &m, 2, 3, 4, 10, nullptr);  // every 2 steps; resumed after step 4 of 10
  g.progress.t_last -= 100.0;                       // the first line comes 100 s after the start
  float dev = 6.0f;
  testing::internal::CaptureStdout();
  loss_log_push(&g, &c, &dev, 5, 1, 64);
  loss_log_push(&g, &c, &dev, 6, 1, 64);
  std::string out = testing::internal::GetCapturedStdout();
  // 128 samples in 100 s (and the milliseconds the test takes): 1 samples/s.
  EXPECT_EQ(out.rfind("epoch 2/3  step 6/10  loss 6.0000  1 samples/s  ", 0), 0u) << out;
  EXPECT_EQ(out.find('\n'), out.size() - 1) << out;  // step 5 printed nothing
}

// loss_log_check_finite lets a finite loss through and ends the job on NaN or an infinity.
TEST(LossLogCheckFinite, FiniteLossesReturn) {
  loss_log_check_finite(0.0f, 1);
  loss_log_check_finite(2.3f, 12);
  loss_log_check_finite(-1e30f, 3);  // huge but finite: not this check's business
  loss_log_check_finite(std::numeric_limits<float>::max(), 4);
  loss_log_check_finite(std::numeric_limits<float>::denorm_min(), 5);
  SUCCEED();
}

TEST(LossLogCheckFiniteDeathTest, NonFiniteLossEndsTheJobNamingTheStep) {
  EXPECT_EXIT(
      {
        loss_log_check_finite(std::nanf(""), 12);
        std::exit(100);
      },
      ::testing::ExitedWithCode(1),
      "error: step 12: the loss is nan: training diverged \\(try a smaller --lr\\); no checkpoint "
      "was written for this epoch");
  EXPECT_EXIT(
      {
        loss_log_check_finite(INFINITY, 7);
        std::exit(100);
      },
      ::testing::ExitedWithCode(1), "step 7: the loss is inf: training diverged");
  EXPECT_EXIT(
      {
        loss_log_check_finite(-INFINITY, 3000000000LL);
        std::exit(100);
      },
      ::testing::ExitedWithCode(1), "step 3000000000: the loss is -inf");
}
