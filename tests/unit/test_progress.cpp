// progress.h: the progress line's fields, samples/s and ms/step over the steps since the previous
// line (not since the start), and a resumed run counting only its own steps.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <string>

#include "progress.h"

namespace {

struct Line {
  std::string text;
  double samples_per_s = 0, ms_per_step = 0;
};

// Prints one line as if @p seconds had passed since the previous one (t_last moved back: the test
// reads no clock of its own, so it holds on a machine of any speed).
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
  progress_add(&p, 1280);
  Line l = print_after(&p, 2.0, 1, 10, 0.5f);
  EXPECT_TRUE(std::regex_match(l.text, std::regex("epoch 1/3  step 10/100  loss 0\\.5000  [0-9]+ "
                                                  "samples/s  [0-9]+\\.[0-9] ms/step  ETA [0-9:]+\n")))
      << l.text;
  // 1280 samples and 10 steps in about 2 s: about 640 samples/s and 200 ms a step.
  EXPECT_NEAR(l.samples_per_s, 640, 2) << l.text;
  EXPECT_NEAR(l.ms_per_step, 200, 1) << l.text;
}

TEST(Progress, RatesCoverOnlyTheStepsSinceThePreviousLine) {
  Progress p;
  progress_start(&p, 100, 0);
  progress_add(&p, 640);
  print_after(&p, 1.0, 1, 10, 1.0f);
  progress_add(&p, 320);  // 5 more steps of 64
  Line l = print_after(&p, 0.25, 1, 15, 1.0f);
  EXPECT_NEAR(l.samples_per_s, 1280, 8) << l.text;  // 320 samples in 0.25 s
  EXPECT_NEAR(l.ms_per_step, 50, 1) << l.text;      // 5 steps in 0.25 s
}

TEST(Progress, ResumedRunCountsFromItsFirstStep) {
  Progress p;
  progress_start(&p, 100, 40);  // resumed after step 40
  progress_add(&p, 640);
  Line l = print_after(&p, 1.0, 2, 50, 1.0f);
  EXPECT_NEAR(l.ms_per_step, 100, 1) << l.text;  // 10 steps in 1 s, not 50
  EXPECT_NE(l.text.find("step 50/100"), std::string::npos) << l.text;
}
