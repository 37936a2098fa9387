// powersgd.c: PowerSGD, PyTorch's powerSGD_hook step for step (powersgd.h).
#define _POSIX_C_SOURCE 200809L  // fsync, fileno
#include "powersgd.h"

#include <errno.h>
#include <libdeflate.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "devmem.h"
#include "file.h"
#include "ops.h"

void powersgd_init(PowerSgd *s, ProcessGroup *pg, size_t n, int rank, long long start_iter, uint64_t seed) {
  memset(s, 0, sizeof *s);
  s->pg = pg;
  s->rank = rank;
  s->start_iter = start_iter;
  s->n = n;
  rng_init(&s->rng, seed, RNG_STREAM_POWERSGD);
  s->error = dev_alloc(pg->ctx, n * sizeof(float));
  s->copy = dev_alloc(pg->ctx, n * sizeof(float));
  dev_zero(pg->ctx, s->error, n * sizeof(float));
}

void powersgd_add_tensor(PowerSgd *s, int bucket, size_t offset, int rows, int cols) {
  if (bucket < 0 || bucket >= POWERSGD_MAX) die(1, "powersgd: bucket %d out of range", bucket);
  PsgdBucket *b = &s->b[bucket];
  if (b->n == POWERSGD_MAX) die(1, "powersgd: more than %d tensors in bucket %d", POWERSGD_MAX, bucket);
  int at = b->n++;
  while (at > 0 && b->t[at - 1].offset > offset) {  // kept by offset: the memory order
    b->t[at] = b->t[at - 1];
    at--;
  }
  PsgdTensor *t = &b->t[at];
  memset(t, 0, sizeof *t);
  t->offset = offset;
  t->rows = rows;
  t->cols = cols;
  int r = rows < cols ? rows : cols;
  t->r = r < s->rank ? r : s->rank;
  // PyTorch's _should_compress: (rows + cols)·r · min_compression_rate < rows·cols
  t->compress = (long long)(rows + cols) * t->r * POWERSGD_MIN_COMPRESSION_RATE < (long long)rows * cols;
  if (bucket >= s->n_buckets) s->n_buckets = bucket + 1;
}

void powersgd_layout(PowerSgd *s) {
  size_t most = 0;
  for (int i = 0; i < s->n_buckets; i++) {
    PsgdBucket *b = &s->b[i];
    if (b->n == 0) die(1, "powersgd: bucket %d has no tensor", i);
    b->offset = b->t[0].offset;
    const PsgdTensor *last = &b->t[b->n - 1];
    b->count = last->offset + (size_t)last->rows * last->cols - b->offset;
    for (int k = 0; k < b->n; k++) {
      PsgdTensor *t = &b->t[k];
      if (!t->compress) continue;
      t->p = b->p_len;
      t->q = b->q_len;
      b->p_len += (size_t)t->rows * t->r;
      b->q_len += (size_t)t->cols * t->r;
    }
    if (b->p_len) b->p = dev_alloc(s->pg->ctx, b->p_len * sizeof(float));
    if (b->q_len) b->q = dev_alloc(s->pg->ctx, b->q_len * sizeof(float));
    most = b->p_len > most ? b->p_len : most;
    most = b->q_len > most ? b->q_len : most;
  }
  s->host = mallocCheck((most ? most : 1) * sizeof(float));
}

void powersgd_free(PowerSgd *s) {
  for (int i = s->n_buckets - 1; i >= 0; i--) {
    dev_free(s->pg->ctx, s->b[i].q);
    dev_free(s->pg->ctx, s->b[i].p);
  }
  free(s->host);
  dev_free(s->pg->ctx, s->copy);
  dev_free(s->pg->ctx, s->error);
  memset(s, 0, sizeof *s);
}

void powersgd_set_q(PowerSgd *s, int bucket, const float *q) {
  PsgdBucket *b = &s->b[bucket];
  dev_upload(s->pg->ctx, b->q, q, b->q_len * sizeof(float));
  b->warm = true;
}

// PyTorch's _orthogonalize_gram_schmidt on one rows × r row-major matrix (epsilon 0): each column
// divided by its 2-norm, then its component removed from every later column.
static void gram_schmidt(float *m, int rows, int r) {
  for (int i = 0; i < r; i++) {
    float sq = 0.0f;
    for (int k = 0; k < rows; k++) sq += m[(size_t)k * r + i] * m[(size_t)k * r + i];
    float norm = sqrtf(sq);
    for (int k = 0; k < rows; k++) m[(size_t)k * r + i] /= norm;
    for (int j = i + 1; j < r; j++) {
      float dot = 0.0f;
      for (int k = 0; k < rows; k++) dot += m[(size_t)k * r + i] * m[(size_t)k * r + j];
      for (int k = 0; k < rows; k++) m[(size_t)k * r + j] -= dot * m[(size_t)k * r + i];
    }
  }
}

// Orthogonalises every P (which = 0) or Q (which = 1) of bucket b, on the host.
static void orthogonalise(PowerSgd *s, PsgdBucket *b, int which) {
  float *mem = which ? b->q : b->p;
  size_t len = which ? b->q_len : b->p_len;
  dev_download(s->pg->ctx, s->host, mem, len * sizeof(float));
  for (int k = 0; k < b->n; k++) {
    const PsgdTensor *t = &b->t[k];
    if (t->compress) gram_schmidt(s->host + (which ? t->q : t->p), which ? t->cols : t->rows, t->r);
  }
  dev_upload(s->pg->ctx, mem, s->host, len * sizeof(float));
}

// The Qs of a bucket without a warm one: Gaussian (the same on every rank), as PyTorch's torch.randn.
static void random_q(PowerSgd *s, PsgdBucket *b) {
  for (size_t i = 0; i < b->q_len; i++) s->host[i] = rng_normal(&s->rng);
  dev_upload(s->pg->ctx, b->q, s->host, b->q_len * sizeof(float));
  b->warm = true;
}

static void all_reduce(PowerSgd *s, float *x, size_t n) {
  if (n == 0) return;
  dist_all_reduce(s->pg, x, n, DIST_FLOAT, DIST_SUM);
  s->bytes += (long long)(n * sizeof(float));
}

void powersgd_hook(PowerSgd *s, int bucket, float *grads) {
  const Ctx *c = s->pg->ctx;
  PsgdBucket *b = &s->b[bucket];
  float *g = grads + b->offset, *err = s->error + b->offset, *cp = s->copy + b->offset;
  int W = s->pg->world_size;
  if (s->iter < s->start_iter) {  // PyTorch's _allreduce_fut: divide, then sum
    ops_div(c, g, b->count, (float)W);
    all_reduce(s, g, b->count);
    if (bucket == s->n_buckets - 1) s->iter++;
    return;
  }
  ops_axpy(c, g, err, b->count, 1.0f);  // error feedback
  dev_copy(c, cp, g, b->count * sizeof(float));
  for (int k = 0; k < b->n; k++) {  // the tensors not worth compressing: as they are
    const PsgdTensor *t = &b->t[k];
    if (t->compress) continue;
    size_t numel = (size_t)t->rows * t->cols;
    all_reduce(s, grads + t->offset, numel);
    ops_div(c, grads + t->offset, numel, (float)W);
  }
  if (b->q_len) {
    if (b->warm)
      orthogonalise(s, b, 1);
    else {
      random_q(s, b);
      orthogonalise(s, b, 1);
    }
    for (int k = 0; k < b->n; k++) {  // P = M·Q
      const PsgdTensor *t = &b->t[k];
      if (t->compress)
        ops_gemm(c, false, false, t->rows, t->r, t->cols, 1.0f, grads + t->offset, b->q + t->q, 0.0f,
                 b->p + t->p);
    }
    all_reduce(s, b->p, b->p_len);
    orthogonalise(s, b, 0);
    for (int k = 0; k < b->n; k++) {  // Q = Mᵀ·P
      const PsgdTensor *t = &b->t[k];
      if (t->compress)
        ops_gemm(c, true, false, t->cols, t->r, t->rows, 1.0f, grads + t->offset, b->p + t->p, 0.0f,
                 b->q + t->q);
    }
    all_reduce(s, b->q, b->q_len);
    ops_div(c, b->q, b->q_len, (float)W);
    for (int k = 0; k < b->n; k++) {  // M = P·Qᵀ
      const PsgdTensor *t = &b->t[k];
      if (t->compress)
        ops_gemm(c, false, true, t->rows, t->cols, t->r, 1.0f, b->p + t->p, b->q + t->q, 0.0f,
                 grads + t->offset);
    }
  }
  dev_copy(c, err, cp, b->count * sizeof(float));  // error = copy - the bucket's new contents
  ops_axpy(c, err, g, b->count, -1.0f);
  if (bucket == s->n_buckets - 1) s->iter++;
}

// ---- the state's file ----------------------------------------------------------------------------

#define PSGD_MAGIC "DDPPSGD"
#define PSGD_VERSION 2u  // 2: the world size at save

typedef struct Out {  // a file being written, with the CRC of what was written so far
  FILE *f;
  uint32_t crc;
  const char *path;
} Out;

// Ends the job after a failed write of o's temporary file, removing it first (as the checkpoint
// writer does): a full disk must not leave a half-written state behind.
static void fail_write(Out *o, const char *what) {
  int e = errno;
  if (o->f) fclose(o->f);
  o->f = NULL;
  remove(o->path);
  die(1, "cannot %s %s: %s", what, o->path, strerror(e));
}

static void put(Out *o, const void *x, size_t bytes) {
  if (fwrite(x, 1, bytes, o->f) != bytes) fail_write(o, "write");
  o->crc = libdeflate_crc32(o->crc, x, bytes);
}

// The state's device arrays, through the host scratch in chunks (the error is n floats).
static void put_device(Out *o, const PowerSgd *s, const float *x, size_t n, float *buf, size_t cap) {
  for (size_t at = 0; at < n; at += cap) {
    size_t k = n - at < cap ? n - at : cap;
    dev_download(s->pg->ctx, buf, x + at, k * sizeof(float));
    put(o, buf, k * sizeof(float));
  }
}

// The folder of path ("." when it names none).
static void parent_dir(const char *path, char *dir, size_t size) {
  const char *slash = strrchr(path, '/');
  if (!slash)
    snprintf(dir, size, ".");
  else
    snprintf(dir, size, "%.*s", slash == path ? 1 : (int)(slash - path), path);
}

void powersgd_save(const PowerSgd *s, const char *path) {
  char tmp[4200];
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  char dir[4096];
  parent_dir(path, dir, sizeof dir);
  if (file_make_dirs(dir) != 0) die(1, "cannot create %s: %s", dir, strerror(errno));
  Out o = {fopen(tmp, "wb"), 0, tmp};
  if (!o.f) die(1, "cannot create %s: %s", tmp, strerror(errno));
  uint32_t version = PSGD_VERSION, nb = (uint32_t)s->n_buckets, world = (uint32_t)s->pg->world_size;
  uint64_t iter = (uint64_t)s->iter, n = s->n;
  put(&o, PSGD_MAGIC, 8);
  put(&o, &version, 4);
  put(&o, &world, 4);
  put(&o, &iter, 8);
  put(&o, &n, 8);
  put(&o, &nb, 4);
  for (int i = 0; i < s->n_buckets; i++) {
    uint64_t q_len = s->b[i].q_len;
    uint32_t warm = s->b[i].warm;
    put(&o, &q_len, 8);
    put(&o, &warm, 4);
  }
  float buf[4096];
  put_device(&o, s, s->error, s->n, buf, 4096);
  for (int i = 0; i < s->n_buckets; i++) put_device(&o, s, s->b[i].q, s->b[i].q_len, buf, 4096);
  uint32_t crc = o.crc;
  put(&o, &crc, 4);
  if (fflush(o.f) != 0 || fsync(fileno(o.f)) != 0) fail_write(&o, "write");
  FILE *f = o.f;
  o.f = NULL;  // closed below, whatever fclose says
  if (fclose(f) != 0) fail_write(&o, "write");
  if (rename(tmp, path) != 0) {
    int e = errno;
    remove(tmp);
    die(1, "cannot rename %s to %s: %s", tmp, path, strerror(e));
  }
  // durable before the checkpoint that needs it is written (EINVAL: a file system without folder fsync)
  if (file_sync_dir(dir) != 0 && errno != EINVAL) die(1, "cannot fsync %s: %s", dir, strerror(errno));
}

typedef struct In {  // a file read whole
  unsigned char *buf;
  size_t size, at;
  const char *path;
} In;

static void get(In *in, void *x, size_t bytes) {
  if (in->size - in->at < bytes) die(1, "%s: truncated (%zu bytes)", in->path, in->size);
  memcpy(x, in->buf + in->at, bytes);
  in->at += bytes;
}

static void get_device(In *in, const PowerSgd *s, float *x, size_t n) {
  if (in->size - in->at < n * sizeof(float)) die(1, "%s: truncated (%zu bytes)", in->path, in->size);
  dev_upload(s->pg->ctx, x, in->buf + in->at, n * sizeof(float));
  in->at += n * sizeof(float);
}

void powersgd_load(PowerSgd *s, const char *path, long long step) {
  FILE *f = fopen(path, "rb");
  if (!f)
    die(1,
        "--comm_hook powersgd: cannot open %s (%s): PowerSGD's state (each rank's error feedback, Q) "
        "is saved beside the checkpoint by a run with --comm_hook powersgd, one file per rank: resume such "
        "a checkpoint at the same world size",
        path, strerror(errno));
  In in = {NULL, 0, 0, path};
  fseek(f, 0, SEEK_END);
  in.size = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  in.buf = mallocCheck(in.size + 1);
  if (fread(in.buf, 1, in.size, f) != in.size) die(1, "cannot read %s", path);
  fclose(f);
  uint32_t crc;
  if (in.size < 40) die(1, "%s: truncated (%zu bytes)", path, in.size);
  memcpy(&crc, in.buf + in.size - 4, 4);
  if (memcmp(in.buf, PSGD_MAGIC, 8) != 0) die(1, "%s: not a PowerSGD state file", path);
  if (libdeflate_crc32(0, in.buf, in.size - 4) != crc) die(1, "%s: CRC mismatch (damaged)", path);
  in.at = 8;
  uint32_t version, world, nb;
  uint64_t iter, n;
  get(&in, &version, 4);
  if (version != PSGD_VERSION) die(1, "%s: version %u, this program reads %u", path, version, PSGD_VERSION);
  get(&in, &world, 4);
  get(&in, &iter, 8);
  get(&in, &n, 8);
  get(&in, &nb, 4);
  // Each rank's error feedback is what its own gradients left out: at another world size the ranks'
  // shards of the data change, and no rank's state belongs to a new rank (PyTorch keeps it in memory
  // only: its PowerSGDState is not saved at all).
  if (world != (uint32_t)s->pg->world_size)
    die(1,
        "%s: PowerSGD's state saved at %u ranks, this run has %d: each rank's error feedback belongs to its "
        "own shard of the data, so it cannot move to another world size; resume at %u ranks, or without "
        "--comm_hook powersgd",
        path, world, s->pg->world_size, world);
  if (iter != (uint64_t)step)
    die(1,
        "%s: PowerSGD's state of step %llu for a checkpoint of step %lld (a file copied or renamed?): resume "
        "the checkpoint it was saved with, or start again",
        path, (unsigned long long)iter, step);
  if (n != s->n || nb != (uint32_t)s->n_buckets)
    die(1, "%s: %llu gradients in %u buckets, this run has %zu in %d (another model or --bucket_cap_mb)",
        path, (unsigned long long)n, nb, s->n, s->n_buckets);
  for (int i = 0; i < s->n_buckets; i++) {
    uint64_t q_len;
    uint32_t warm;
    get(&in, &q_len, 8);
    get(&in, &warm, 4);
    if (q_len != s->b[i].q_len)
      die(1, "%s: bucket %d has %llu Q floats, this run %zu (another --powersgd_rank?)", path, i,
          (unsigned long long)q_len, s->b[i].q_len);
    s->b[i].warm = warm != 0;
  }
  get_device(&in, s, s->error, s->n);
  for (int i = 0; i < s->n_buckets; i++) get_device(&in, s, s->b[i].q, s->b[i].q_len);
  s->iter = (long long)iter;
  free(in.buf);
}
