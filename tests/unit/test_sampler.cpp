// The distributed sampler of step 03 against PyTorch's DistributedSampler semantics (DESIGN §3).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

extern "C" {
#include "rng.h"
#include "sampler.h"
}

// Each check says, after "likely cause:", the mistake that usually makes it fail (the exercise
// checker, scripts/check_exercise.sh 03, prints it).
namespace {
// Every rank's indices for one epoch.
std::vector<std::vector<int>> shards(int n, int W, bool drop_last, uint64_t seed, int epoch) {
  std::vector<std::vector<int>> out;
  for (int r = 0; r < W; r++) {
    Sampler s;
    sampler_init(&s, n, W, r, drop_last, seed);
    sampler_set_epoch(&s, epoch);
    std::vector<int> idx(s.num_samples);
    sampler_indices(&s, idx.data());
    out.push_back(idx);
    sampler_free(&s);
  }
  return out;
}
}  // namespace

TEST(Sampler, DivisibleShardsAreDisjointAndCover) {
  auto sh = shards(12, 3, false, 7, 0);
  std::multiset<int> all;
  for (auto &s : sh) {
    EXPECT_EQ(s.size(), 4u) << "likely cause: num_samples is not ceil(N/W) (N = 12, W = 3)";
    all.insert(s.begin(), s.end());
  }
  EXPECT_EQ(all.size(), 12u);
  EXPECT_EQ(std::set<int>(all.begin(), all.end()).size(), 12u)  // each index exactly once
      << "likely cause: the shards overlap: rank r must take positions r, r + W, r + 2W, ... (the "
         "stride is W)";
}

TEST(Sampler, StrideSplitOfTheSharedPermutation) {
  std::vector<int> perm(10);
  rng_permutation(perm.data(), 10, 5 + 2);  // seed 5, epoch 2
  auto sh = shards(10, 2, false, 5, 2);
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 5; i++)
      EXPECT_EQ(sh[r][i], perm[r + 2 * i])
          << "rank " << r << " pos " << i
          << ": likely cause: rank r's i-th index must be perm[r + i * W] (start at the rank, stride W)";
}

TEST(Sampler, PaddingRepeatsFromTheStart) {
  // N = 10, W = 4: num_samples = 3, total = 12, padded with perm[0], perm[1].
  std::vector<int> perm(10);
  rng_permutation(perm.data(), 10, 1);
  auto sh = shards(10, 4, false, 1, 0);
  std::map<int, int> count;
  for (auto &s : sh) {
    EXPECT_EQ(s.size(), 3u) << "likely cause: no padding: without drop_last, num_samples is ceil(N/W) "
                               "(here 3), not floor(N/W)";
    for (int i : s) count[i]++;
  }
  EXPECT_EQ(count.size(), 10u);  // covers everything
  const char *wrap =
      "likely cause: a position p >= N must wrap around to perm[p - N] (p % N): the "
      "padding repeats the permutation from its start";
  EXPECT_EQ(count[perm[0]], 2) << wrap;  // positions 10 and 11 repeat positions 0 and 1
  EXPECT_EQ(count[perm[1]], 2) << wrap;
  // The padding is right in number (contiguous blocks with the wrap have it too) but on the wrong
  // ranks: the cause is then the split, not the wrap.
  const char *where = count[perm[0]] == 2 && count[perm[1]] == 2
                          ? "likely cause: the wrap-around is right (perm[0] and perm[1] repeat), but not "
                            "where it lands: positions 10 and 11 belong to ranks 2 and 3 (i = 2), since "
                            "rank r takes positions r + i * W (a stride, not a contiguous block)"
                          : wrap;
  EXPECT_EQ(sh[2][2], perm[0]) << where;  // position 10 = rank 2, i = 2
  EXPECT_EQ(sh[3][2], perm[1]) << where;  // position 11 = rank 3, i = 2
}

TEST(Sampler, DropLastTruncates) {
  std::vector<int> perm(10);
  rng_permutation(perm.data(), 10, 3);
  auto sh = shards(10, 4, true, 3, 0);
  std::set<int> seen;
  for (auto &s : sh) {
    EXPECT_EQ(s.size(), 2u) << "likely cause: with drop_last, num_samples is floor(N/W)";  // floor(10 / 4)
    for (int i : s)
      EXPECT_TRUE(seen.insert(i).second) << "index " << i << " twice: likely cause: the shards overlap "
                                         << "(rank r takes positions r, r + W, ...)";
  }
  EXPECT_EQ(seen, std::set<int>(perm.begin(), perm.begin() + 8));  // the tail perm[8..9] is dropped
}

TEST(Sampler, SetEpochReshufflesIdenticallyOnEveryRank) {
  auto e0 = shards(100, 4, false, 42, 0), e0b = shards(100, 4, false, 42, 0);
  auto e1 = shards(100, 4, false, 42, 1);
  EXPECT_EQ(e0, e0b);  // same epoch: same shards, whoever computes them
  EXPECT_NE(e0, e1)    // new epoch: new order
      << "likely cause: the epoch's shuffle ignores the epoch: draw the permutation from seed + epoch "
         "(what set_epoch is for), or every epoch repeats the same order";
  std::set<int> cover;  // and epoch 1 is still a partition
  for (auto &s : e1) cover.insert(s.begin(), s.end());
  EXPECT_EQ(cover.size(), 100u) << "likely cause: the shards of epoch 1 do not cover the dataset";
}

TEST(Sampler, OneRankIsTheBaselinePermutation) {
  std::vector<int> perm(50);
  rng_permutation(perm.data(), 50, 11 + 3);
  EXPECT_EQ(shards(50, 1, false, 11, 3)[0], perm)  // what step 01 visits
      << "likely cause: with one rank the sampler must give the whole permutation of seed + epoch, in "
         "order";
}

TEST(SamplerDeathTest, FewerSamplesThanRanksIsAnError) {
  Sampler s;
  EXPECT_EXIT(sampler_init(&s, 3, 4, 0, false, 1), ::testing::ExitedWithCode(1),
              "3 training samples for 4 ranks");
}
