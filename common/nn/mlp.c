// mlp.c: the MLP on top of ops.h; device-agnostic (the ops dispatch to CPU or CUDA).
#include "mlp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "devmem.h"
#include "flops.h"
#include "mlp_shard.h"
#include "ops.h"
#include "rng.h"

// Layer l's weight W_l is (out, in) = (sizes[l+1], sizes[l]); its bias b_l is (out).
#define IN(m, l) ((m)->sizes[(l)])
#define OUT(m, l) ((m)->sizes[(l) + 1])

void mlp_init_layer_params(const Mlp *m, Rng *r, int l, float *host) {
  // nn.Linear: kaiming_uniform(a=√5) on the weight and the bias rule both give U(±1/√fan_in).
  float bound = 1.0f / sqrtf((float)IN(m, l));
  for (size_t i = 0; i < mlp_layer_size(m, l); i++) host[i] = rng_uniform_range(r, -bound, bound);
}

static void init_params_host(const Mlp *m, float *p, uint64_t seed) {
  Rng r;
  rng_init(&r, seed, RNG_STREAM_INIT);
  for (int l = 0; l < m->n_layers; l++) mlp_init_layer_params(m, &r, l, p + m->w_off[l]);
}

// A test hook (tests/integration/hooks_check.py, step 06's --check_finite), read from the environment
// once, when a model is built, never in backward: with DDP_TEST_NAN_BACKWARD=N, this process's N-th
// backward pass (1-based) turns its first layer's first weight gradient into NaN, as a bad batch or a
// bug on one rank would; with DDP_TEST_BIG_BACKWARD=N, into 1e6: finite in float32, beyond fp16's
// largest value (65504), as a 16-bit communication hook's overflow. Unset (always, outside those
// tests), backward tests one flag.
static struct {
  bool read, armed;          // the environment was read; a pass is to be spoilt
  long long nan_at, big_at;  // the backward passes to spoil (0: none)
  long long passes;          // backward passes so far, once armed
} test_fault;

static void test_fault_read_env(void) {
  if (test_fault.read) return;
  const char *nan = getenv("DDP_TEST_NAN_BACKWARD"), *big = getenv("DDP_TEST_BIG_BACKWARD");
  test_fault.nan_at = nan ? atoll(nan) : 0;
  test_fault.big_at = big ? atoll(big) : 0;
  test_fault.armed = test_fault.nan_at > 0 || test_fault.big_at > 0;
  test_fault.read = true;
}

static void test_fault_inject(const Ctx *c, float *dW) {
  ++test_fault.passes;
  if (test_fault.passes == test_fault.nan_at) ops_scale(c, dW, 1, NAN);  // x·NaN is NaN, queued like the GEMM
  if (test_fault.passes == test_fault.big_at) {
    const float v = 1e6f;
    dev_upload(c, dW, &v, sizeof v);
  }
}

void mlp_init_layout(Mlp *m, const Ctx *c, const int *sizes, int n_layers, int max_batch) {
  test_fault_read_env();
  if (n_layers < 1 || n_layers > MLP_MAX_LAYERS)
    die(2, "an MLP has 1 to %d layers, not %d", MLP_MAX_LAYERS, n_layers);
  memset(m, 0, sizeof *m);
  m->n_layers = n_layers;
  m->max_batch = max_batch;
  for (int l = 0; l <= n_layers; l++) {
    if (sizes[l] <= 0) die(2, "layer sizes must be positive (size %d is %d)", l, sizes[l]);
    m->sizes[l] = sizes[l];
  }
  for (int l = 0; l < n_layers; l++) {
    m->w_off[l] = m->n_params;
    m->b_off[l] = m->w_off[l] + (size_t)OUT(m, l) * IN(m, l);
    m->n_params = m->b_off[l] + OUT(m, l);
  }
  for (int l = 0; l < n_layers; l++) {
    m->act[l] = dev_alloc(c, (size_t)max_batch * OUT(m, l) * sizeof(float));
    m->dact[l] = dev_alloc(c, (size_t)max_batch * OUT(m, l) * sizeof(float));
  }
  m->row_loss = dev_alloc(c, (size_t)max_batch * sizeof(float));
  m->loss = dev_alloc(c, sizeof(float));
  m->grads_none = true;
}

void mlp_register_hooks(Mlp *m, const MlpHooks *hooks) {
  free(m->hooks);
  m->hooks = NULL;
  if (!hooks) return;
  m->hooks = mallocCheck(sizeof *m->hooks);
  *m->hooks = *hooks;
}

void mlp_init(Mlp *m, const Ctx *c, const int *sizes, int n_layers, int max_batch, uint64_t seed) {
  mlp_init_sharded(m, c, sizes, n_layers, max_batch, seed, 1);
}

void mlp_init_sharded(Mlp *m, const Ctx *c, const int *sizes, int n_layers, int max_batch, uint64_t seed,
                      int shards) {
  if (shards < 1) die(2, "mlp_init_sharded: %d shards", shards);
  mlp_init_layout(m, c, sizes, n_layers, max_batch);
  m->n_alloc = (m->n_params + (size_t)shards - 1) / (size_t)shards * (size_t)shards;
  m->params = dev_alloc(c, m->n_alloc * sizeof(float));
  m->grads = dev_alloc(c, m->n_alloc * sizeof(float));
  for (int l = 0; l < n_layers; l++) {
    m->layer[l] = m->params + m->w_off[l];
    m->layer_grad[l] = m->grads + m->w_off[l];
  }

  float *host = mallocCheck(m->n_params * sizeof(float));
  init_params_host(m, host, seed);
  dev_upload(c, m->params, host, m->n_params * sizeof(float));
  dev_sync(c);  // the upload reads `host` asynchronously on CUDA
  free(host);
  // the padding stays zero; the gradients start at zero (after `host` is gone: a lower peak)
  dev_zero(c, m->params + m->n_params, (m->n_alloc - m->n_params) * sizeof(float));
  dev_zero(c, m->grads, m->n_alloc * sizeof(float));
}

void mlp_free(Mlp *m, const Ctx *c) {
  if (m->timed) {
    for (int l = m->n_layers - 1; l >= 0; l--) dev_event_free(c, &m->layer_done[l]);
    dev_event_free(c, &m->backward_start);
  }
  dev_free(c, m->loss);
  dev_free(c, m->row_loss);
  for (int l = m->n_layers - 1; l >= 0; l--) {
    dev_free(c, m->dact[l]);
    dev_free(c, m->act[l]);
  }
  dev_free(c, m->grads);
  dev_free(c, m->params);
  free(m->hooks);
  memset(m, 0, sizeof *m);
}

const float *mlp_forward(Mlp *m, const Ctx *c, const float *x, int B) {
  if (B < 1 || B > m->max_batch) die(1, "batch of %d rows for an MLP built for %d", B, m->max_batch);
  const MlpHooks *h = m->hooks;
  const float *in = x;  // (B, IN(l))
  for (int l = 0; l < m->n_layers; l++) {
    if (h && h->pre_forward) h->pre_forward(l, h->user);
    const float *W = m->layer[l], *bias = W + (size_t)OUT(m, l) * IN(m, l);
    // act[l] = in · W_lᵀ + b_l, ReLU on every layer but the last (whose outputs are the logits).
    ops_gemm(c, false, true, B, OUT(m, l), IN(m, l), 1.0f, in, W, 0.0f, m->act[l]);
    flops_count(flops_linear(B, IN(m, l), OUT(m, l)));  // for the progress line's GFLOP/s
    ops_bias_act(c, m->act[l], bias, B, OUT(m, l), l < m->n_layers - 1);
    if (h && h->post_forward) h->post_forward(l, h->user);
    in = m->act[l];
  }
  return in;
}

void mlp_loss(Mlp *m, const Ctx *c, const int *y, int B) {
  int L = m->n_layers;
  ops_softmax_xent(c, m->act[L - 1], y, B, m->sizes[L], m->dact[L - 1], m->row_loss, m->loss);
}

void mlp_zero_grad(Mlp *m) { m->grads_none = true; }

void mlp_backward(Mlp *m, const Ctx *c, const float *x, int B, float scale, MlpGradHook hook, void *user) {
  float beta = m->grads_none ? 0.0f : 1.0f;  // write after zero_grad, else accumulate
  const MlpHooks *h = m->hooks;
  int L = m->n_layers;
  if (m->timed) dev_event_record(c, &m->backward_start, NULL);
  if (scale != 1.0f) ops_scale(c, m->dact[L - 1], (size_t)B * m->sizes[L], scale);
  for (int l = L - 1; l >= 0; l--) {
    const float *in = l > 0 ? m->act[l - 1] : x;  // (B, IN(l))
    const float *dy = m->dact[l];                 // (B, OUT(l))
    if (h && h->pre_backward) h->pre_backward(l, h->user);
    float *dW = m->layer_grad[l], *db = dW + (size_t)OUT(m, l) * IN(m, l);
    // dW_l = dyᵀ · in, db_l = Σ_b dy: this layer's gradients are complete after these two ops.
    ops_gemm(c, true, false, OUT(m, l), IN(m, l), B, 1.0f, dy, in, beta, dW);
    flops_count(2 * flops_linear(B, IN(m, l), OUT(m, l)));  // dW and d(in), by convention (flops.h)
    ops_bias_grad(c, dy, db, B, OUT(m, l), beta);
    if (l == 0 && test_fault.armed) test_fault_inject(c, dW);  // tests only (above)
    if (m->timed) dev_event_record(c, &m->layer_done[l], NULL);
    if (hook) hook(l, user);
    if (l > 0) {
      // d(in) = dy · W_l, then through the previous layer's ReLU.
      ops_gemm(c, false, false, B, IN(m, l), OUT(m, l), 1.0f, dy, m->layer[l], 0.0f, m->dact[l - 1]);
      ops_relu_backward(c, m->dact[l - 1], m->act[l - 1], (size_t)B * IN(m, l));
    }
    if (h && h->post_backward) h->post_backward(l, h->user);
  }
  m->grads_none = false;
}

void mlp_time_backward(Mlp *m, const Ctx *c) {
  if (m->timed) return;
  dev_event_init(c, &m->backward_start);
  for (int l = 0; l < m->n_layers; l++) dev_event_init(c, &m->layer_done[l]);
  m->timed = true;
}

float mlp_loss_value(const Mlp *m, const Ctx *c) {
  float v;
  dev_download(c, &v, m->loss, sizeof v);
  return v;
}

void mlp_count_correct(Mlp *m, const Ctx *c, const float *x, const int *y, int B, int *correct) {
  const float *logits = mlp_forward(m, c, x, B);
  ops_count_correct(c, logits, y, B, m->sizes[m->n_layers], correct);
}

void mlp_count_correct_loader(Mlp *m, const Ctx *c, Loader *ld, int batch, int *correct) {
  for (int start = 0; start < ld->n_order; start += batch) {
    int B = ld->n_order - start < batch ? ld->n_order - start : batch;
    loader_batch(ld, c, start, B);
    mlp_count_correct(m, c, ld->xb, ld->yb, B, correct);
  }
}

size_t mlp_layer_size(const Mlp *m, int l) { return (size_t)OUT(m, l) * IN(m, l) + OUT(m, l); }

// Ends the job when one of the n floats at host (parameters first + i0 on) is a NaN or an infinity;
// host is freed first (it is the caller's, and die() does not return).
static void require_finite(unsigned char *host, size_t n, size_t i0, size_t n_params) {
  for (size_t i = 0; i < n; i++) {
    float x;
    memcpy(&x, host + 4 * i, 4);
    if (isfinite(x)) continue;
    free(host);
    die(1,
        "the parameters are not finite at the end of the run: parameter %zu of %zu is %s: training "
        "diverged (try a smaller --lr or --weight_decay)",
        i0 + i, n_params,
        isnan(x) ? "nan"
        : x > 0  ? "inf"
                 : "-inf");
  }
}

uint64_t mlp_digest_update(uint64_t h, const Ctx *c, const float *x, size_t n, size_t first,
                           size_t n_params) {
  enum { CHUNK = 1 << 20 };  // read back a MiB at a time (a multiple of 4): no copy of the whole model
  size_t bytes = n * sizeof(float);
  unsigned char *host = mallocCheck(bytes < CHUNK ? bytes + 1 : CHUNK);
  for (size_t done = 0; done < bytes; done += CHUNK) {
    size_t len = bytes - done < CHUNK ? bytes - done : CHUNK;
    dev_download(c, host, (const unsigned char *)x + done, len);
    require_finite(host, len / 4, first + done / 4, n_params);
    for (size_t i = 0; i < len; i++) h = (h ^ host[i]) * 0x100000001b3ull;  // FNV-1a 64
  }
  free(host);
  return h;
}

uint64_t mlp_param_digest(const Mlp *m, const Ctx *c) {
  return mlp_digest_update(MLP_DIGEST_INIT, c, m->params, m->n_params, 0, m->n_params);
}

int mlp_parse_sizes(const char *hidden, int in, int out, int *sizes) {
  int n = 0;
  sizes[n++] = in;
  const char *s = hidden;
  while (*s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v <= 0 || v > MLP_MAX_WIDTH || (*end != ',' && *end != '\0')) return -1;
    if (n >= MLP_MAX_LAYERS) return -1;
    sizes[n++] = (int)v;
    s = *end == ',' ? end + 1 : end;
    if (*end == ',' && *s == '\0') return -1;  // trailing comma
  }
  sizes[n] = out;
  return n;  // Linear layers = hidden layers + 1
}

int mlp_parse_hidden(const char *hidden, int in, int out, int *sizes) {
  int n_layers = mlp_parse_sizes(hidden, in, out, sizes);
  if (n_layers < 0)
    die(2, "--hidden '%s': at most %d sizes, each 1..%d", hidden, MLP_MAX_LAYERS - 1, MLP_MAX_WIDTH);
  return n_layers;
}
