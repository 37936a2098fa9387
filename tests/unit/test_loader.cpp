// test_loader.cpp: the loader on the CPU context: rows and labels gathered in the order given.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "data.h"
#include "device.h"
#include "devmem.h"
#include "loader.h"

namespace {

// Row i is (100 i, 100 i + 1, ...) and its label is i % 3, so every gathered row identifies itself.
void make_dataset(Dataset *ds, int n, int dim) {
  ds->n = n;
  ds->dim = dim;
  ds->n_classes = 3;
  ds->x = (float *)malloc(sizeof(float) * n * dim);
  ds->y = (int *)malloc(sizeof(int) * n);
  for (int i = 0; i < n; i++) {
    for (int d = 0; d < dim; d++) ds->x[i * dim + d] = 100.0f * i + d;
    ds->y[i] = i % 3;
  }
}

}  // namespace

TEST(Loader, GathersBatchesInOrder) {
  Ctx c;
  device_init(&c, DEVICE_CPU, 0);
  const int n = 7, dim = 5, B = 4;
  Dataset ds{};
  make_dataset(&ds, n, dim);
  Loader ld;
  loader_init(&ld, &c, &ds, B, 10);
  dataset_free(&ds);  // not retained
  EXPECT_EQ(ld.n, n);
  EXPECT_EQ(ld.dim, dim);

  EXPECT_EQ(ld.n_order, 0);

  const std::vector<int> order = {6, 2, 5, 0, 3, 1, 4, 6, 2};
  loader_set_order(&ld, &c, order.data(), (int)order.size());
  EXPECT_EQ(ld.n_order, (int)order.size());
  std::vector<float> xb(B * dim);
  std::vector<int> yb(B);
  for (int start = 0; start < (int)order.size(); start += B) {
    int b = (int)order.size() - start < B ? (int)order.size() - start : B;
    loader_batch(&ld, &c, start, b);
    dev_download(&c, xb.data(), ld.xb, sizeof(float) * b * dim);
    dev_download(&c, yb.data(), ld.yb, sizeof(int) * b);
    for (int r = 0; r < b; r++) {
      int i = order[start + r];
      EXPECT_EQ(yb[r], i % 3) << "start " << start << " row " << r;
      for (int d = 0; d < dim; d++) EXPECT_EQ(xb[r * dim + d], 100.0f * i + d);
    }
  }

  // A new epoch's order replaces the old one.
  const std::vector<int> order2 = {1, 1, 0};
  loader_set_order(&ld, &c, order2.data(), 3);
  EXPECT_EQ(ld.n_order, 3);
  loader_batch(&ld, &c, 0, 3);
  dev_download(&c, yb.data(), ld.yb, sizeof(int) * 3);
  dev_download(&c, xb.data(), ld.xb, sizeof(float) * 3 * dim);
  EXPECT_EQ(yb[0], 1);
  EXPECT_EQ(yb[2], 0);
  EXPECT_EQ(xb[dim], 100.0f);
  EXPECT_EQ(xb[2 * dim + 4], 4.0f);

  loader_free(&ld, &c);
  EXPECT_EQ(ld.x, nullptr);
  device_free(&c);
}

// A dataset of 8-bit pixels: the loader keeps the bytes and normalises the gathered rows.
TEST(Loader, NormalisesPixelsAsItGathers) {
  Ctx c;
  device_init(&c, DEVICE_CPU, 0);
  const int n = 4, dim = 3;
  Dataset ds{};
  ds.n = n;
  ds.dim = dim;
  ds.n_classes = 10;
  ds.mean = 0.5f;
  ds.std = 0.25f;
  ds.pixels = (uint8_t *)malloc((size_t)n * dim);
  ds.y = (int *)malloc(sizeof(int) * n);
  const uint8_t px[n * dim] = {0, 255, 51, 102, 0, 0, 255, 255, 255, 0, 0, 0};
  for (int i = 0; i < n * dim; i++) ds.pixels[i] = px[i];
  for (int i = 0; i < n; i++) ds.y[i] = 9 - i;
  Loader ld;
  loader_init(&ld, &c, &ds, 2, n);
  EXPECT_EQ(ds.pixels, nullptr);  // taken over on the CPU
  dataset_free(&ds);
  const std::vector<int> order = {1, 0};
  loader_set_order(&ld, &c, order.data(), 2);
  loader_batch(&ld, &c, 0, 2);
  std::vector<float> xb(2 * dim);
  std::vector<int> yb(2);
  dev_download(&c, xb.data(), ld.xb, sizeof(float) * xb.size());
  dev_download(&c, yb.data(), ld.yb, sizeof(int) * yb.size());
  // (p / 255 - 0.5) / 0.25: 102 -> -0.4, 0 -> -2, 255 -> 2, 51 -> -1.2
  const std::vector<float> want = {(0.4f - 0.5f) / 0.25f, -2, -2, -2, 2, (0.2f - 0.5f) / 0.25f};
  for (int i = 0; i < 2 * dim; i++) EXPECT_FLOAT_EQ(xb[i], want[i]) << i;
  EXPECT_EQ(yb, (std::vector<int>{8, 9}));
  loader_free(&ld, &c);
  EXPECT_EQ(ld.pixels, nullptr);
  device_free(&c);
}

namespace {

// The labels of the loader's whole order, gathered in batches of at most 2 (label i % 3 of sample i).
std::vector<int> order_labels(Loader *ld, const Ctx *c) {
  std::vector<int> labels, yb(2);
  for (int start = 0; start < ld->n_order; start += 2) {
    int b = ld->n_order - start < 2 ? ld->n_order - start : 2;
    loader_batch(ld, c, start, b);
    dev_download(c, yb.data(), ld->yb, sizeof(int) * b);
    labels.insert(labels.end(), yb.begin(), yb.begin() + b);
  }
  return labels;
}

}  // namespace

// A strided order: the whole set in order with (0, 1); with (rank, W) the W shards have no padding and
// together visit every sample exactly once, whether or not W divides n.
TEST(Loader, StrideOrderShardsWithoutPadding) {
  Ctx c;
  device_init(&c, DEVICE_CPU, 0);
  const int n = 7;
  Dataset ds{};
  make_dataset(&ds, n, 1);  // one feature, 100 i: the gathered row names its sample
  Loader ld;
  loader_init(&ld, &c, &ds, 2, n);
  loader_set_stride_order(&ld, &c, 0, 1);
  EXPECT_EQ(ld.n_order, n);
  EXPECT_EQ(order_labels(&ld, &c), (std::vector<int>{0, 1, 2, 0, 1, 2, 0}));
  for (int W = 1; W <= 9; W++) {
    std::vector<int> seen(n, 0);
    for (int rank = 0; rank < W; rank++) {
      loader_set_stride_order(&ld, &c, rank, W);
      EXPECT_EQ(ld.n_order, rank < n ? (n - rank + W - 1) / W : 0) << "W " << W << " rank " << rank;
      std::vector<float> xb(1);
      for (int i = 0; i < ld.n_order; i++) {
        loader_batch(&ld, &c, i, 1);
        dev_download(&c, xb.data(), ld.xb, sizeof(float));
        int sample = (int)(xb[0] / 100.0f);
        EXPECT_EQ(sample, rank + i * W) << "W " << W << " rank " << rank;
        seen[sample]++;
      }
    }
    EXPECT_EQ(seen, std::vector<int>(n, 1)) << "W " << W;
  }
  loader_free(&ld, &c);
  device_free(&c);
}

TEST(LoaderDeathTest, RejectsBadOrderAndBatch) {
  Ctx c;
  device_init(&c, DEVICE_CPU, 0);
  Dataset ds{};
  make_dataset(&ds, 4, 2);
  Loader ld;
  loader_init(&ld, &c, &ds, 2, 4);
  std::vector<int> too_long(5, 0), bad = {0, 4};
  EXPECT_EXIT(loader_set_order(&ld, &c, too_long.data(), 5), ::testing::ExitedWithCode(1),
              "5 indices, capacity is 4");
  EXPECT_EXIT(loader_set_order(&ld, &c, bad.data(), 2), ::testing::ExitedWithCode(1),
              "order\\[1\\] = 4 is not in \\[0, 4\\)");
  EXPECT_EXIT(loader_batch(&ld, &c, 0, 3), ::testing::ExitedWithCode(1), "larger than 2");
  EXPECT_EXIT(loader_batch(&ld, &c, 3, 2), ::testing::ExitedWithCode(1), "outside the order");
  EXPECT_EXIT(loader_set_stride_order(&ld, &c, -1, 1), ::testing::ExitedWithCode(1), "first -1, stride 1");
  EXPECT_EXIT(loader_set_stride_order(&ld, &c, 0, 0), ::testing::ExitedWithCode(1), "first 0, stride 0");
  loader_free(&ld, &c);
  dataset_free(&ds);
  device_free(&c);
}
