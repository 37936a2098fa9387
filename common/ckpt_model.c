// ckpt_model.c: a model and its optimizer to and from a checkpoint file (ckpt_model.h).
#include "ckpt_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "log.h"

CkptMeta ckpt_model_meta(const Mlp *m, const Sgd *opt, uint64_t seed, const DataId *data) {
  CkptMeta meta;
  memset(&meta, 0, sizeof meta);
  meta.seed = seed;
  meta.optim = OPTIM_SGD;
  meta.optim_steps = (uint32_t)opt->steps;
  meta.n_layers = m->n_layers;
  memcpy(meta.sizes, m->sizes, sizeof meta.sizes);
  meta.data = *data;
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
  if (ckpt_save(path, meta, params, state, err, sizeof err) != 0) die(1, "%s", err);
  log0("saved %s (epoch %u, step %llu)\n", path, meta->epoch, (unsigned long long)meta->step);
  free(state);
  free(params);
}

void ckpt_load_model(const char *path, const CkptMeta *expect, CkptMeta *meta, Mlp *m, Sgd *opt,
                     const Ctx *c) {
  char err[512];
  size_t bytes = m->n_params * sizeof(float);
  float *params = mallocCheck(bytes), *state = mallocCheck(bytes);
  if (ckpt_load(path, expect, meta, params, state, err, sizeof err) != 0) die(1, "%s", err);
  if (meta->seed != expect->seed)
    die(1, "%s was trained with --seed %llu; pass the same seed to resume", path,
        (unsigned long long)meta->seed);
  // Inside an epoch, which samples are left depends on how the epoch was sharded: W ranks.
  if (meta->epoch_step > 0 && meta->world_size != expect->world_size)
    die(1,
        "%s was saved %u steps into epoch %u at %u ranks: resume it at %u ranks (the rest of an "
        "epoch depends on the world size), or resume from a checkpoint saved at an epoch's end",
        path, meta->epoch_step, meta->epoch + 1, meta->world_size, meta->world_size);
  dev_upload(c, m->params, params, bytes);
  dev_upload(c, opt->buf, state, bytes);
  dev_sync(c);
  opt->steps = meta->optim_steps;
  free(state);
  free(params);
}

void ckpt_log_resume(const char *path, const CkptMeta *meta, int epochs) {
  log0("resumed from %s at epoch %u, step %llu\n", path, meta->epoch, (unsigned long long)meta->step);
  if ((long long)meta->epoch >= epochs)
    log0(
        "warning: %s has already completed %u epochs and --epochs is %d: nothing to train (raise "
        "--epochs to go on)\n",
        path, meta->epoch, epochs);
}
