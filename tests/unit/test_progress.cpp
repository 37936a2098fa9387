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
