// ckpt_model.c: a model and its optimizer to and from a checkpoint file (ckpt_model.h).
#include "ckpt_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "log.h"

CkptMeta ckpt_model_meta(const Mlp *m, const Sgd *opt, const DataId *data, uint64_t seed, int batch_size,
                         int grad_accum, bool drop_last) {
  CkptMeta meta;
  memset(&meta, 0, sizeof meta);
  meta.seed = seed;
  meta.optim = OPTIM_SGD;
  meta.optim_steps = (uint32_t)opt->steps;
  meta.n_layers = m->n_layers;
  memcpy(meta.sizes, m->sizes, sizeof meta.sizes);
  meta.data = *data;
  meta.batch_size = (uint32_t)batch_size;
  meta.grad_accum = (uint32_t)grad_accum;  // 1 in the steps without --grad_accum
  meta.drop_last = drop_last;
  return meta;
}

void ckpt_dir_require(const char *dir) {
  char err[512];
  if (ckpt_dir_check(dir, err, sizeof err) != 0) die(1, "%s", err);
}

void ckpt_save_model(const char *dir, const CkptMeta *meta, const Mlp *m, const Sgd *opt, const Ctx *c) {
  char path[4096], err[512];
  ckpt_dir_require(dir);  // created if missing (e.g. --save_init's folder), and writable
  if (snprintf(path, sizeof path, "%s/checkpoint.bin", dir) >= (int)sizeof path)
    die(1, "--ckpt_dir '%s': path too long", dir);
  size_t bytes = m->n_params * sizeof(float);
  float *params = mallocCheck(bytes), *state = mallocCheck(bytes);
  dev_download(c, params, m->params, bytes);
  dev_download(c, state, opt->buf, bytes);
  CkptMeta full = *meta;  // inside an epoch every step so far was a full one
  full.epoch_samples = meta->epoch_step * meta->batch_size * meta->grad_accum;
  if (ckpt_save(path, &full, params, state, err, sizeof err) != 0) die(1, "%s", err);
  log0("saved %s (epoch %u, step %llu)\n", path, meta->epoch, (unsigned long long)meta->step);
  free(state);
  free(params);
}

// "--batch_size 128" or, when either run accumulates, "--batch_size 32 --grad_accum 4".
static void resume_flags(char *buf, size_t len, const CkptMeta *meta, const CkptMeta *expect) {
  int n = snprintf(buf, len, "--batch_size %u", meta->batch_size);
  if ((meta->grad_accum != 1 || expect->grad_accum != 1) && n > 0 && (size_t)n < len)
    snprintf(buf + n, len - (size_t)n, " --grad_accum %u", meta->grad_accum);
}

// Inside an epoch, the samples left are those of this epoch's shards (W ranks, drop_last) after the
// steps taken (each of batch_size x grad_accum samples per rank): a run that cuts the epoch otherwise
// would skip samples or repeat them, so each difference ends the job, naming both values.
static void require_same_epoch(const char *path, const CkptMeta *meta, const CkptMeta *expect,
                               bool any_world) {
  const char *boundary = "or from a checkpoint saved at an epoch's end";
  if (!any_world && meta->world_size != expect->world_size)
    die(1,
        "%s was saved %u steps into epoch %u at %u ranks: resume it at %u ranks (the rest of an "
        "epoch depends on the world size), or resume from a checkpoint saved at an epoch's end",
        path, meta->epoch_step, meta->epoch + 1, meta->world_size, meta->world_size);
  if (meta->version < 3)
    die(1,
        "%s was saved %u steps into epoch %u in checkpoint format version %u, which does not record the "
        "samples per step: resume from a checkpoint saved at an epoch's end",
        path, meta->epoch_step, meta->epoch + 1, meta->version);
  uint64_t have = (uint64_t)meta->batch_size * meta->grad_accum;
  uint64_t run = (uint64_t)expect->batch_size * expect->grad_accum;
  if (!any_world && have != run) {
    char flags[64];
    resume_flags(flags, sizeof flags, meta, expect);
    die(1,
        "%s stopped %u steps into epoch %u at %llu samples per step per rank (batch %u x %u); this run "
        "takes %llu (batch %u x %u): resume with %s, %s",
        path, meta->epoch_step, meta->epoch + 1, (unsigned long long)have, meta->batch_size, meta->grad_accum,
        (unsigned long long)run, expect->batch_size, expect->grad_accum, flags, boundary);
  }
  if (!any_world && (meta->global_batch != have * meta->world_size || meta->epoch_world != meta->world_size))
    die(1,
        "%s stopped %u steps into epoch %u of a run that changed its world size (global batch %u at %u "
        "ranks, the epoch's samples laid out for %u): only a trainer that keeps the global batch (step "
        "09) resumes it mid-epoch; resume from a checkpoint saved at an epoch's end",
        path, meta->epoch_step, meta->epoch + 1, meta->global_batch, meta->world_size, meta->epoch_world);
  if (meta->drop_last != expect->drop_last)
    die(1,
        "%s stopped %u steps into epoch %u with --drop_last %s; this run has it %s (the rest of an "
        "epoch depends on it): resume %s --drop_last, %s",
        path, meta->epoch_step, meta->epoch + 1, meta->drop_last ? "on" : "off",
        expect->drop_last ? "on" : "off", meta->drop_last ? "with" : "without", boundary);
}

static void load_model(const char *path, const CkptMeta *expect, CkptMeta *meta, Mlp *m, Sgd *opt,
                       const Ctx *c, bool any_world) {
  char err[512];
  size_t bytes = m->n_params * sizeof(float);
  float *params = mallocCheck(bytes), *state = mallocCheck(bytes);
  if (ckpt_load(path, expect, meta, params, state, err, sizeof err) != 0) die(1, "%s", err);
  if (meta->seed != expect->seed)
    die(1, "%s was trained with --seed %llu; pass the same seed to resume", path,
        (unsigned long long)meta->seed);
  if (meta->epoch_step > 0) require_same_epoch(path, meta, expect, any_world);
  dev_upload(c, m->params, params, bytes);
  dev_upload(c, opt->buf, state, bytes);
  dev_sync(c);
  opt->steps = meta->optim_steps;
  free(state);
  free(params);
}

void ckpt_load_model(const char *path, const CkptMeta *expect, CkptMeta *meta, Mlp *m, Sgd *opt,
                     const Ctx *c) {
  load_model(path, expect, meta, m, opt, c, false);
}

void ckpt_load_model_any_world(const char *path, const CkptMeta *expect, CkptMeta *meta, Mlp *m, Sgd *opt,
                               const Ctx *c) {
  load_model(path, expect, meta, m, opt, c, true);
}

void ckpt_log_resume(const char *path, const CkptMeta *meta, int epochs) {
  log0("resumed from %s at epoch %u, step %llu\n", path, meta->epoch, (unsigned long long)meta->step);
  if ((long long)meta->epoch >= epochs)
    log0(
        "warning: %s has already completed %u epochs and --epochs is %d: nothing to train (raise "
        "--epochs to go on)\n",
        path, meta->epoch, epochs);
}
