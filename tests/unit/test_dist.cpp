// The pure helpers of the process group (common/dist.h): dist_shard_counts, the counts of a bucket's
// reduce-scatter against the shards of a flat buffer. The collectives themselves run under mpirun
// (tests/mpi/test_dist.c).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

extern "C" {
#include "dist.h"
}

namespace {
std::vector<size_t> counts(size_t a, size_t b, size_t S, int W) {
  std::vector<size_t> c(W, 99);
  dist_shard_counts(a, b, S, W, c.data());
  return c;
}
}  // namespace

TEST(DistShardCounts, TheWholePaddedBufferGivesEqualCounts) {
  EXPECT_EQ(counts(0, 12, 3, 4), (std::vector<size_t>{3, 3, 3, 3}));
  EXPECT_EQ(counts(0, 5, 5, 1), (std::vector<size_t>{5}));
}

TEST(DistShardCounts, ABufferNotDivisibleByTheWorldLeavesTheLastShardShort) {
  // n = 10, W = 4: S = ceil(10 / 4) = 3, padded to 12; the bucket [0, n) misses the padding
  EXPECT_EQ(counts(0, 10, 3, 4), (std::vector<size_t>{3, 3, 3, 1}));
  // n = 7, W = 4: S = 2, padded to 8: the last shard holds one element and one pad
  EXPECT_EQ(counts(0, 7, 2, 4), (std::vector<size_t>{2, 2, 2, 1}));
  // n = 5, W = 4: S = 2, padded to 8: the last shard is all padding
  EXPECT_EQ(counts(0, 5, 2, 4), (std::vector<size_t>{2, 2, 1, 0}));
}

TEST(DistShardCounts, ABucketInsideOneShardHasOneCount) {
  EXPECT_EQ(counts(6, 9, 5, 3), (std::vector<size_t>{0, 3, 0}));
  EXPECT_EQ(counts(5, 10, 5, 3), (std::vector<size_t>{0, 5, 0}));  // exactly shard 1
}

TEST(DistShardCounts, ABucketAcrossShardsIsCutAtTheirBoundaries) {
  EXPECT_EQ(counts(3, 8, 5, 3), (std::vector<size_t>{2, 3, 0}));
  EXPECT_EQ(counts(2, 14, 5, 3), (std::vector<size_t>{3, 5, 4}));
  EXPECT_EQ(counts(4, 11, 5, 3), (std::vector<size_t>{1, 5, 1}));
}

TEST(DistShardCounts, AnEmptyBucketHasNoCounts) {
  EXPECT_EQ(counts(4, 4, 5, 3), (std::vector<size_t>{0, 0, 0}));
  EXPECT_EQ(counts(15, 15, 5, 3), (std::vector<size_t>{0, 0, 0}));
}

TEST(DistShardCounts, CountsSumToTheBucketForEverySlice) {
  const size_t S = 4;
  const int W = 3;
  for (size_t a = 0; a <= S * W; a++)
    for (size_t b = a; b <= S * W; b++) {
      std::vector<size_t> c = counts(a, b, S, W);
      EXPECT_EQ(std::accumulate(c.begin(), c.end(), size_t{0}), b - a) << "[" << a << ", " << b << ")";
    }
}

TEST(DistShardCounts, ASliceOutsideTheShardsEndsTheJob) {
  size_t c[3];
  EXPECT_EXIT(dist_shard_counts(0, 16, 5, 3, c), ::testing::ExitedWithCode(1), "not inside 3 shards of 5");
  EXPECT_EXIT(dist_shard_counts(6, 5, 5, 3, c), ::testing::ExitedWithCode(1), "not inside");
}
