/**
 * @file
 * @brief Saving and loading a model and its optimizer (the analogue of `torch.save` /
 * `torch.load` of their `state_dict()`s): the glue between the device buffers and the checkpoint
 * file of ckpt.h.
 *
 * The steps decide *who* saves and loads and *when* (rank 0, barriers, epoch boundaries: the
 * course's lessons); these two calls do the rest: copy the flat parameter and momentum buffers
 * between the device and the host, and write or read and verify the file. Both end the job with the
 * file's one-line message on any failure.
 */
#ifndef DDP_CKPT_MODEL_H
#define DDP_CKPT_MODEL_H

#include "ckpt.h"
#include "device.h"
#include "mlp.h"
#include "optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief The header fields that the model and its optimizer determine: layer sizes, optimizer kind
 * and step count, plus the run's data, seed and how it cuts an epoch into steps. The caller adds
 * epoch, step and world size.
 * @param[in] m          the model.
 * @param[in] opt        its optimizer.
 * @param[in] data       the data it trains on.
 * @param[in] seed       `--seed`.
 * @param[in] batch_size `--batch_size`.
 * @param[in] grad_accum `--grad_accum` (1 in the steps before 06).
 * @param[in] drop_last  `--drop_last` (off before step 03).
 * @return the header, its other fields zero.
 */
CkptMeta ckpt_model_meta(const Mlp *m, const Sgd *opt, const DataId *data, uint64_t seed, int batch_size,
                         int grad_accum, bool drop_last);

/**
 * @brief Makes sure, before training, that checkpoints can be written to @p dir (ckpt_dir_check():
 * created when missing, then probed), so a run does not train an epoch before it finds out; ends
 * the job with the reason otherwise.
 * @param[in] dir the checkpoint folder (`--ckpt_dir`).
 */
void ckpt_dir_require(const char *dir);

/**
 * @brief Writes `dir/checkpoint.bin` atomically (ckpt_save()) with the model's parameters and the
 * optimizer's momentum buffer, then prints (rank 0) `saved PATH (epoch E, step S)`. The samples of
 * the epoch consumed per rank are recorded as epoch_step × batch_size × grad_accum.
 * @param[in] dir  the checkpoint folder (`--ckpt_dir`, `--save_init`; created when missing).
 * @param[in] meta the header: epoch, step, seed, world size, layer sizes, data (n_layers and sizes
 *                 must be the model's).
 * @param[in] m    the model (its parameters are read from the device).
 * @param[in] opt  its optimizer (its momentum buffer is read from the device).
 * @param[in] c    the context of both.
 */
void ckpt_save_model(const char *dir, const CkptMeta *meta, const Mlp *m, const Sgd *opt, const Ctx *c);

/**
 * @brief Reads and verifies @p path (ckpt_load(): shape and data against @p expect), checks that it
 * was trained with @p expect's seed and, when it was saved inside an epoch (a `--max_steps` stop),
 * that the rest of that epoch is the same: the same world size (the epoch's shards), the same
 * samples per step per rank (batch_size × grad_accum: the steps already taken) and the same
 * drop_last (the shard's length); each difference ends the job naming both values. A version 1 or 2
 * file saved inside an epoch, which does not record its samples per step, is refused. Then it loads
 * the parameters into @p m and the momentum buffer and step count into @p opt.
 * @param[in] path    the checkpoint (`--resume`).
 * @param[in] expect  what this run has: layer sizes, data, seed, world size, batch_size, grad_accum
 *                    and drop_last (ckpt_model_meta()).
 * @param[out] meta   the file's header (epoch, step, …), for the caller's counters.
 * @param[in,out] m   the model.
 * @param[in,out] opt its optimizer.
 * @param[in] c       the context of both.
 */
void ckpt_load_model(const char *path, const CkptMeta *expect, CkptMeta *meta, Mlp *m, Sgd *opt,
                     const Ctx *c);

/**
 * @brief ckpt_load_model() for a trainer that keeps the global batch when its world size changes (step
 * 09): a checkpoint saved inside an epoch resumes at any world size and any --batch_size, since the
 * rest of the epoch is read from the file's cursor in blocks of its global batch (CkptMeta.global_batch,
 * laid out for CkptMeta.epoch_world ranks); it must still record how the epoch was cut (format 3 on)
 * and have the same --drop_last.
 */
void ckpt_load_model_any_world(const char *path, const CkptMeta *expect, CkptMeta *meta, Mlp *m, Sgd *opt,
                               const Ctx *c);

/**
 * @brief Prints (rank 0) where a run resumes, `resumed from PATH at epoch E, step S`, and when the
 * checkpoint has already completed @p epochs epochs or more, `warning: PATH has already completed E
 * epochs and --epochs is N: nothing to train (raise --epochs to go on)`.
 * @param[in] path   the checkpoint (`--resume`).
 * @param[in] meta   its header, as ckpt_load_model() returned it.
 * @param[in] epochs the run's `--epochs`.
 */
void ckpt_log_resume(const char *path, const CkptMeta *meta, int epochs);

#ifdef __cplusplus
}
#endif
#endif
