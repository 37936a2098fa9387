// Step 09's cursor sampler: at a fixed world size it yields step 03's shards (DistributedSampler's
// rank r, r + W, r + 2W, ... of the padded permutation), and across a change of world size inside an
// epoch the blocks the ranks take still tile the epoch's list: no position lost, none taken twice.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

extern "C" {
#include "rng.h"
#include "sampler.h"
}

namespace {

// Step 03's rule, written out: rank r's i-th sample of the epoch is perm[(r + i·W) mod n].
std::vector<int> stride_shard(int n, int W, int r, bool drop_last, uint64_t seed, int epoch) {
  std::vector<int> perm(n);
  rng_permutation(perm.data(), n, seed + (uint64_t)epoch);
  int per_rank = drop_last ? n / W : (n + W - 1) / W;
  std::vector<int> out;
  for (int i = 0; i < per_rank; i++) out.push_back(perm[((long long)r + (long long)i * W) % n]);
  return out;
}

TEST(CursorSampler, AtAFixedWorldSizeYieldsTheStrideShards) {
  for (int n : {7, 100, 515, 2048})
    for (int W : {1, 2, 3, 4})
      for (int B : {1, 5, 32})
        for (bool drop_last : {false, true}) {
          Sampler s;
          sampler_init(&s, n, W, drop_last, 42);
          sampler_set_epoch(&s, 3, W);
          for (int r = 0; r < W; r++) {
            std::vector<int> got(2 * n);
            int k = sampler_indices_from(&s, 0, B * W, W, r, got.data());
            got.resize(k);
            EXPECT_EQ(got, stride_shard(n, W, r, drop_last, 42, 3))
                << "n " << n << " W " << W << " B " << B << " drop_last " << drop_last << " rank " << r;
            // and the shares add up to it, block by block
            int sum = 0;
            for (long long c = 0; c < s.total; c += (long long)B * W)
              sum += sampler_share(&s, c, B * W, W, r);
            EXPECT_EQ(sum, k);
          }
          sampler_free(&s);
        }
}

// Every position of the epoch's list, counted: blocks of G at W0 ranks up to the cursor, then at W1.
std::vector<int> taken(const Sampler &s, int G, int W0, long long cursor, int W1) {
  std::vector<int> count(s.total, 0);
  for (long long c = 0; c < s.total; c += G) {
    int W = c < cursor ? W0 : W1;
    for (int r = 0; r < W; r++) {
      int share = sampler_share(&s, c, G, W, r);
      for (int j = 0; j < share; j++) count[c + r + (long long)j * W]++;
    }
  }
  return count;
}

// What the ranks train on across a change of world size, through sampler_indices_from (what the
// trainer uses): each rank of W0 takes its samples of the blocks before `cursor` (its first ones, as
// many as its shares add up to), and each rank of W1 takes its samples from `cursor` on. Together they
// must be the epoch's list, each position's sample as often as the list holds it.
TEST(CursorSampler, WhatTheRanksTakeAcrossAChangeIsTheEpochsList) {
  for (int n : {483, 515, 1000})
    for (bool drop_last : {false, true})
      for (int W0 : {2, 3, 4})
        for (int W1 : {1, 2, 3, 4, 5}) {
          Sampler s;
          sampler_init(&s, n, W0, drop_last, 7);
          sampler_set_epoch(&s, 2, W0);
          int G = 32 * W0;
          for (long long cursor : {0LL, (long long)G, 4LL * G}) {
            std::vector<int> got;
            for (int r = 0; r < W0; r++) {
              int before = 0;
              for (long long c = 0; c < cursor; c += G) before += sampler_share(&s, c, G, W0, r);
              std::vector<int> idx(2 * n);
              int k = sampler_indices_from(&s, 0, G, W0, r, idx.data());
              ASSERT_GE(k, before);
              got.insert(got.end(), idx.begin(), idx.begin() + before);
            }
            for (int r = 0; r < W1; r++) {
              std::vector<int> idx(2 * n);
              int k = sampler_indices_from(&s, cursor, G, W1, r, idx.data());
              got.insert(got.end(), idx.begin(), idx.begin() + k);
            }
            std::vector<int> want;
            for (int p = 0; p < s.total; p++) want.push_back(s.perm[p % n]);
            std::sort(got.begin(), got.end());
            std::sort(want.begin(), want.end());
            ASSERT_EQ(got, want) << "n " << n << " drop_last " << drop_last << ", " << W0 << " -> " << W1
                                 << " ranks at " << cursor;
          }
          sampler_free(&s);
        }
}

TEST(CursorSampler, AChangeOfWorldSizeLosesAndRepeatsNoPosition) {
  for (int n : {483, 515, 1000})
    for (int W0 : {2, 3, 4})
      for (int W1 : {1, 2, 3, 4, 5}) {
        Sampler s;
        sampler_init(&s, n, W0, false, 7);
        sampler_set_epoch(&s, 0, W0);
        int G = 32 * W0;
        for (long long cursor : {0LL, (long long)G, 4LL * G}) {
          std::vector<int> count = taken(s, G, W0, cursor, W1);
          for (int p = 0; p < s.total; p++)
            ASSERT_EQ(count[p], 1) << "position " << p << " of " << s.total << ", n " << n << ", " << W0
                                   << " -> " << W1 << " ranks at " << cursor;
        }
        sampler_free(&s);
      }
}

TEST(CursorSampler, IndicesFromTheCursorAreTheRanksPositionsInOrder) {
  Sampler s;
  sampler_init(&s, 483, 3, false, 11);
  sampler_set_epoch(&s, 1, 3);
  int G = 96;
  long long cursor = 4LL * G;  // 3 ranks took 4 blocks; 4 ranks share the rest: 99 positions
  std::vector<int> all;
  for (int r = 0; r < 4; r++) {
    std::vector<int> got(2 * 483);
    got.resize(sampler_indices_from(&s, cursor, G, 4, r, got.data()));
    std::vector<int> want;
    for (long long c = cursor; c < s.total; c += G)
      for (int j = 0; j < sampler_share(&s, c, G, 4, r); j++) want.push_back(s.perm[(c + r + 4LL * j) % 483]);
    EXPECT_EQ(got, want) << "rank " << r;
    all.insert(all.end(), got.begin(), got.end());
  }
  EXPECT_EQ((long long)all.size(), s.total - cursor);
  // the last block has 3 positions (483 = 5 x 96 + 3): rank 3 has none of it (it trains on a spare)
  EXPECT_EQ(sampler_share(&s, 5LL * G, G, 4, 3), 0);
  EXPECT_EQ(sampler_share(&s, 5LL * G, G, 4, 2), 1);
  sampler_free(&s);
}

TEST(CursorSampler, TheListIsPaddedOrTruncatedForTheEpochsWorldSize) {
  Sampler s;
  sampler_init(&s, 10, 3, false, 1);
  EXPECT_EQ(sampler_total(&s, 3), 12);
  EXPECT_EQ(sampler_total(&s, 4), 12);
  EXPECT_EQ(sampler_total(&s, 1), 10);
  sampler_free(&s);
  sampler_init(&s, 10, 3, true, 1);
  EXPECT_EQ(sampler_total(&s, 3), 9);
  EXPECT_EQ(sampler_total(&s, 4), 8);
  sampler_free(&s);
}

}  // namespace
