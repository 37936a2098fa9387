// MLP forward/backward against a float64 reference written here, independently of common/.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "data.h"
#include "device.h"
#include "devmem.h"
#include "loader.h"
#include "mlp.h"
#include "mlp_shard.h"
#include "rng.h"

namespace {

struct Ref {  // float64 MLP with the same layout as Mlp
  std::vector<int> sizes;
  std::vector<double> p;
  std::vector<size_t> w, b;
  double loss = 0;
  std::vector<double> grad;

  void run(const std::vector<float> &x, const std::vector<int> &y, int B) {
    int L = (int)sizes.size() - 1;
    std::vector<std::vector<double>> act(L + 1);
    act[0].assign(x.begin(), x.end());
    for (int l = 0; l < L; l++) {
      int I = sizes[l], O = sizes[l + 1];
      act[l + 1].assign((size_t)B * O, 0.0);
      for (int r = 0; r < B; r++)
        for (int o = 0; o < O; o++) {
          double s = p[b[l] + o];
          for (int i = 0; i < I; i++) s += act[l][(size_t)r * I + i] * p[w[l] + (size_t)o * I + i];
          act[l + 1][(size_t)r * O + o] = (l < L - 1 && s < 0) ? 0.0 : s;
        }
    }
    int C = sizes[L];
    std::vector<double> d((size_t)B * C);
    loss = 0;
    for (int r = 0; r < B; r++) {
      double mx = -INFINITY, z = 0;
      for (int k = 0; k < C; k++) mx = std::max(mx, act[L][(size_t)r * C + k]);
      for (int k = 0; k < C; k++) z += std::exp(act[L][(size_t)r * C + k] - mx);
      loss += (std::log(z) + mx - act[L][(size_t)r * C + y[r]]) / B;
      for (int k = 0; k < C; k++)
        d[(size_t)r * C + k] = (std::exp(act[L][(size_t)r * C + k] - mx) / z - (k == y[r])) / B;
    }
    grad.assign(p.size(), 0.0);
    for (int l = L - 1; l >= 0; l--) {
      int I = sizes[l], O = sizes[l + 1];
      std::vector<double> din((size_t)B * I, 0.0);
      for (int r = 0; r < B; r++)
        for (int o = 0; o < O; o++) {
          double g = d[(size_t)r * O + o];
          grad[b[l] + o] += g;
          for (int i = 0; i < I; i++) {
            grad[w[l] + (size_t)o * I + i] += g * act[l][(size_t)r * I + i];
            din[(size_t)r * I + i] += g * p[w[l] + (size_t)o * I + i];
          }
        }
      if (l > 0)
        for (size_t i = 0; i < din.size(); i++)
          if (!(act[l][i] > 0)) din[i] = 0;
      d.swap(din);
    }
  }
};

std::vector<int> g_hook_order;
void record_hook(int layer, void *user) {
  g_hook_order.push_back(layer);
  (*(int *)user)++;
}

class MlpTest : public ::testing::Test {
 protected:
  Ctx c;
  Mlp m;
  const int sizes[4] = {20, 16, 12, 5};
  const int B = 7;
  std::vector<float> x;
  std::vector<int> y;
  void SetUp() override {
    device_init(&c, DEVICE_CPU, 0);
    mlp_init(&m, &c, sizes, 3, 8, 123);
    std::mt19937 gen(7);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (int i = 0; i < B * sizes[0]; i++) x.push_back(nd(gen));
    for (int i = 0; i < B; i++) y.push_back((int)(gen() % sizes[3]));
  }
  void TearDown() override {
    mlp_free(&m, &c);
    device_free(&c);
  }
  Ref reference() {
    Ref r;
    r.sizes.assign(sizes, sizes + 4);
    std::vector<float> p(m.n_params);
    dev_download(&c, p.data(), m.params, p.size() * sizeof(float));
    r.p.assign(p.begin(), p.end());
    for (int l = 0; l < 3; l++) {
      r.w.push_back(m.w_off[l]);
      r.b.push_back(m.b_off[l]);
    }
    r.run(x, y, B);
    return r;
  }
};

}  // namespace

TEST_F(MlpTest, LayoutIsLayerMajorWeightThenBias) {
  EXPECT_EQ(m.w_off[0], 0u);
  EXPECT_EQ(m.b_off[0], 16u * 20);
  EXPECT_EQ(m.w_off[1], 16u * 20 + 16);
  EXPECT_EQ(m.b_off[2], m.w_off[2] + 5u * 12);
  EXPECT_EQ(m.n_params, (size_t)(16 * 20 + 16 + 12 * 16 + 12 + 5 * 12 + 5));
  EXPECT_EQ(mlp_layer_size(&m, 1), (size_t)(12 * 16 + 12));
}

TEST_F(MlpTest, InitIsUniformWithinPyTorchBound) {
  std::vector<float> p(m.n_params);
  dev_download(&c, p.data(), m.params, p.size() * sizeof(float));
  for (int l = 0; l < 3; l++) {
    float bound = 1.0f / std::sqrt((float)sizes[l]);
    float lo = 1, hi = -1;
    for (size_t i = m.w_off[l]; i < m.w_off[l] + mlp_layer_size(&m, l); i++) {
      lo = std::min(lo, p[i]);
      hi = std::max(hi, p[i]);
    }
    EXPECT_GE(lo, -bound);
    EXPECT_LT(hi, bound);
    EXPECT_LT(lo, -0.8f * bound);  // the range is actually used
    EXPECT_GT(hi, 0.8f * bound);
  }
  Mlp other;
  mlp_init(&other, &c, sizes, 3, 8, 123);
  EXPECT_EQ(mlp_param_digest(&m, &c), mlp_param_digest(&other, &c));
  mlp_free(&other, &c);
  mlp_init(&other, &c, sizes, 3, 8, 124);
  EXPECT_NE(mlp_param_digest(&m, &c), mlp_param_digest(&other, &c));
  mlp_free(&other, &c);
}

// float32 against float64: each value is a sum of at most 20 products through 3 layers, so float32
// rounding is a few 1e-7 relative to the largest term; 1e-5 relative to the largest value leaves a
// 10x margin and still catches any wrong index, transpose or missing term (errors of order 1e-1).
// The digest is the end of a run's check of its parameters: a NaN or an infinity anywhere ends the
// process with the first bad index, a finite model is hashed as before.
TEST_F(MlpTest, DigestRefusesNonFiniteParameters) {
  uint64_t before = mlp_param_digest(&m, &c);
  EXPECT_EQ(mlp_param_digest(&m, &c), before);
  size_t last = m.n_params - 1;
  float keep = m.params[last];
  m.params[last] = INFINITY;  // the CPU device's parameters are host memory
  EXPECT_EXIT(mlp_param_digest(&m, &c), ::testing::ExitedWithCode(1),
              "parameter " + std::to_string(last) + " of " + std::to_string(m.n_params) +
                  " is inf: training diverged");
  m.params[last] = keep;
  m.params[3] = NAN;
  EXPECT_EXIT(mlp_param_digest(&m, &c), ::testing::ExitedWithCode(1), "parameter 3 of .* is nan");
  m.params[3] = 0.5f;
  EXPECT_NE(mlp_param_digest(&m, &c), before);  // finite again: hashed, and the change shows
}

TEST_F(MlpTest, ForwardBackwardMatchFloat64Reference) {
  Ref r = reference();
  mlp_forward(&m, &c, x.data(), B);
  mlp_loss(&m, &c, y.data(), B);
  int calls = 0;
  g_hook_order.clear();
  mlp_zero_grad(&m);
  mlp_backward(&m, &c, x.data(), B, 1.0f, record_hook, &calls);
  EXPECT_NEAR(mlp_loss_value(&m, &c), r.loss, 1e-5 * std::fabs(r.loss));
  double gmax = 0;
  for (double g : r.grad) gmax = std::max(gmax, std::fabs(g));
  ASSERT_GT(gmax, 1e-3);
  std::vector<float> g(m.n_params);
  dev_download(&c, g.data(), m.grads, g.size() * sizeof(float));
  for (size_t i = 0; i < g.size(); i++) ASSERT_NEAR(g[i], r.grad[i], 1e-5 * gmax) << "grad " << i;
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(g_hook_order, (std::vector<int>{2, 1, 0}));
}

TEST_F(MlpTest, BackwardAccumulatesUntilZeroGrad) {
  std::vector<float> g1(m.n_params), g2(m.n_params), g3(m.n_params);
  mlp_zero_grad(&m);
  for (int pass = 0; pass < 2; pass++) {
    mlp_forward(&m, &c, x.data(), B);
    mlp_loss(&m, &c, y.data(), B);
    mlp_backward(&m, &c, x.data(), B, 1.0f, nullptr, nullptr);
    dev_download(&c, (pass ? g2 : g1).data(), m.grads, g1.size() * sizeof(float));
  }
  mlp_zero_grad(&m);
  mlp_forward(&m, &c, x.data(), B);
  mlp_loss(&m, &c, y.data(), B);
  mlp_backward(&m, &c, x.data(), B, 1.0f, nullptr, nullptr);
  dev_download(&c, g3.data(), m.grads, g3.size() * sizeof(float));
  // Accumulating GEMMs (beta = 1) may add their K-blocks into C one by one, so g1 + g1' can differ
  // from 2·g1 in the last bit; a missing or doubled term would be off by 100%.
  for (size_t i = 0; i < g1.size(); i++) {
    ASSERT_NEAR(g2[i], 2.0f * g1[i], 1e-6f * std::fabs(g1[i]) + 1e-9f) << i;
    ASSERT_EQ(g3[i], g1[i]) << i;  // zero_grad: written afresh, bit for bit the first result
  }
}

// The hooks of a fully sharded model: a layout-only MLP whose hooks point each layer at a copy of its
// own computes what the flat-buffer MLP computes, bit for bit, and the hooks run in PyTorch's order.
struct HookLog {
  std::vector<std::string> calls;
  std::vector<std::vector<float>> p, g;  // each layer's parameters (a copy) and its gradient buffer
  Mlp *m = nullptr;
};
static void log_call(HookLog *h, const char *what, int l) { h->calls.push_back(what + std::to_string(l)); }
static void hk_pre_forward(int l, void *u) {
  auto *h = static_cast<HookLog *>(u);
  log_call(h, "pf", l);
  h->m->layer[l] = h->p[l].data();
}
static void hk_post_forward(int l, void *u) {
  auto *h = static_cast<HookLog *>(u);
  log_call(h, "qf", l);
  h->m->layer[l] = nullptr;  // resharded: backward must come back through its pre-hook
}
static void hk_pre_backward(int l, void *u) {
  auto *h = static_cast<HookLog *>(u);
  log_call(h, "pb", l);
  h->m->layer[l] = h->p[l].data();
  h->m->layer_grad[l] = h->g[l].data();
}
static void hk_post_backward(int l, void *u) { log_call(static_cast<HookLog *>(u), "qb", l); }
static void hk_ready(int l, void *u) { log_call(static_cast<HookLog *>(u), "gr", l); }

TEST_F(MlpTest, HooksOnALayoutOnlyModelMatchTheFlatModelBitForBit) {
  Mlp h;
  mlp_init_layout(&h, &c, sizes, 3, 8);
  EXPECT_EQ(h.n_params, m.n_params);
  EXPECT_EQ(h.params, nullptr);
  EXPECT_EQ(h.n_alloc, 0u);
  for (int l = 0; l < 3; l++) EXPECT_EQ(h.w_off[l], m.w_off[l]);
  HookLog log;
  log.m = &h;
  Rng r;
  rng_init(&r, 123, RNG_STREAM_INIT);  // mlp_init()'s draws, one layer at a time
  for (int l = 0; l < 3; l++) {
    log.p.emplace_back(mlp_layer_size(&h, l));
    log.g.emplace_back(mlp_layer_size(&h, l), -1.0f);
    mlp_init_layer_params(&h, &r, l, log.p[l].data());
  }
  std::vector<float> p(m.n_params), g(m.n_params);
  dev_download(&c, p.data(), m.params, p.size() * sizeof(float));
  for (int l = 0; l < 3; l++)
    for (size_t i = 0; i < log.p[l].size(); i++) ASSERT_EQ(log.p[l][i], p[m.w_off[l] + i]) << l << " " << i;
  MlpHooks hooks = {hk_pre_forward, hk_post_forward, hk_pre_backward, hk_post_backward, &log};
  mlp_register_hooks(&h, &hooks);
  for (Mlp *mm : {&m, &h}) {
    mlp_zero_grad(mm);
    mlp_forward(mm, &c, x.data(), B);
    mlp_loss(mm, &c, y.data(), B);
    mlp_backward(mm, &c, x.data(), B, 0.5f, mm == &h ? hk_ready : nullptr, &log);
  }
  EXPECT_EQ(mlp_loss_value(&h, &c), mlp_loss_value(&m, &c));
  dev_download(&c, g.data(), m.grads, g.size() * sizeof(float));
  for (int l = 0; l < 3; l++)
    for (size_t i = 0; i < log.g[l].size(); i++) ASSERT_EQ(log.g[l][i], g[m.w_off[l] + i]) << l << " " << i;
  std::vector<std::string> want = {"pf0", "qf0", "pf1", "qf1", "pf2", "qf2", "pb2", "gr2",
                                   "qb2", "pb1", "gr1", "qb1", "pb0", "gr0", "qb0"};
  EXPECT_EQ(log.calls, want);
  // the digest of the layers one after another is the flat buffer's
  uint64_t d = MLP_DIGEST_INIT;
  for (int l = 0; l < 3; l++)
    d = mlp_digest_update(d, &c, log.p[l].data(), log.p[l].size(), m.w_off[l], m.n_params);
  EXPECT_EQ(d, mlp_param_digest(&m, &c));
  EXPECT_NE(mlp_digest_update(d, &c, log.p[0].data(), 1, 0, 1), d);
  mlp_register_hooks(&h, nullptr);
  EXPECT_EQ(h.hooks, nullptr);
  mlp_free(&h, &c);
}

// Finite differences of the float64 reference agree with its analytic gradient: this pins the
// reference itself, so the comparison above cannot pass with a wrong reference.
TEST_F(MlpTest, ReferenceMatchesFiniteDifferences) {
  Ref r = reference();
  std::vector<double> base = r.p;
  for (size_t i : {size_t(0), size_t(5), m.b_off[0], m.w_off[1] + 3, m.b_off[2] + 1}) {
    double h = 1e-6;
    r.p = base;
    r.p[i] += h;
    r.run(x, y, B);
    double up = r.loss;
    r.p[i] -= 2 * h;
    r.run(x, y, B);
    double down = r.loss;
    r.p = base;
    r.run(x, y, B);
    EXPECT_NEAR((up - down) / (2 * h), r.grad[i], 1e-6) << "param " << i;
  }
}

// Over a loader's order, in batches smaller than the order, added to the running count; a strided
// shard counts only its rows. Every third row (0, 3, 6) is labelled wrongly, the others with the
// model's own answer, so the count is known: 4 of all 7 rows, 2 of rows 0, 2, 4, 6, 2 of rows 1, 3, 5.
TEST_F(MlpTest, CountCorrectLoaderCountsTheWholeOrder) {
  const float *logits = mlp_forward(&m, &c, x.data(), B);
  Dataset ds{};
  ds.n = B;
  ds.dim = sizes[0];
  ds.n_classes = sizes[3];
  ds.x = (float *)malloc(sizeof(float) * x.size());
  ds.y = (int *)malloc(sizeof(int) * B);
  std::copy(x.begin(), x.end(), ds.x);
  for (int r = 0; r < B; r++) {
    int best = 0;
    for (int k = 1; k < sizes[3]; k++)
      if (logits[r * sizes[3] + k] > logits[r * sizes[3] + best]) best = k;
    ds.y[r] = r % 3 == 0 ? (best + 1) % sizes[3] : best;
  }
  Loader ld;
  loader_init(&ld, &c, &ds, 3, B);  // the whole order in batches of 3, 3 and 1
  dataset_free(&ds);
  const int first[3] = {0, 0, 1}, stride[3] = {1, 2, 2}, expect[3] = {4, 2, 2};
  for (int i = 0; i < 3; i++) {
    loader_set_stride_order(&ld, &c, first[i], stride[i]);
    int correct = 100;  // a running count: the order's answers are added to it
    mlp_count_correct_loader(&m, &c, &ld, 3, &correct);
    EXPECT_EQ(correct, 100 + expect[i]) << "first " << first[i] << ", stride " << stride[i];
  }
  loader_free(&ld, &c);
}

TEST_F(MlpTest, CountCorrectMatchesArgmax) {
  int correct = 0;
  mlp_count_correct(&m, &c, x.data(), y.data(), B, &correct);
  Ref r = reference();
  (void)r;
  const float *logits = m.act[2];
  int expect = 0;
  for (int b = 0; b < B; b++) {
    int best = 0;
    for (int k = 1; k < 5; k++)
      if (logits[b * 5 + k] > logits[b * 5 + best]) best = k;
    expect += best == y[b];
  }
  EXPECT_EQ(correct, expect);
}

TEST(MlpSizes, ParsesHiddenList) {
  int s[MLP_MAX_LAYERS + 1];
  ASSERT_EQ(mlp_parse_sizes("1024,1024", 784, 10, s), 3);
  EXPECT_EQ(s[0], 784);
  EXPECT_EQ(s[1], 1024);
  EXPECT_EQ(s[2], 1024);
  EXPECT_EQ(s[3], 10);
  ASSERT_EQ(mlp_parse_sizes("", 784, 10, s), 1);
  EXPECT_EQ(s[1], 10);
  EXPECT_EQ(mlp_parse_sizes("12,", 4, 2, s), -1);
  EXPECT_EQ(mlp_parse_sizes("12,,3", 4, 2, s), -1);
  EXPECT_EQ(mlp_parse_sizes("0", 4, 2, s), -1);
  EXPECT_EQ(mlp_parse_sizes("-3", 4, 2, s), -1);
  EXPECT_EQ(mlp_parse_sizes("abc", 4, 2, s), -1);
  EXPECT_EQ(mlp_parse_sizes("1,2,3,4,5,6,7,8", 4, 2, s), -1);  // 9 layers > MLP_MAX_LAYERS
}

// The flag's version of the parse ends the job with the bounds, or returns what mlp_parse_sizes does.
TEST(MlpParseHiddenDeathTest, BadListsEndTheJobWithTheBounds) {
  int s[MLP_MAX_LAYERS + 1];
  ASSERT_EQ(mlp_parse_hidden("64,32", 784, 10, s), 3);
  EXPECT_EQ(s[1], 64);
  EXPECT_EQ(s[3], 10);
  EXPECT_EXIT(mlp_parse_hidden("1,2,3,4,5,6,7,8", 4, 2, s), ::testing::ExitedWithCode(2),
              "error: --hidden '1,2,3,4,5,6,7,8': at most 7 sizes, each 1..1048576");
  EXPECT_EXIT(mlp_parse_hidden("1048577", 4, 2, s), ::testing::ExitedWithCode(2), "--hidden '1048577'");
}
