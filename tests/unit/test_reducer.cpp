// Step 06's reducer: the bucket assignment (PyTorch's: reverse order, the 1 MiB first limit, buckets
// closing once they reach their limit; checked against a table of PyTorch's own assignments),
// and the hooks that start the buckets' all-reduces during backward and wait for them after it.
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
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

// The course model, 784-1024-1024-10, in backward order: b2 (10 floats), W2 (10,240), b1 (1,024),
// W1 (1,048,576: 4 MiB), b0 (1,024: 4 KiB), W0 (802,816: 3.06 MiB).
TEST_F(ReducerAssign, DefaultCapOvershootingFirstBucketThenTheRest) {
  Assignment a = assign(25 * MiB);
  expect_tiling(a);
  ASSERT_EQ(a.buckets.size(), 2u);
  // Bucket 0 (limit 1 MiB) takes b2, W2 and b1 (44 KiB), then W1 joins it and closes it at 4.04 MiB:
  // a tensor joins the open bucket even when it overshoots the limit. b0 and W0 (3.07 MiB < 25 MiB)
  // are what is left: the last bucket.
  EXPECT_EQ(a.buckets[0].n_tensors, 4);
  EXPECT_EQ(a.buckets[0].count, (size_t)1059850);
  EXPECT_EQ(a.buckets[0].offset, m.w_off[1]);
  EXPECT_EQ(a.bucket_of[2 * 1], 0);  // weight 1 is in the first bucket
  EXPECT_EQ(a.buckets[1].n_tensors, 2);
  EXPECT_EQ(a.buckets[1].count, (size_t)803840);
}

TEST_F(ReducerAssign, FirstLimitIsOneMiBWhateverTheCap) {
  // Not min(1 MiB, cap): with a 40 KiB cap the first bucket still fills to 1 MiB (and past it).
  Assignment a = assign(40 * 1024);
  expect_tiling(a);
  EXPECT_EQ(a.buckets[0].n_tensors, 4);
  // Later buckets get the cap: b0 (4 KiB) stays open under it, W0 joins and closes it.
  ASSERT_EQ(a.buckets.size(), 2u);
  EXPECT_EQ(a.buckets[1].n_tensors, 2);
}

TEST_F(ReducerAssign, ABucketClosesWhenItReachesTheCapOneFloatDecides) {
  // b0 is 4,096 bytes. A cap of exactly that closes b0's bucket (size >= limit); one float more
  // leaves it open, so W0 joins b0.
  Assignment at = assign(4096), above = assign(4096 + sizeof(float)), below = assign(4096 - sizeof(float));
  expect_tiling(at);
  expect_tiling(above);
  ASSERT_EQ(at.buckets.size(), 3u);
  EXPECT_EQ(at.buckets[1].n_tensors, 1);
  EXPECT_EQ(at.buckets[1].offset, m.b_off[0]);
  EXPECT_EQ(below.buckets.size(), 3u);
  ASSERT_EQ(above.buckets.size(), 2u);
  EXPECT_EQ(above.buckets[1].n_tensors, 2);
}

TEST_F(ReducerAssign, ZeroCapOneTensorPerBucketAfterTheFirst) {
  Assignment a = assign(0);  // every bucket after the first closes on its first tensor
  expect_tiling(a);
  ASSERT_EQ(a.buckets.size(), 3u);
  EXPECT_EQ(a.bucket_of[1], 1);  // b0
  EXPECT_EQ(a.bucket_of[0], 2);  // W0
  Assignment b = assign(0, 0);   // and with a first limit of 0, the first one too
  expect_tiling(b);
  ASSERT_EQ(b.buckets.size(), 6u);
  for (int t = 0; t < 6; t++) EXPECT_EQ(b.bucket_of[t], 5 - t);  // bias 2 first, weight 0 last
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

// ---- PyTorch's own assignment: the table tests/unit/gen_bucket_table.py wrote from
// torch.distributed._compute_bucket_assignment_by_size (its header says which torch) -------------
namespace {
// An Mlp with only what reducer_assign reads: sizes and the layer-major offsets of mlp_init.
Mlp shape_only(const std::vector<int> &sizes) {
  Mlp m{};
  m.n_layers = (int)sizes.size() - 1;
  for (size_t i = 0; i < sizes.size(); i++) m.sizes[i] = sizes[i];
  for (int l = 0; l < m.n_layers; l++) {
    m.w_off[l] = m.n_params;
    m.b_off[l] = m.w_off[l] + (size_t)sizes[l + 1] * sizes[l];
    m.n_params = m.b_off[l] + sizes[l + 1];
  }
  return m;
}
}  // namespace

TEST_F(ReducerAssign,
       ShapeOnlyModelHasMlpInitsLayout) {  // so that the table test below is about mlp's layout
  Mlp s = shape_only({784, 1024, 1024, 10});
  EXPECT_EQ(s.n_params, m.n_params);
  for (int l = 0; l < 3; l++) {
    EXPECT_EQ(s.w_off[l], m.w_off[l]);
    EXPECT_EQ(s.b_off[l], m.b_off[l]);
  }
}

TEST(ReducerAssignPyTorch, EveryCaseOfTheTableIsPyTorchsAssignment) {
  std::ifstream in(DDP_BUCKET_TABLE);
  ASSERT_TRUE(in.good()) << "cannot read " << DDP_BUCKET_TABLE;
  std::string line;
  int cases = 0, differ = 0, course = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ls(line);
    std::string sizes_s, cell;
    size_t cap;
    ls >> sizes_s >> cap;
    std::vector<int> sizes;
    std::istringstream ss(sizes_s);
    for (std::string v; std::getline(ss, v, ',');) sizes.push_back(std::stoi(v));
    std::vector<std::pair<size_t, int>> want;  // (floats, tensors) per bucket
    while (ls >> cell) {
      size_t colon = cell.find(':');
      want.emplace_back(std::stoull(cell.substr(0, colon)), std::stoi(cell.substr(colon + 1)));
    }
    ASSERT_GE(sizes.size(), 2u) << line;
    ASSERT_FALSE(want.empty()) << line;
    Mlp s = shape_only(sizes);
    Bucket b[REDUCER_MAX_TENSORS];
    int of[REDUCER_MAX_TENSORS];
    int n = reducer_assign(&s, cap, REDUCER_FIRST_BUCKET_BYTES, b, of);
    std::vector<std::pair<size_t, int>> got;
    for (int i = 0; i < n; i++) got.emplace_back(b[i].count, b[i].n_tensors);
    if (got != want) {
      std::ostringstream g;
      for (auto &p : got) g << " " << p.first << ":" << p.second;
      ADD_FAILURE() << "model " << sizes_s << ", cap " << cap << " bytes: PyTorch's buckets (floats:tensors)"
                    << line.substr(sizes_s.size() + 1 + std::to_string(cap).size()) << ", reducer_assign's"
                    << g.str();
      differ++;
    }
    cases++;
    course += sizes_s == "784,1024,1024,10";
  }
  EXPECT_GE(cases, 300) << "the table is shorter than the one gen_bucket_table.py writes";
  EXPECT_GT(course, 0) << "the table lacks the course's model";
  EXPECT_EQ(differ, 0) << differ << " of " << cases << " cases differ from PyTorch";
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
    // 3 layers, 6 tensors: weight 2l, bias 2l + 1. The last bias, backward's first tensor, is 1 MiB
    // exactly, so it fills the first bucket (limit 1 MiB) alone.
    const int sizes[] = {8, 6, 5, 262144};
    mlp_init(&m, &c, sizes, 3, 1, 1);
    dist_init(&pg, "mpi", DEVICE_CPU, 0);
    ASSERT_EQ(pg.world_size, 1);
    dist_connect(&pg, &c);
  }
  // cap_mb 0: one tensor per bucket, bucket 5 - t for tensor t (bias 2 is bucket 0, weight 0 bucket
  // 5); a large cap: bias 2 in bucket 0, all the other tensors in bucket 1.
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
  // What the checker reads after a failed started() check: each bucket's count of tensors still
  // pending, which tells a bucket ready but not started (0) from one counted down wrongly.
  std::string pending_note() const {
    std::vector<int> p;
    for (int i = 0; i < r.n_buckets; i++) p.push_back(r.buckets[i].pending);
    return "pending tensors per bucket: " + ::testing::PrintToString(p) + "\n";
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
  reducer_prepare_for_backward(&r, 1);
  EXPECT_EQ(started(), std::vector<int>{})
      << pending_note() << "likely cause: a bucket started before any gradient";
  reducer_autograd_hook(2, &r);  // backward produces the last layer first: buckets 0 and 1
  EXPECT_EQ(started(), (std::vector<int>{0, 1}))
      << pending_note()
      << "likely cause: a bucket must start as soon as all its tensors are ready (mark_variable_ready "
         "counts each tensor down in its own bucket, r->bucket_of; mark_bucket_ready starts it)";
  reducer_autograd_hook(1, &r);
  EXPECT_EQ(started(), (std::vector<int>{0, 1, 2, 3})) << pending_note();
  reducer_autograd_hook(0, &r);
  EXPECT_EQ(started(), (std::vector<int>{0, 1, 2, 3, 4, 5})) << pending_note();
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
  reducer_prepare_for_backward(&r, 1);
  reducer_autograd_hook(0, &r);  // the first layer's gradients first: buckets 4 and 5 are ready ...
  EXPECT_EQ(started(), std::vector<int>{})
      << pending_note()
      << "likely cause: buckets must start in bucket order (r->next_bucket onwards): a later bucket that "
         "is ready waits for the earlier ones, so that every rank starts the same all-reduces in the "
         "same order";
  reducer_autograd_hook(2, &r);  // ... but only 0 and 1 may start
  EXPECT_EQ(started(), (std::vector<int>{0, 1}))
      << pending_note()
      << "likely cause: buckets must start in bucket order, stopping at the first that is not ready";
  reducer_autograd_hook(1, &r);  // now 2, 3, and the waiting 4 and 5
  EXPECT_EQ(started(), (std::vector<int>{0, 1, 2, 3, 4, 5}))
      << pending_note()
      << "likely cause: when an earlier bucket starts, the later ready ones must start after it";
  reducer_finalize_backward(&r);
}

TEST_F(ReducerHooks, ABucketStartsWhenAllItsTensorsAreReady) {
  make(25);  // bucket 0: bias 2; bucket 1: the five other tensors, from weight 2 to weight 0
  ASSERT_EQ(r.n_buckets, 2);
  ASSERT_EQ(r.buckets[1].n_tensors, 5);
  reducer_prepare_for_backward(&r, 1);
  reducer_autograd_hook(2, &r);
  reducer_autograd_hook(1, &r);
  EXPECT_EQ(started(), std::vector<int>{0})
      << pending_note()
      << "likely cause: a bucket started before all its tensors were ready (count each tensor down in "
         "its bucket, Bucket.pending, and start the bucket only at 0)";
  reducer_autograd_hook(0, &r);
  EXPECT_EQ(started(), (std::vector<int>{0, 1})) << pending_note();
  reducer_finalize_backward(&r);
}

TEST_F(ReducerHooks, BucketsStayInFlightUntilFinalize) {
  make(0);
  reducer_prepare_for_backward(&r, 1);
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
          reducer_prepare_for_backward(&r, step + 1);
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
  reducer_prepare_for_backward(&r, 1);
  reducer_autograd_hook(2, &r);
  reducer_autograd_hook(1, &r);  // layer 0's hook never comes: buckets 4 and 5 never start
  // Any wording passes: the job must end with status 1 (die(1, ...)), saying what went missing (a
  // bucket, a layer or its hook), as the exercise's TODO asks.
  EXPECT_EXIT(reducer_finalize_backward(&r), ::testing::ExitedWithCode(1), SaysWhatIsMissing())
      << "likely cause: reducer_finalize_backward must stop the job with die(1, ...) when some bucket "
         "was never started (the ranks would otherwise step with unreduced gradients), with a message "
         "that names what is missing: the buckets, a layer or its hook (any words)";
}  // (TearDown waits for the buckets 0-3 still in flight here)

TEST_F(ReducerHooks, CountsTheBytesItAllReduces) {
  make(0);
  // Each step hands every bucket to its all-reduce once: the whole gradient buffer, 4 bytes a float.
  // Each handle counts what was started on it (dist_take_bytes: the metrics file's allreduce_bytes).
  const long long per_step = (long long)(m.n_params * sizeof(float));
  for (int step = 0; step < 2; step++) {
    reducer_prepare_for_backward(&r, step + 1);
    for (int l = 2; l >= 0; l--) reducer_autograd_hook(l, &r);
    reducer_finalize_backward(&r);
    EXPECT_EQ(dist_take_bytes(r.work, r.n_buckets), per_step)
        << "step " << step << ": likely cause: each bucket's all-reduce must cover the bucket's b->count "
        << "floats, once per step, on its own handle r->work[i] (the handles count the bytes the metrics "
        << "file logs as allreduce_bytes)";
  }
}
