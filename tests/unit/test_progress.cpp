// progress.h: the progress line's fields, samples/s and ms/step over the steps since the previous
// line (not since the start), and a resumed run counting only its own steps.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <string>

#include "flops.h"
#include "progress.h"

namespace {

struct Line {
  std::string text;
  double samples_per_s = 0, ms_per_step = 0;
};

// Prints one line as if @p seconds had passed since the previous one (t_last moved back: the test
// reads no clock of its own). The real time the test itself takes (milliseconds, more under a
// sanitizer on a busy machine) adds to those seconds, so the tests use intervals of 100 s and more
// and compare within 1 %: a slow machine cannot make them fail, a wrong rate still does.
Line print_after(Progress *p, double seconds, int epoch, long long step, float loss) {
  p->t_last -= seconds;
  testing::internal::CaptureStdout();
  progress_print(p, epoch, 3, step, loss);
  Line l;
  l.text = testing::internal::GetCapturedStdout();
  std::smatch m;
  std::regex re("([0-9]+) samples/s  ([0-9]+\\.[0-9]) ms/step");
  if (std::regex_search(l.text, m, re)) {
    l.samples_per_s = std::stod(m[1]);
    l.ms_per_step = std::stod(m[2]);
  }
  return l;
}

}  // namespace

TEST(Progress, LineHasEveryField) {
  Progress p;
  progress_start(&p, 100, 0);
  progress_add(&p, 128000);
  Line l = print_after(&p, 200.0, 1, 10, 0.5f);
  EXPECT_TRUE(std::regex_match(l.text, std::regex("epoch 1/3  step 10/100  loss 0\\.5000  [0-9]+ "
                                                  "samples/s  [0-9]+\\.[0-9] ms/step  ETA [0-9:]+\n")))
      << l.text;
  // 128000 samples and 10 steps in 200 s: 640 samples/s and 20 s a step.
  EXPECT_NEAR(l.samples_per_s, 640, 6.4) << l.text;
  EXPECT_NEAR(l.ms_per_step, 20000, 200) << l.text;
}

TEST(Progress, RatesCoverOnlyTheStepsSinceThePreviousLine) {
  Progress p;
  progress_start(&p, 100, 0);
  progress_add(&p, 64000);
  print_after(&p, 1000.0, 1, 10, 1.0f);
  progress_add(&p, 32000);  // 5 more steps of 6400
  Line l = print_after(&p, 100.0, 1, 15, 1.0f);
  EXPECT_NEAR(l.samples_per_s, 320, 3.2) << l.text;  // 32000 samples in 100 s, not 96000 in 1100
  EXPECT_NEAR(l.ms_per_step, 20000, 200) << l.text;  // 5 steps in 100 s
}

TEST(Progress, ResumedRunCountsFromItsFirstStep) {
  Progress p;
  progress_start(&p, 100, 40);  // resumed after step 40
  progress_add(&p, 64000);
  Line l = print_after(&p, 100.0, 2, 50, 1.0f);
  EXPECT_NEAR(l.ms_per_step, 10000, 100) << l.text;  // 10 steps in 100 s, not 50
  EXPECT_NE(l.text.find("step 50/100"), std::string::npos) << l.text;
}

TEST(Progress, GflopsAndMfuSinceThePreviousLine) {
  unsetenv("DDP_CPU_PEAK_GFLOPS");
  flops_set_device("cpu", false);  // no peak: GFLOP/s without MFU
  Progress p;
  progress_start(&p, 100, 0);
  progress_add(&p, 6400);
  flops_count(2e12);  // 2 TFLOP in 100 s: 20 GFLOP/s
  Line l = print_after(&p, 100.0, 1, 10, 1.0f);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(l.text, m, std::regex("ETA [0-9:]+  ([0-9]+\\.[0-9]+) GFLOP/s\n"))) << l.text;
  EXPECT_NEAR(std::stod(m[1]), 20.0, 0.2) << l.text;
  setenv("DDP_CPU_PEAK_GFLOPS", "80", 1);
  flops_set_device("cpu", false);
  flops_count(4e12);  // 40 GFLOP/s of 80: 50 %
  l = print_after(&p, 100.0, 1, 20, 1.0f);
  ASSERT_TRUE(std::regex_search(l.text, m, std::regex("([0-9]+\\.[0-9]+) GFLOP/s  MFU ([0-9.]+)%\n")))
      << l.text;
  EXPECT_NEAR(std::stod(m[1]), 40.0, 0.4) << l.text;
  EXPECT_NEAR(std::stod(m[2]), 50.0, 0.5) << l.text;
  l = print_after(&p, 100.0, 1, 30, 1.0f);  // nothing counted since: no rate
  EXPECT_EQ(l.text.find("GFLOP/s"), std::string::npos) << l.text;
  unsetenv("DDP_CPU_PEAK_GFLOPS");
  flops_set_device("cpu", false);
}
