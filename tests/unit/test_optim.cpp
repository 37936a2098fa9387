// SGD against steps computed by hand from torch.optim.SGD's documented update.
#include <gtest/gtest.h>

#include "device.h"
#include "optim.h"

namespace {
struct One {
  Ctx c;
  Sgd o;
  float p = 1.0f, g = 0.5f;
  One(float lr, float mom, float damp, float wd, bool nesterov) {
    device_init(&c, DEVICE_CPU, 0);
    sgd_init(&o, &c, 1, lr, mom, damp, wd, nesterov);
  }
  ~One() {
    sgd_free(&o, &c);
    device_free(&c);
  }
  float step() {
    sgd_step(&o, &c, &p, &g);
    return p;
  }
};
}  // namespace

TEST(Sgd, PlainStep) {
  One s(0.1f, 0.0f, 0.0f, 0.0f, false);
  EXPECT_FLOAT_EQ(s.step(), 0.95f);  // 1 - 0.1·0.5
  EXPECT_FLOAT_EQ(s.step(), 0.90f);
}

TEST(Sgd, MomentumAndWeightDecay) {
  One s(0.1f, 0.9f, 0.0f, 0.01f, false);
  // step 1: d = 0.5 + 0.01·1 = 0.51; buf = d; p = 1 - 0.1·0.51 = 0.949
  EXPECT_FLOAT_EQ(s.step(), 0.949f);
  // step 2: d = 0.5 + 0.01·0.949 = 0.50949; buf = 0.9·0.51 + 0.50949 = 0.96849; p = 0.852151
  EXPECT_FLOAT_EQ(s.step(), 0.852151f);
  EXPECT_EQ(s.o.steps, 2u);
}

TEST(Sgd, Nesterov) {
  One s(0.1f, 0.9f, 0.0f, 0.0f, true);
  // step 1: buf = 0.5; d = 0.5 + 0.9·0.5 = 0.95; p = 0.905
  EXPECT_FLOAT_EQ(s.step(), 0.905f);
  // step 2: buf = 0.9·0.5 + 0.5 = 0.95; d = 0.5 + 0.9·0.95 = 1.355; p = 0.905 - 0.1355 = 0.7695
  EXPECT_FLOAT_EQ(s.step(), 0.7695f);
}

TEST(Sgd, DampeningAppliesFromTheSecondStep) {
  One s(0.1f, 0.9f, 0.5f, 0.0f, false);
  // step 1: buf = g = 0.5 (no dampening on the first step); p = 0.95
  EXPECT_FLOAT_EQ(s.step(), 0.95f);
  // step 2: buf = 0.9·0.5 + 0.5·0.5 = 0.7; p = 0.95 - 0.07 = 0.88
  EXPECT_FLOAT_EQ(s.step(), 0.88f);
}
