// The pure helpers of the process group (common/dist/dist.h): dist_shard_counts, the counts of a bucket's
// reduce-scatter against the shards of a flat buffer; dist_detect_launcher, the launcher read from a
// faked environment; dist_nccl_says_gpu_shared, NCCL's message for two ranks on one GPU; and the
// backends' tables of operations (dist_backend.h): every slot of every backend's completed table is a
// function, and a slot a backend leaves NULL ends the job naming the backend and the operation (or, for
// a backend not built, saying so). The collectives themselves run under mpirun (tests/mpi/test_dist.c)
// and launch.sh (the gloo_* tests).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

extern "C" {
#include "device.h"
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

// ---- the backends' tables of operations: no operation falls through to another backend ------------

namespace {
const Backend kBackends[] = {BACKEND_MPI, BACKEND_NCCL, BACKEND_GLOO};

bool built_in(Backend b) {
  return b == BACKEND_MPI ? dist_have_mpi() : b == BACKEND_NCCL ? dist_have_nccl() : dist_have_gloo();
}

// The slots of DistBackendOps, in their order there: every field from `version` on is a function
// pointer. The static_assert catches a slot added to the table but not here.
const char *const kSlotNames[] = {
    "version",    "connect",          "all_reduce", "all_reduce_start", "reduce_scatter_start",
    "all_gather", "all_gather_start", "broadcast",  "barrier",          "test",
    "wait",       "work_init",        "work_free",  "group_start",      "group_end",
    "destroy",    "failure",          "reconnect"};
using AnySlot = void (*)();
constexpr size_t kFirstSlot = offsetof(DistBackendOps, version);
constexpr size_t kSlots = (sizeof(DistBackendOps) - kFirstSlot) / sizeof(AnySlot);
static_assert((sizeof(DistBackendOps) - kFirstSlot) % sizeof(AnySlot) == 0,
              "a field after version is no slot");
static_assert(sizeof kSlotNames / sizeof kSlotNames[0] == kSlots,
              "a slot of DistBackendOps has no name here");

// Slot @p i of @p o, whatever its type; NULL when the slot is.
AnySlot slot(const DistBackendOps &o, size_t i) {
  AnySlot f;
  std::memcpy(&f, reinterpret_cast<const char *>(&o) + kFirstSlot + i * sizeof f, sizeof f);
  return f;
}

// A table of the backend "gloo" with every slot NULL: what a backend looks like to dist.c when it
// lacks everything.
DistBackendOps empty_table() {
  DistBackendOps o;
  std::memset(&o, 0, sizeof o);
  o.name = "gloo";
  o.library = "Gloo";
  o.built = true;
  return o;
}

// A table of the backend "gloo" with every slot filled (by functions that do nothing).
DistBackendOps complete_table() {
  DistBackendOps o = empty_table();
  o.version = [] { return "1.0"; };
  o.connect = [](ProcessGroup *) {};
  o.all_reduce = [](ProcessGroup *, void *, size_t, DistType, DistOp) {};
  o.all_reduce_start = [](ProcessGroup *, DistWork *) {};
  o.reduce_scatter_start = [](ProcessGroup *, void *, const size_t *, DistWork *) {};
  o.all_gather = [](ProcessGroup *, const void *, void *, size_t, DistType) {};
  o.all_gather_start = [](ProcessGroup *, const void *, DistWork *) {};
  o.broadcast = [](ProcessGroup *, void *, size_t, DistType, int) {};
  o.barrier = [](ProcessGroup *) {};
  o.test = [](ProcessGroup *, DistWork *) { return true; };
  o.wait = [](ProcessGroup *, DistWork *) {};
  o.work_init = [](ProcessGroup *, DistWork *) {};
  o.work_free = [](ProcessGroup *, DistWork *) {};
  o.group_start = [](ProcessGroup *) {};
  o.group_end = [](ProcessGroup *) {};
  o.destroy = [](ProcessGroup *) {};
  o.failure = [](ProcessGroup *) { return "a peer died"; };
  o.reconnect = [](ProcessGroup *, const DistMeeting *) {};
  return o;
}

// The backend's own table, as its file fills it; nullptr in a build without it.
const DistBackendOps *own_table(Backend b) {
#if HAVE_MPI
  if (b == BACKEND_MPI) return dist_mpi_ops();
#endif
#if HAVE_NCCL
  if (b == BACKEND_NCCL) return dist_nccl_ops();
#endif
#if HAVE_GLOO
  if (b == BACKEND_GLOO) return dist_gloo_ops();
#endif
  (void)b;
  return nullptr;
}

// A process group of two ranks on the CPU whose calls go through the table @p o, with a context (not
// the group of one, whose collectives are the identity and call no slot). Static: the death tests'
// children run the calls.
Ctx g_ctx;
ProcessGroup g_pg;
float g_send[4], g_recv[8];
size_t g_counts[2] = {2, 2};
DistWork g_w;

void two_ranks_through(const DistBackendOps *o) {
  device_init(&g_ctx, DEVICE_CPU, 0);  // for the events of dist_connect() and the handles
  std::memset(&g_pg, 0, sizeof g_pg);
  g_pg.ctx = &g_ctx;
  g_pg.rank = 0;
  g_pg.world_size = 2;
  g_pg.backend = BACKEND_GLOO;
  g_pg.gloo = &g_pg;  // a context: not the group of one
  g_pg.ops = o;
}

DistWork *fresh() {
  std::memset(&g_w, 0, sizeof g_w);
  return &g_w;
}

DistWork *active() {  // a collective in flight, not yet seen done
  std::memset(&g_w, 0, sizeof g_w);
  g_w.active = true;
  return &g_w;
}

// Every public call that goes through a slot, with the operation its message names: one per slot but
// version (which dist_verify_sum reads, and whose default answers NULL).
struct Call {
  const char *call, *operation;
  std::function<void()> run;
};
std::vector<Call> every_call() {
  return {
      {"dist_connect", "connect", [] { dist_connect(&g_pg, &g_ctx); }},
      {"dist_all_reduce", "all-reduce", [] { dist_all_reduce(&g_pg, g_send, 4, DIST_FLOAT, DIST_SUM); }},
      {"dist_all_reduce_async", "all-reduce-async",
       [] { dist_all_reduce_async(&g_pg, g_send, 4, DIST_FLOAT, DIST_SUM, fresh()); }},
      {"dist_reduce_scatter_async", "reduce-scatter-async",
       [] { dist_reduce_scatter_async(&g_pg, g_send, g_recv, g_counts, DIST_FLOAT, DIST_SUM, fresh()); }},
      {"dist_all_gather", "all-gather", [] { dist_all_gather(&g_pg, g_send, g_recv, 4, DIST_FLOAT); }},
      {"dist_all_gather_async", "all-gather-async",
       [] { dist_all_gather_async(&g_pg, g_send, g_recv, 4, DIST_FLOAT, fresh()); }},
      {"dist_broadcast", "broadcast", [] { dist_broadcast(&g_pg, g_send, 4, DIST_FLOAT, 0); }},
      {"dist_barrier", "barrier", [] { dist_barrier(&g_pg); }},
      {"dist_test", "test", [] { dist_test(&g_pg, active()); }},
      {"dist_wait", "wait", [] { dist_wait(&g_pg, active()); }},
      {"dist_work_init", "work-init", [] { dist_work_init(&g_pg, &g_w); }},
      {"dist_work_free", "work-free", [] { dist_work_free(&g_pg, fresh()); }},
      {"dist_group_start", "group-start", [] { dist_group_start(&g_pg); }},
      {"dist_group_end", "group-end", [] { dist_group_end(&g_pg); }},
      {"dist_destroy", "destroy", [] { dist_destroy(&g_pg); }},
      {"dist_reconnect", "reconnect",
       [] {
         DistMeeting m = {"127.0.0.1", 1, "q1/", 0, 2, 0};
         g_pg.recoverable = true;
         dist_reconnect(&g_pg, &g_ctx, &m);
       }},
  };
}
}  // namespace

// What dist.c calls through: each backend's table, completed, in which no slot is NULL (a NULL one
// would crash the process, or once called MPI's under Gloo, as Gloo's missing all-gather-async did).
TEST(DistBackendOps, EverySlotOfEveryBackendsTableIsAFunction) {
  int built = 0;
  for (Backend b : kBackends) {
    const DistBackendOps *o = dist_backend_ops(b);
    ASSERT_NE(o, nullptr);
    EXPECT_EQ(o, dist_backend_ops(b)) << "completed once";
    EXPECT_STREQ(o->name, dist_backend_name(b));
    EXPECT_EQ(o->built, built_in(b)) << o->name;
    built += o->built;
    for (size_t i = 0; i < kSlots; i++)
      EXPECT_NE(slot(*o, i), nullptr) << "the " << o->name << " backend's " << kSlotNames[i] << " is NULL";
  }
  EXPECT_EQ(built, (int)dist_have_mpi() + (int)dist_have_nccl() + (int)dist_have_gloo());
}

// Completing keeps what a backend fills: the backends built here fill every operation themselves.
TEST(DistBackendOps, TheCompletedTableOfABuiltBackendCallsItsOwnFunctions) {
  for (Backend b : kBackends) {
    const DistBackendOps *mine = own_table(b), *o = dist_backend_ops(b);
    if (!mine) continue;
    EXPECT_STREQ(o->library, mine->library);
    for (size_t i = 0; i < kSlots; i++) {
      if (slot(*mine, i)) {
        EXPECT_EQ(slot(*o, i), slot(*mine, i)) << o->name << "'s " << kSlotNames[i];
      }
    }
  }
}

TEST(DistBackendOps, CompletingFillsEveryNullSlotAndNoOther) {
  DistBackendOps o = empty_table();
  dist_backend_complete(&o);
  for (size_t i = 0; i < kSlots; i++) EXPECT_NE(slot(o, i), nullptr) << kSlotNames[i];
  EXPECT_EQ(o.version(), nullptr);  // the default: the backend cannot tell
  EXPECT_STREQ(o.name, "gloo");
  EXPECT_TRUE(o.built);

  DistBackendOps full = complete_table(), done = full;
  dist_backend_complete(&done);
  for (size_t i = 0; i < kSlots; i++) EXPECT_EQ(slot(done, i), slot(full, i)) << kSlotNames[i];
  EXPECT_STREQ(done.version(), "1.0");
  EXPECT_EQ(o.failure(nullptr), nullptr);  // the default: no failure to report (it ends the job instead)
}

// A table with one slot NULL, completed: that call ends the job naming the backend and the operation,
// and the others still run the backend's own.
TEST(DistBackendOps, ANullSlotCompletedEndsTheJobNamingTheBackendAndTheOperation) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the CPU context may start threads (OpenBLAS)
  static DistBackendOps o = complete_table();
  o.all_gather_start = nullptr;
  dist_backend_complete(&o);
  two_ranks_through(&o);
  EXPECT_EXIT(dist_all_gather_async(&g_pg, g_send, g_recv, 4, DIST_FLOAT, fresh()),
              ::testing::ExitedWithCode(1),
              "dist_all_gather_async: the gloo backend has no all-gather-async");
  EXPECT_EXIT(o.all_gather_start(&g_pg, g_send, fresh()), ::testing::ExitedWithCode(1),
              "dist_all_gather_async: the gloo backend has no all-gather-async");
  dist_all_gather(&g_pg, g_send, g_recv, 4, DIST_FLOAT);  // filled: the backend's own, which returns
  dist_barrier(&g_pg);
  device_free(&g_ctx);
}

// Through the public calls: a process group of two ranks on a backend whose every slot is NULL. Each
// call ends the job naming itself, the backend and its own operation (and so never reaches another
// backend's, as dist_all_gather_async reached MPI's under Gloo).
TEST(DistBackendOps, EveryCallRefusesTheMissingOperationByName) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  static DistBackendOps o = empty_table();
  dist_backend_complete(&o);
  two_ranks_through(&o);
  std::vector<Call> calls = every_call();
  EXPECT_EQ(calls.size(), kSlots - 2);  // every operation has its call (version and failure: NULL)
  g_pg.recoverable = true;
  EXPECT_EQ(dist_failure(&g_pg), nullptr) << "a backend that cannot recover reports no failure";
  g_pg.recoverable = false;
  for (const Call &c : calls)
    EXPECT_EXIT(c.run(), ::testing::ExitedWithCode(1),
                std::string(c.call) + ": the gloo backend has no " + c.operation);
  device_free(&g_ctx);
}

// The table of a backend this build lacks: every call says that the program was built without it,
// except dist_work_free, which frees only what work_init gave (nothing, when it never ran), as before.
TEST(DistBackendOps, ABackendNotBuiltSaysSoOnEveryCall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  static DistBackendOps o = empty_table();
  o.built = false;
  dist_backend_complete(&o);
  two_ranks_through(&o);
  for (const Call &c : every_call()) {
    if (std::string(c.call) == "dist_work_free") {
      EXPECT_EXIT((c.run(), std::exit(0)), ::testing::ExitedWithCode(0), "") << "work_free is not called";
      continue;
    }
    EXPECT_EXIT(c.run(), ::testing::ExitedWithCode(1),
                std::string(c.call) + ": this program was built without Gloo");
  }
  device_free(&g_ctx);
  // This build's own tables of the backends it lacks (none where every backend is built).
  for (Backend b : kBackends) {
    const DistBackendOps *lacking = dist_backend_ops(b);
    if (lacking->built) continue;
    static ProcessGroup pg;
    std::memset(&pg, 0, sizeof pg);
    pg.backend = b;  // no table: the backend's, through dist_backend_ops()
    EXPECT_EXIT(lacking->barrier(&pg), ::testing::ExitedWithCode(1),
                std::string("dist_barrier: this program was built without ") + lacking->library);
  }
}

// The bootstrap port rule: MASTER_PORT + 1 unless torchrun says no agent store listens on MASTER_PORT
// (TORCHELASTIC_USE_AGENT_STORE=False, Debian's torch 1.13): then MASTER_PORT itself, as PyTorch's rank
// 0 serves its store there (MASTER_PORT + 1 was often an ephemeral port in use, refusing the listen);
// DDP_NCCL_PORT wins over both.
TEST(DistBootstrap, PortFollowsTorchrunsAgentStore) {
  char host[128];
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", "29500", 1);
  unsetenv("DDP_NCCL_PORT");
  unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  EXPECT_EQ(dist_bootstrap_address(host, sizeof host), 29501);
  EXPECT_STREQ(host, "127.0.0.1");
  setenv("TORCHELASTIC_USE_AGENT_STORE", "True", 1);
  EXPECT_EQ(dist_bootstrap_address(host, sizeof host), 29501);
  setenv("TORCHELASTIC_USE_AGENT_STORE", "False", 1);
  EXPECT_EQ(dist_bootstrap_address(host, sizeof host), 29500);
  setenv("DDP_NCCL_PORT", "31000", 1);
  EXPECT_EQ(dist_bootstrap_address(host, sizeof host), 31000);
  unsetenv("DDP_NCCL_PORT");
  unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  unsetenv("MASTER_PORT");
  unsetenv("MASTER_ADDR");
}
