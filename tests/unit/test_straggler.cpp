// The straggler report's verdict (straggler_verdict) and its metrics object (metrics_straggler): a
// rank is named when the others lose more than STRAGGLER_SHARE of the median step waiting for it, and
// only then; the object holds every rank's figures in rank order.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "metrics.h"
#include "straggler.h"

namespace {

// One rank's figures: data, compute to arrival, wait, step (ms).
std::vector<float> ranks(std::initializer_list<std::initializer_list<float>> rows) {
  std::vector<float> v;
  for (auto r : rows) {
    EXPECT_EQ(r.size(), (size_t)STRAGGLER_FIGS);
    v.insert(v.end(), r.begin(), r.end());
  }
  return v;
}

TEST(Straggler, NamesTheRankThatArrivesLateAgainstTheOthersMedian) {
  // rank 2 arrives 50 ms after the others (0.5 + 57.5 against 0.5 + 7.5); they wait ~50 ms of a 66 ms step
  auto fig = ranks({{0.5f, 7.5f, 50.f, 66.f},
                    {0.5f, 7.0f, 51.f, 66.f},
                    {0.5f, 57.5f, 0.1f, 66.f},
                    {0.5f, 8.0f, 49.f, 66.f}});
  float late, wait, step;
  EXPECT_EQ(straggler_verdict(fig.data(), 4, &late, &wait, &step), 2);
  EXPECT_FLOAT_EQ(late, 50.f);  // 58 - median(8, 7.5, 8.5)
  EXPECT_FLOAT_EQ(wait, 50.f);  // median of the others' waits (50, 51, 49)
  EXPECT_FLOAT_EQ(step, 66.f);
}

TEST(Straggler, TwoRanksCompareEachWithTheOther) {
  auto fig = ranks({{0.1f, 69.6f, 0.0f, 81.f}, {0.1f, 8.0f, 66.f, 81.f}});
  float late, wait, step;
  EXPECT_EQ(straggler_verdict(fig.data(), 2, &late, &wait, &step), 0);
  EXPECT_FLOAT_EQ(late, 61.6f);
  EXPECT_FLOAT_EQ(wait, 66.f);
}

TEST(Straggler, NamesNoneBelowTheShareOfTheStep) {
  // 3 ms late in a 15 ms step: 20 %, below 25 %; the same lateness in a 10 ms step is 30 %: named
  auto fig = ranks({{0.1f, 7.f, 3.f, 15.f}, {0.1f, 10.f, 0.f, 15.f}});
  float late, wait, step;
  EXPECT_EQ(straggler_verdict(fig.data(), 2, &late, &wait, &step), -1);
  EXPECT_FLOAT_EQ(late, 3.f);
  fig[3] = fig[7] = 10.f;
  EXPECT_EQ(straggler_verdict(fig.data(), 2, &late, &wait, &step), 1);
}

TEST(Straggler, DataTimeCountsTowardsTheArrival) {
  // the same compute, but rank 1 takes 40 ms to load its batch: it is the one the others wait for
  auto fig = ranks({{0.2f, 8.f, 40.f, 55.f}, {40.2f, 8.f, 0.f, 55.f}, {0.2f, 8.f, 40.f, 55.f}});
  float late, wait, step;
  EXPECT_EQ(straggler_verdict(fig.data(), 3, &late, &wait, &step), 1);
  EXPECT_FLOAT_EQ(late, 40.f);
}

TEST(Straggler, OneRankNamesNone) {
  auto fig = ranks({{0.1f, 9.f, 0.f, 12.f}});
  float late, wait, step;
  EXPECT_EQ(straggler_verdict(fig.data(), 1, &late, &wait, &step), -1);
  EXPECT_FLOAT_EQ(late, 0.f);
  EXPECT_FLOAT_EQ(step, 12.f);
}

TEST(Straggler, MetricsObjectHoldsEveryRanksFiguresInRankOrder) {
  std::string path = ::testing::TempDir() + "straggler_metrics.jsonl";
  Metrics m;
  metrics_open(&m, path.c_str(), 0, 1);
  auto fig = ranks({{0.5f, 7.5f, 50.f, 66.f}, {0.25f, 57.5f, 0.125f, 66.f}});
  metrics_straggler(&m, 11, 20, 2, fig.data(), 1, 49.75f);
  metrics_straggler(&m, 21, 30, 2, fig.data(), -1, 1.5f);
  metrics_close(&m);
  std::ifstream f(path);
  std::string a, b;
  ASSERT_TRUE(std::getline(f, a) && std::getline(f, b));
  EXPECT_EQ(a,
            "{\"type\":\"straggler\",\"first_step\":11,\"step\":20,\"data_ms\":[0.5,0.25],\"compute_ms\":[7."
            "5,57.5],"
            "\"wait_ms\":[50,0.125],\"step_ms\":[66,66],\"late_rank\":1,\"late_ms\":49.75}");
  EXPECT_NE(b.find("\"late_rank\":null,\"late_ms\":1.5}"), std::string::npos) << b;
  std::remove(path.c_str());
}

}  // namespace
