// readback.h on the CPU: values come back in the order they were queued, with their tags, as they
// were when queued; take() never holds back a value that has arrived, waits when asked to, and a
// full queue ends the job. (The CUDA path, where values arrive later, is tested in tests/gpu.)
#include <gtest/gtest.h>

#include "device.h"
#include "readback.h"

namespace {
class ReadbackCpu : public ::testing::Test {
 protected:
  void SetUp() override {
    device_init(&c, DEVICE_CPU, 0);
    readback_init(&r, &c);
  }
  void TearDown() override {
    readback_free(&r, &c);
    device_free(&c);
  }
  Ctx c = {};
  Readback r = {};
};
}  // namespace

TEST_F(ReadbackCpu, EmptyTakesNothing) {
  float v = -1.0f;
  long long tag = -1;
  EXPECT_FALSE(readback_take(&r, &c, 0, &v, &tag));
  EXPECT_EQ(v, -1.0f);
  EXPECT_EQ(tag, -1);
}

TEST_F(ReadbackCpu, OldestFirstWithTagsAndQueuedValues) {
  float dev = 0.0f;  // on the CPU, "device memory" is host memory
  for (int i = 0; i < READBACK_SLOTS; i++) {
    dev = 1.5f * (float)i;
    readback_push(&r, &c, &dev, 100 + i);
  }
  dev = 99.0f;  // overwritten after the pushes: the queued copies must not change
  EXPECT_EQ(r.count, READBACK_SLOTS);
  for (int i = 0; i < READBACK_SLOTS; i++) {
    float v;
    long long tag;
    // a large max_ahead: values that have arrived are taken anyway (on the CPU, all of them)
    ASSERT_TRUE(readback_take(&r, &c, READBACK_SLOTS, &v, &tag)) << i;
    EXPECT_EQ(v, 1.5f * (float)i);
    EXPECT_EQ(tag, 100 + i);
  }
  float v;
  long long tag;
  EXPECT_FALSE(readback_take(&r, &c, 0, &v, &tag));
}

TEST_F(ReadbackCpu, RingWrapsAround) {
  // More values than slots in total, never more than two in flight: the ring reuses its slots.
  float dev;
  long long next = 0;
  for (int i = 0; i < 5 * READBACK_SLOTS; i++) {
    dev = (float)i;
    readback_push(&r, &c, &dev, i);
    if (i % 2 == 1) {
      float v;
      long long tag;
      while (readback_take(&r, &c, 0, &v, &tag)) {
        EXPECT_EQ(tag, next);
        EXPECT_EQ(v, (float)next);
        next++;
      }
    }
  }
  EXPECT_EQ(next, 5 * READBACK_SLOTS);
}

TEST_F(ReadbackCpu, FullQueueDies) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  float dev = 1.0f;
  for (int i = 0; i < READBACK_SLOTS; i++) readback_push(&r, &c, &dev, i);
  EXPECT_EXIT(readback_push(&r, &c, &dev, READBACK_SLOTS), ::testing::ExitedWithCode(1), "already in flight");
}
