// Step 06's reducer: the bucket assignment (reverse order, the small first bucket, caps, big tensors),
// and the hooks that start the buckets' all-reduces during backward and wait for them after it.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

extern "C" {
#include "device.h"
#include "mlp.h"
#include "reducer.h"
}

namespace {
constexpr size_t MiB = 1 << 20;

struct Assignment {
  std::vector<Bucket> buckets;
  std::vector<int> bucket_of;
};

class ReducerAssign : public ::testing::Test {
 protected:
  Ctx c;
  Mlp m;
  void SetUp() override {
    device_init(&c, DEVICE_CPU, 0);
    const int sizes[] = {784, 1024, 1024, 10};  // the course MLP
    mlp_init(&m, &c, sizes, 3, 1, 1);
  }
  void TearDown() override {
    mlp_free(&m, &c);
    device_free(&c);
  }
  Assignment assign(size_t cap, size_t first = REDUCER_FIRST_BUCKET_BYTES) {
    Assignment a;
    a.buckets.resize(REDUCER_MAX_TENSORS);
    a.bucket_of.assign(REDUCER_MAX_TENSORS, -1);
    int n = reducer_assign(&m, cap, first, a.buckets.data(), a.bucket_of.data());
    a.buckets.resize(n);
    a.bucket_of.resize(2 * m.n_layers);
    return a;
  }
  // Buckets tile the flat buffer from its end to its start, and each tensor lies in its bucket.
  void expect_tiling(const Assignment &a) {
    size_t end = m.n_params;
    int tensors = 0;
    for (const Bucket &b : a.buckets) {
      EXPECT_EQ(b.offset + b.count, end);
      EXPECT_GT(b.count, 0u);
      end = b.offset;
      tensors += b.n_tensors;
    }
    EXPECT_EQ(end, 0u);
    EXPECT_EQ(tensors, 2 * m.n_layers);
    for (int t = 0; t < 2 * m.n_layers; t++) {
      int l = t / 2;
      size_t off = t % 2 ? m.b_off[l] : m.w_off[l];
      const Bucket &b = a.buckets[a.bucket_of[t]];
      EXPECT_GE(off, b.offset) << "tensor " << t;
      EXPECT_LT(off, b.offset + b.count) << "tensor " << t;
    }
    for (int t = 2 * m.n_layers - 1; t > 0; t--)  // reverse order: bucket index never decreases
      EXPECT_LE(a.bucket_of[t], a.bucket_of[t - 1]);
  }
};
}  // namespace

TEST_F(ReducerAssign, DefaultCapSmallFirstBucketThenTheRest) {
  Assignment a = assign(25 * MiB);
  expect_tiling(a);
  ASSERT_EQ(a.buckets.size(), 2u);
  // Bucket 0 (first cap 1 MiB): bias 2, weight 2 (10x1024) and bias 1; weight 1 (4 MiB) would
  // overflow it, so it opens bucket 1, which takes everything else (7.07 MiB < 25 MiB).
  EXPECT_EQ(a.buckets[0].n_tensors, 3);
  EXPECT_EQ(a.buckets[0].offset, m.b_off[1]);
  EXPECT_EQ(a.buckets[1].n_tensors, 3);
  EXPECT_EQ(a.buckets[1].offset, 0u);
  EXPECT_EQ(a.bucket_of[2 * 1], 1);  // weight 1
}

TEST_F(ReducerAssign, CapClosesBuckets) {
  Assignment a = assign(5 * MiB);
  expect_tiling(a);
  // {b2, W2, b1} | {W1 4 MiB, b0} | {W0 3.06 MiB}: W0 would overflow the 5 MiB bucket.
  ASSERT_EQ(a.buckets.size(), 3u);
  EXPECT_EQ(a.buckets[1].n_tensors, 2);
  EXPECT_EQ(a.buckets[2].n_tensors, 1);
  EXPECT_EQ(a.buckets[2].offset, m.w_off[0]);
  for (const Bucket &b : a.buckets) EXPECT_LE(b.count * sizeof(float), 5 * MiB);
}

TEST_F(ReducerAssign, TensorLargerThanTheCapSitsAlone) {
  Assignment a = assign(2 * MiB);
  expect_tiling(a);
  const Bucket &w1 = a.buckets[a.bucket_of[2 * 1]];
  EXPECT_EQ(w1.n_tensors, 1);  // 4 MiB > 2 MiB: alone
  EXPECT_EQ(w1.count, (size_t)1024 * 1024);
  const Bucket &w0 = a.buckets[a.bucket_of[0]];
  EXPECT_EQ(w0.n_tensors, 1);  // 3.06 MiB > 2 MiB: alone
  for (const Bucket &b : a.buckets)
    if (b.n_tensors > 1) {
      EXPECT_LE(b.count * sizeof(float), 2 * MiB);
    }
}

TEST_F(ReducerAssign, TinyCapOneTensorPerBucket) {
  Assignment a = assign(1);
  expect_tiling(a);
  ASSERT_EQ(a.buckets.size(), 6u);
  for (int t = 0; t < 6; t++) EXPECT_EQ(a.bucket_of[t], 5 - t);  // bias 2 first, weight 0 last
}

TEST_F(ReducerAssign, FirstBucketNeverExceedsTheCap) {
  Assignment a = assign(40 * 1024);  // 40 KiB < 1 MiB: the first bucket's cap is min(1 MiB, cap)
  expect_tiling(a);
  EXPECT_EQ(a.buckets[0].n_tensors, 1);  // bias 2 (40 B); weight 2 (40 KiB) would overflow it
}

TEST_F(ReducerAssign, SameAssignmentEveryTime) {
  // Every rank computes the assignment from the same model shape and cap: no input differs, and
  // the function has no other state, so the collectives match across ranks.
  Assignment a = assign(3 * MiB), b = assign(3 * MiB);
  ASSERT_EQ(a.buckets.size(), b.buckets.size());
  for (size_t i = 0; i < a.buckets.size(); i++) {
    EXPECT_EQ(a.buckets[i].offset, b.buckets[i].offset);
    EXPECT_EQ(a.buckets[i].count, b.buckets[i].count);
  }
  EXPECT_EQ(a.bucket_of, b.bucket_of);
}

// ---- the hooks: which buckets start, in which order, and when they are waited for ----------------
// The reducer runs on a process group of one: dist_init with no launcher gives rank 0 of 1, whose
// all-reduce changes nothing but still goes through its handle: dist_all_reduce_async marks the
// bucket's DistWork started (`done`: set when started, never cleared by dist_wait) and in flight
// (`active`, until dist_wait). So the tests see which buckets the hooks started, and when the reducer
// waits, without a second process. Each check says, after "likely cause:", the mistake that usually
// makes it fail (the exercise checker, scripts/check_exercise.sh 06, prints it).
namespace {
class ReducerHooks : public ::testing::Test {
 protected:
  Ctx c;
  Mlp m;
  ProcessGroup pg;
  Reducer r;
  void SetUp() override {
    device_init(&c, DEVICE_CPU, 0);
    const int sizes[] = {8, 6, 5, 4};  // 3 layers, 6 tensors: weight 2l, bias 2l + 1
    mlp_init(&m, &c, sizes, 3, 1, 1);
    dist_init(&pg, "mpi", DEVICE_CPU, 0);
    ASSERT_EQ(pg.world_size, 1);
    dist_connect(&pg, &c);
  }
  // cap_mb 0: one tensor per bucket, bucket 5 - t for tensor t (bias 2 is bucket 0, weight 0 bucket
  // 5); a large cap: one bucket for the whole (small) model.
  void make(double cap_mb) { reducer_init(&r, &pg, &m, cap_mb); }
  void TearDown() override {
    for (int i = 0; i < r.n_buckets; i++)  // a wrong reducer may leave one in flight
      if (r.work[i].active) dist_wait(&pg, &r.work[i]);
    reducer_free(&r);
    dist_destroy(&pg);
    mlp_free(&m, &c);
    device_free(&c);
  }
  std::vector<int> started() const {
    std::vector<int> s;
    for (int i = 0; i < r.n_buckets; i++)
      if (r.work[i].done) s.push_back(i);
    return s;
  }
  std::vector<int> in_flight() const {
    std::vector<int> s;
    for (int i = 0; i < r.n_buckets; i++)
      if (r.work[i].active) s.push_back(i);
    return s;
  }
};
}  // namespace

TEST_F(ReducerHooks, BucketsStartInBucketOrderAsBackwardRuns) {
  make(0);
  ASSERT_EQ(r.n_buckets, 6);
  reducer_prepare_for_backward(&r);
  EXPECT_EQ(started(), std::vector<int>{}) << "likely cause: a bucket started before any gradient";
  reducer_autograd_hook(2, &r);  // backward produces the last layer first: buckets 0 and 1
  EXPECT_EQ(started(), (std::vector<int>{0, 1}))
      << "likely cause: a bucket must start as soon as all its tensors are ready (mark_variable_ready "
         "counts each tensor down in its own bucket, r->bucket_of; mark_bucket_ready starts it)";
  reducer_autograd_hook(1, &r);
  EXPECT_EQ(started(), (std::vector<int>{0, 1, 2, 3}));
  reducer_autograd_hook(0, &r);
  EXPECT_EQ(started(), (std::vector<int>{0, 1, 2, 3, 4, 5}));
  for (int i = 0; i < r.n_buckets; i++) {
    const DistWork &w = r.work[i];
    EXPECT_EQ(w.buf, (void *)(m.grads + r.buckets[i].offset))
        << "bucket " << i << ": likely cause: a bucket's all-reduce is on its slice of the flat gradient "
        << "buffer, r->model->grads + b->offset";
    EXPECT_EQ(w.n, r.buckets[i].count) << "bucket " << i << ": likely cause: the count is b->count floats";
    EXPECT_EQ(w.op, DIST_SUM) << "bucket " << i << ": likely cause: the reducer sums (DIST_SUM): "
                              << "backward already divided every gradient by W";
  }
  reducer_finalize_backward(&r);
}

TEST_F(ReducerHooks, ALaterReadyBucketWaitsForTheEarlierOnes) {
  make(0);
  reducer_prepare_for_backward(&r);
  reducer_autograd_hook(0, &r);  // the first layer's gradients first: buckets 4 and 5 are ready ...
  EXPECT_EQ(started(), std::vector<int>{})
      << "likely cause: buckets must start in bucket order (r->next_bucket onwards): a later bucket that "
         "is ready waits for the earlier ones, so that every rank starts the same all-reduces in the "
         "same order";
  reducer_autograd_hook(2, &r);  // ... but only 0 and 1 may start
  EXPECT_EQ(started(), (std::vector<int>{0, 1}))
      << "likely cause: buckets must start in bucket order, stopping at the first that is not ready";
  reducer_autograd_hook(1, &r);  // now 2, 3, and the waiting 4 and 5
  EXPECT_EQ(started(), (std::vector<int>{0, 1, 2, 3, 4, 5}))
      << "likely cause: when an earlier bucket starts, the later ready ones must start after it";
  reducer_finalize_backward(&r);
}

TEST_F(ReducerHooks, ABucketStartsWhenAllItsTensorsAreReady) {
  make(25);  // one bucket for the whole model
  ASSERT_EQ(r.n_buckets, 1);
  reducer_prepare_for_backward(&r);
  reducer_autograd_hook(2, &r);
  reducer_autograd_hook(1, &r);
  EXPECT_EQ(started(), std::vector<int>{})
      << "likely cause: a bucket started before all its tensors were ready (count each tensor down in "
         "its bucket, Bucket.pending, and start the bucket only at 0)";
  reducer_autograd_hook(0, &r);
  EXPECT_EQ(started(), std::vector<int>{0});
  reducer_finalize_backward(&r);
}

TEST_F(ReducerHooks, BucketsStayInFlightUntilFinalize) {
  make(0);
  reducer_prepare_for_backward(&r);
  for (int l = 2; l >= 0; l--) reducer_autograd_hook(l, &r);
  EXPECT_EQ(in_flight(), (std::vector<int>{0, 1, 2, 3, 4, 5}))
      << "likely cause: the reducer waits too early: a hook must only start (and dist_test) the "
         "all-reduces; waiting there stops backward until the communication ends, so nothing overlaps. "
         "Wait in reducer_finalize_backward";
  reducer_finalize_backward(&r);
  EXPECT_EQ(in_flight(), std::vector<int>{})
      << "likely cause: reducer_finalize_backward must dist_wait every bucket before the optimizer uses "
         "the gradients";
}

TEST_F(ReducerHooks, EachBucketStartsOncePerStep) {
  make(0);
  // Three steps; starting a bucket whose all-reduce is in flight, or waiting for one that is not,
  // ends the process (dist.h), so the steps run in a child process that must exit 0.
  EXPECT_EXIT(
      {
        for (int step = 0; step < 3; step++) {
          reducer_prepare_for_backward(&r);
          for (int l = 2; l >= 0; l--) reducer_autograd_hook(l, &r);
          reducer_finalize_backward(&r);
        }
        exit(0);
      },
      ::testing::ExitedWithCode(0), "")
      << "likely cause: a bucket was started twice in a step, or waited for twice, or not at all";
}

// A death test's output that names a bucket, a layer or a hook, in any case and any words (gtest's
// own matcher interface: the regular expressions of EXPECT_EXIT differ between platforms).
class MentionsMissingPart : public ::testing::MatcherInterface<const std::string &> {
 public:
  bool MatchAndExplain(const std::string &out, ::testing::MatchResultListener *) const override {
    std::string low(out);
    for (char &ch : low) ch = (char)std::tolower((unsigned char)ch);
    for (const char *word : {"bucket", "layer", "hook"})
      if (low.find(word) != std::string::npos) return true;
    return false;
  }
  void DescribeTo(std::ostream *os) const override { *os << "names a bucket, a layer or a hook"; }
};
static ::testing::Matcher<const std::string &> SaysWhatIsMissing() {
  return ::testing::MakeMatcher(new MentionsMissingPart);
}

TEST_F(ReducerHooks, FinalizeStopsWhenAHookWasMissed) {
  make(0);
  reducer_prepare_for_backward(&r);
  reducer_autograd_hook(2, &r);
  reducer_autograd_hook(1, &r);  // layer 0's hook never comes: buckets 4 and 5 never start
  // Any wording passes: the job must end with status 1 (die(1, ...)), saying what went missing (a
  // bucket, a layer or its hook), as the exercise's TODO asks.
  EXPECT_EXIT(reducer_finalize_backward(&r), ::testing::ExitedWithCode(1), SaysWhatIsMissing())
      << "likely cause: reducer_finalize_backward must stop the job with die(1, ...) when some bucket "
         "was never started (the ranks would otherwise step with unreduced gradients), with a message "
         "that names what is missing: the buckets, a layer or its hook (any words)";
}  // (TearDown waits for the buckets 0-3 still in flight here)
