// Bucket assignment of step 06's reducer: reverse order, the small first bucket, caps, big tensors.
#include <gtest/gtest.h>

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
