// Issue 40, G6: whether NCCL_MAX_CTAS=2 is set is decided from values every rank reads alike, so all
// ranks of a plain srun (no LOCAL_WORLD_SIZE, no SLURM_NTASKS_PER_NODE) decide the same; before, each
// used local_rank + 1, and rank 0 of a node whose 4 ranks share 1 GPU decided otherwise than rank 3.
#include <gtest/gtest.h>

extern "C" {
#include "dist_backend.h"
}

TEST(NcclCtas, RanksPerNodeFromTheLaunchersVariables) {
  EXPECT_EQ(dist_most_ranks_per_node("4", "3", "2"), 4);  // torchrun's first
  EXPECT_EQ(dist_most_ranks_per_node(nullptr, "3", "2"), 3);
  EXPECT_EQ(dist_most_ranks_per_node(nullptr, nullptr, "2(x3),1"), 2);
  EXPECT_EQ(dist_most_ranks_per_node(nullptr, nullptr, "1,4(x2)"), 4);
  EXPECT_EQ(dist_most_ranks_per_node("x", nullptr, "3"), 3);  // an invalid value is skipped
  EXPECT_EQ(dist_most_ranks_per_node(nullptr, nullptr, nullptr), -1);
  EXPECT_EQ(dist_most_ranks_per_node(nullptr, nullptr, "2(y3)"), -1);
  EXPECT_EQ(dist_most_ranks_per_node(nullptr, nullptr, "2,"), 2);  // a trailing comma is tolerated
}

// A plain srun of 4 ranks on one node with 1 GPU: every local rank takes the same decision (the old
// input, local_rank + 1, gave false for local rank 0 and true for 1-3).
TEST(NcclCtas, EveryRankOfAPlainSrunDecidesTheSame) {
  int most = dist_most_ranks_per_node(nullptr, nullptr, "4");
  for (int local_rank = 0; local_rank < 4; local_rank++)
    EXPECT_TRUE(dist_nccl_limit_ctas(true, most, 1)) << "local rank " << local_rank;
  EXPECT_FALSE(dist_nccl_limit_ctas(false, most, 1));  // without NCCL_MULTI_RANK_GPU_ENABLE=1
  EXPECT_FALSE(dist_nccl_limit_ctas(true, -1, 1));     // unknown: nobody sets it
  EXPECT_FALSE(dist_nccl_limit_ctas(true, 2, 2));
}
