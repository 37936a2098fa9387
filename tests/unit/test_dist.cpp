// The pure helpers of the process group (common/dist.h): dist_shard_counts, the counts of a bucket's
// reduce-scatter against the shards of a flat buffer; dist_detect_launcher, the launcher read from a
// faked environment; dist_nccl_says_gpu_shared, NCCL's message for two ranks on one GPU. The
// collectives themselves run under mpirun (tests/mpi/test_dist.c).
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

extern "C" {
#include "dist.h"
#include "dist_backend.h"
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

// ---- which launcher started the process: a pure function of the environment and of the build ----

namespace {
// The variables each launcher exports (the ones dist_detect_launcher reads, and some it must not
// mistake for a launcher of its own).
const std::vector<const char *> kMpirun = {"OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_RANK=1", "PMIX_RANK=1"};
const std::vector<const char *> kSrunPmix = {"PMIX_RANK=1", "PMI_SIZE=2", "SLURM_PROCID=1", "SLURM_NTASKS=2",
                                             "SLURM_LOCALID=1"};
const std::vector<const char *> kSrunPmi2 = {"PMI_RANK=1", "PMI_SIZE=2", "SLURM_PROCID=1", "SLURM_NTASKS=2",
                                             "SLURM_LOCALID=1"};
const std::vector<const char *> kSrun = {"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_LOCALID=1"};
const std::vector<const char *> kTorchrun = {"RANK=1",
                                             "WORLD_SIZE=2",
                                             "LOCAL_RANK=1",
                                             "LOCAL_WORLD_SIZE=2",
                                             "MASTER_ADDR=127.0.0.1",
                                             "MASTER_PORT=29500",
                                             "TORCHELASTIC_RUN_ID=none"};
const std::vector<const char *> kLaunchSh = {
    "RANK=1",           "WORLD_SIZE=2", "LOCAL_RANK=1", "LOCAL_WORLD_SIZE=2", "MASTER_ADDR=127.0.0.1",
    "MASTER_PORT=29500"};
const std::vector<const char *> kNothing = {"HOME=/home/someone", "PATH=/usr/bin"};

Launcher detect(std::vector<const char *> env, bool have_mpi) {
  env.push_back("SHELL=/bin/sh");  // unrelated variables around them
  env.insert(env.begin(), "LANG=C");
  env.push_back(nullptr);
  return dist_detect_launcher(const_cast<char *const *>(env.data()), have_mpi);
}
}  // namespace

TEST(DistDetectLauncher, MpirunIsMpiAndSaysSoInABuildWithoutMpi) {
  EXPECT_EQ(detect(kMpirun, true), LAUNCH_MPI);
  EXPECT_EQ(detect(kMpirun, false), LAUNCH_MPI);  // dist_init then says that MPI is not built in
}

TEST(DistDetectLauncher, SrunWithAnMpiPluginIsMpiOnlyWhereMpiIsBuilt) {
  EXPECT_EQ(detect(kSrunPmix, true), LAUNCH_MPI);
  EXPECT_EQ(detect(kSrunPmi2, true), LAUNCH_MPI);
  EXPECT_EQ(detect(kSrunPmix, false), LAUNCH_SLURM);  // the cuda preset: NCCL ranks from SLURM_*
  EXPECT_EQ(detect(kSrunPmi2, false), LAUNCH_SLURM);
}

TEST(DistDetectLauncher, PlainSrunIsSlurm) {
  EXPECT_EQ(detect(kSrun, true), LAUNCH_SLURM);
  EXPECT_EQ(detect(kSrun, false), LAUNCH_SLURM);
  EXPECT_EQ(detect({"SLURM_PROCID=0"}, true), LAUNCH_NONE);  // no task count: not a launch
}

TEST(DistDetectLauncher, TorchrunAndLaunchShAreTheEnvironmentLaunch) {
  for (bool mpi : {true, false}) {
    EXPECT_EQ(detect(kTorchrun, mpi), LAUNCH_ENV);
    EXPECT_EQ(detect(kLaunchSh, mpi), LAUNCH_ENV);
    EXPECT_EQ(detect({"WORLD_SIZE=1"}, mpi), LAUNCH_ENV);  // dist_init then asks for RANK
  }
}

TEST(DistDetectLauncher, TorchrunInsideAnSrunAllocationWithoutMpiIsTheEnvironmentLaunch) {
  std::vector<const char *> env = kSrunPmix;
  env.insert(env.end(), kTorchrun.begin(), kTorchrun.end());
  EXPECT_EQ(detect(env, false), LAUNCH_ENV);
  EXPECT_EQ(detect(env, true), LAUNCH_MPI);
}

TEST(DistDetectLauncher, AnotherMpisLauncherAloneIsMpiEvenWithoutMpi) {
  // MPICH's hydra sets only PMI_*: in a build without MPI, dist_init must refuse it, not run N
  // independent copies of rank 0.
  EXPECT_EQ(detect({"PMI_RANK=0", "PMI_SIZE=2"}, true), LAUNCH_MPI);
  EXPECT_EQ(detect({"PMI_RANK=0", "PMI_SIZE=2"}, false), LAUNCH_MPI);
}

TEST(DistDetectLauncher, NothingIsNone) {
  EXPECT_EQ(detect(kNothing, true), LAUNCH_NONE);
  EXPECT_EQ(detect(kNothing, false), LAUNCH_NONE);
  EXPECT_EQ(dist_detect_launcher(nullptr, true), LAUNCH_NONE);
}

TEST(DistDetectLauncher, OnlyWholeNamesCount) {
  EXPECT_EQ(detect({"MY_RANK=1", "RANKS=2", "XWORLD_SIZE=2", "OMPI_COMM_WORLD_SIZEX=2"}, true), LAUNCH_NONE);
  EXPECT_EQ(detect({"RANK"}, true), LAUNCH_NONE);  // no '=': not a variable
  EXPECT_EQ(detect({"RANK="}, true), LAUNCH_ENV);  // set, empty: dist_init then refuses it
}

// ---- NCCL's words for two ranks on one GPU, in both spellings --------------------------------------

TEST(DistNcclSaysGpuShared, MatchesNcclBefore2_30) {
  EXPECT_TRUE(
      dist_nccl_says_gpu_shared("Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000"));
}

TEST(DistNcclSaysGpuShared, MatchesNccl2_30) {
  EXPECT_TRUE(dist_nccl_says_gpu_shared(
      "Multiple Ranks are using the same GPU/Partition : rank 1 and rank 0 both on CUDA device 1b000. "
      "Set NCCL_MULTI_RANK_GPU_ENABLE=1 to allow this."));
}

TEST(DistNcclSaysGpuShared, RefusesOtherInvalidUsage) {
  EXPECT_FALSE(dist_nccl_says_gpu_shared("Invalid config blocking attribute value -2147483648"));
  EXPECT_FALSE(dist_nccl_says_gpu_shared(""));
  EXPECT_FALSE(dist_nccl_says_gpu_shared(nullptr));
}
