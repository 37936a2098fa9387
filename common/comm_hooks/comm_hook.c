// comm_hook.c: DDP's communication hooks (comm_hook.h), and the CPU reference of their casts.
#include <dirent.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "comm_hook_backend.h"
#include "devmem.h"
#include "half.h"
#include "ops.h"

#if HAVE_CUDA
#define IMPL(c, op) ((c)->dev == DEVICE_CUDA ? op##_cuda : op##_cpu)
#else
#define IMPL(c, op) op##_cpu
#endif

static const char *const NAMES[] = {"allreduce", "fp16", "bf16", "powersgd"};

int comm_hook_parse(const char *name, CommHookKind *kind) {
  for (int k = 0; k < (int)(sizeof NAMES / sizeof NAMES[0]); k++)
    if (strcmp(name, NAMES[k]) == 0) {
      *kind = (CommHookKind)k;
      return 0;
    }
  return -1;
}

void comm_hook_init(CommHook *h, ProcessGroup *pg, CommHookKind kind, size_t n, int psgd_rank, int psgd_start,
                    uint64_t seed) {
  memset(h, 0, sizeof *h);
  h->kind = kind;
  h->pg = pg;
  h->n = n;
  if (kind == COMM_HOOK_POWERSGD) powersgd_init(&h->psgd, pg, n, psgd_rank, psgd_start, seed);
  if (kind == COMM_HOOK_FP16 || kind == COMM_HOOK_BF16) {
    h->narrow = dev_alloc(pg->ctx, n * sizeof *h->narrow);
    // The library must sum the 16-bit type: an NCCL built without its kernels all-reduces nothing,
    // with no error. One small all-reduce of known values, once, before the first bucket.
    dist_verify_sum(pg, kind == COMM_HOOK_BF16 ? DIST_BF16 : DIST_HALF,
                    kind == COMM_HOOK_BF16 ? "--comm_hook bf16" : "--comm_hook fp16");
  }
}

bool comm_hook_setup(CommHook *h, ProcessGroup *pg, const char *name, int psgd_rank, int psgd_start,
                     uint64_t seed, const Mlp *m, const int *bucket_of, bool check_finite) {
  CommHookKind kind;
  if (comm_hook_parse(name, &kind) != 0) die(2, "unknown --comm_hook '%s'", name);
  comm_hook_init(h, pg, kind, m->n_params, psgd_rank, psgd_start, seed);
  if (kind == COMM_HOOK_ALLREDUCE) return false;
  for (int t = 0; t < 2 * m->n_layers; t++) {  // tensor 2l: layer l's weight (out x in), 2l+1: its bias
    int l = t / 2;
    comm_hook_add_tensor(h, bucket_of[t], t % 2 ? m->b_off[l] : m->w_off[l], m->sizes[l + 1],
                         t % 2 ? 1 : m->sizes[l]);
  }
  comm_hook_layout(h);
  comm_hook_check_finite(h, check_finite);  // a 16-bit hook checks what it sends, after its cast
  return true;
}

void comm_hook_add_tensor(CommHook *h, int bucket, size_t offset, int rows, int cols) {
  if (h->kind == COMM_HOOK_POWERSGD) powersgd_add_tensor(&h->psgd, bucket, offset, rows, cols);
}

void comm_hook_layout(CommHook *h) {
  if (h->kind == COMM_HOOK_POWERSGD) powersgd_layout(&h->psgd);
}

void comm_hook_check_finite(CommHook *h, bool on) {
  if (!on || (h->kind != COMM_HOOK_FP16 && h->kind != COMM_HOOK_BF16) || h->widened) return;
  h->widened = dev_alloc(h->pg->ctx, h->n * sizeof(float));
  h->nonfinite = dev_alloc(h->pg->ctx, sizeof(int));
}

// --check_finite with a 16-bit hook: the bucket as it will be sent, widened back to float32 and
// counted. The float32 gradients were finite (the reducer checked them first), so a non-finite value
// here is the cast's overflow (fp16 tops out at 65504). Reads one count back: the device waits.
static void check_sent(CommHook *h, int bucket, size_t offset, size_t count) {
  bool bf16 = h->kind == COMM_HOOK_BF16;
  comm_hook_decompress(h->pg->ctx, bf16, h->narrow + offset, h->widened + offset, count);
  int bad = ops_nonfinite(h->pg->ctx, h->widened + offset, count, h->nonfinite);
  if (bad == 0) return;
  const char *type = bf16 ? "bf16" : "fp16", *largest = bf16 ? "3.39e38" : "65504";
  die(1,
      "--check_finite: rank %d: %d gradient value%s of bucket %d overflowed %s when the %s hook cast them "
      "(finite in float32, beyond %s's largest value, %s: the hook casts, then divides by the world size, "
      "as PyTorch's does): the all-reduce would have sent an infinity to every replica, and none received "
      "it. PyTorch's %s_compress_hook casts without a check (with AMP, GradScaler then finds the infinity "
      "and skips the step); scale the loss down, or use --comm_hook bf16, whose range is float32's",
      h->pg->rank, bad, bad == 1 ? "" : "s", bucket, type, type, type, largest, type);
}

// DIR/powersgd.step<S>.rank<R>.bin; a folder too long for it ends the job (a cut name could be another
// step's)
static void state_path(char *path, size_t size, const char *dir, int dir_len, long long step, int rank) {
  if (snprintf(path, size, "%.*s/powersgd.step%lld.rank%d.bin", dir_len, dir, step, rank) >= (int)size)
    die(1, "--comm_hook powersgd: the folder %.*s is too long for its state files", dir_len, dir);
}

void comm_hook_save(const CommHook *h, const char *dir, long long step) {
  if (h->kind != COMM_HOOK_POWERSGD) return;
  char path[4096];
  state_path(path, sizeof path, dir, (int)strlen(dir), step, h->pg->rank);
  powersgd_save(&h->psgd, path);
  dist_barrier(h->pg);  // every rank's state is on disk before the checkpoint that needs it is written
}

void comm_hook_prune(const CommHook *h, const char *dir, long long step) {
  if (h->kind != COMM_HOOK_POWERSGD) return;
  int rank = h->pg->rank;
  DIR *d = opendir(dir);
  if (!d) return;
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    long long s;
    int r, end = 0;
    // this rank's states of another step, and any it left half-written (.tmp: killed while saving)
    if (sscanf(e->d_name, "powersgd.step%lld.rank%d.bin%n", &s, &r, &end) != 2 || end == 0 || r != rank)
      continue;
    bool whole = e->d_name[end] == '\0', tmp = strcmp(e->d_name + end, ".tmp") == 0;
    if ((whole && s != step) || tmp) {
      char path[4096 + 256];  // the folder fits in state_path's 4096 (the save checked), a name in 256
      snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
      remove(path);
    }
  }
  closedir(d);
}

void comm_hook_load(CommHook *h, const char *ckpt_path, long long step) {
  if (h->kind != COMM_HOOK_POWERSGD) return;
  const char *slash = strrchr(ckpt_path, '/');
  char path[4096];
  state_path(path, sizeof path, slash ? ckpt_path : ".", slash ? (int)(slash - ckpt_path) : 1, step,
             h->pg->rank);
  powersgd_load(&h->psgd, path, step);
}

void comm_hook_free(CommHook *h) {
  if (h->kind == COMM_HOOK_POWERSGD) powersgd_free(&h->psgd);
  if (h->narrow) dev_free(h->pg->ctx, h->narrow);
  if (h->widened) dev_free(h->pg->ctx, h->widened);
  if (h->nonfinite) dev_free(h->pg->ctx, h->nonfinite);
  memset(h, 0, sizeof *h);
}

bool comm_hook_divides(const CommHook *h) { return h->kind != COMM_HOOK_ALLREDUCE; }

void comm_hook_run(CommHook *h, int bucket, float *grads, size_t offset, size_t count, DistWork *w) {
  dist_lap_arrive(h->pg);               // --straggler: this rank's arrival, whichever hook communicates
  if (h->kind == COMM_HOOK_POWERSGD) {  // synchronous: nothing left in flight on w; its events and
    // fields only tell --trace what the hook did (its factors' all-reduces and the rest, one span)
    long long before = h->psgd.bytes;
    dev_event_record(h->pg->ctx, &w->start, NULL);
    powersgd_hook(&h->psgd, bucket, grads);
    dev_event_record(h->pg->ctx, &w->end, NULL);
    w->what = "powersgd";
    w->type = DIST_FLOAT;
    w->n = (size_t)(h->psgd.bytes - before) / sizeof(float);
    w->bytes += h->psgd.bytes - before;  // what its all-reduces sent: the bucket's bytes (dist_take_bytes)
    return;
  }
  if (h->kind == COMM_HOOK_ALLREDUCE) {  // the gradients arrive divided by W: their sum is the mean
    dist_all_reduce_async(h->pg, grads + offset, count, DIST_FLOAT, DIST_SUM, w);
    return;
  }
  bool bf16 = h->kind == COMM_HOOK_BF16;  // fp16 or bf16: cast, divide by W, all-reduce in 16 bits
  comm_hook_compress(h->pg->ctx, bf16, grads + offset, h->narrow + offset, count, h->pg->world_size);
  if (h->widened) check_sent(h, bucket, offset, count);  // --check_finite: what is sent
  dist_all_reduce_async(h->pg, h->narrow + offset, count, bf16 ? DIST_BF16 : DIST_HALF, DIST_SUM, w);
}

void comm_hook_wait(CommHook *h, int bucket, float *grads, size_t offset, size_t count, DistWork *w) {
  (void)bucket;
  if (h->kind == COMM_HOOK_POWERSGD) return;  // done in comm_hook_run
  dist_wait(h->pg, w);
  if (h->kind == COMM_HOOK_FP16 || h->kind == COMM_HOOK_BF16)  // PyTorch's decompress: copy_ back
    comm_hook_decompress(h->pg->ctx, h->kind == COMM_HOOK_BF16, h->narrow + offset, grads + offset, count);
}

void comm_hook_compress(const Ctx *c, bool bf16, const float *src, uint16_t *dst, size_t n, int W) {
  IMPL(c, comm_hook_compress)(c, bf16, src, dst, n, W);
}

void comm_hook_decompress(const Ctx *c, bool bf16, const uint16_t *src, float *dst, size_t n) {
  IMPL(c, comm_hook_decompress)(c, bf16, src, dst, n);
}

// ---- CPU reference --------------------------------------------------------------------------------

void comm_hook_compress_cpu(const Ctx *c, bool bf16, const float *src, uint16_t *dst, size_t n, int W) {
  (void)c;
  float w = (float)W;
  for (size_t i = 0; i < n; i++)  // `bucket.to(dtype).div_(world_size)`: two roundings, as PyTorch's
    dst[i] = bf16 ? bf16_from_float(bf16_to_float(bf16_from_float(src[i])) / w)
                  : half_from_float(half_to_float(half_from_float(src[i])) / w);
}

void comm_hook_decompress_cpu(const Ctx *c, bool bf16, const uint16_t *src, float *dst, size_t n) {
  (void)c;
  for (size_t i = 0; i < n; i++) dst[i] = bf16 ? bf16_to_float(src[i]) : half_to_float(src[i]);
}
