/**
 * @file
 * @brief Checkpoints: model parameters and optimizer state in one self-checking file.
 *
 * Format (little-endian; see docs for a PyTorch loader):
 *
 * | offset | type | field |
 * | --- | --- | --- |
 * | 0 | char[8] | magic `DDPCKPT` + NUL |
 * | 8 | u32 | format version (CKPT_VERSION) |
 * | 12 | u32 | header size (56 + 4 · (L + 1), + 24 from version 2, + 16 from version 3, + 4 from version 4,
 *   + 8 from version 5) |
 * | 16 | u32 | epochs completed |
 * | 20 | u32 | optimizer steps into the current epoch (0: saved at an epoch boundary) |
 * | 24 | u64 | global optimizer step |
 * | 32 | u64 | seed |
 * | 40 | u32 | world size at save |
 * | 44 | u32 | optimizer kind (OPTIM_SGD) |
 * | 48 | u32 | optimizer steps taken (momentum buffer valid when > 0), low 32 bits |
 * | 52 | u32 | n_layers L |
 * | 56 | u32[L+1] | layer sizes I, H…, O |
 * | 60 + 4L | u32[6] | version 2: DataId (kind, train and test samples, features, classes, labels CRC) |
 * | 84 + 4L | u32[4] | version 3: batch size, grad_accum, drop_last, epoch's samples consumed per rank |
 * | 100 + 4L | u32 | version 4: DataId's pixels CRC (the train and test features) |
 * | 104 + 4L | u32[2] | version 5: the global batch G (samples per step, all ranks together) and the world
 *   size the current epoch's sample list was padded for (the cursor into it is epoch steps × G) |
 * | header size | f32[n] | parameters: for each layer, weight [out][in] then bias [out] |
 * | … | f32[n] | optimizer state (momentum buffer), same layout |
 * | … | u32 | CRC-32 (standard, as zlib's) of every preceding byte |
 *
 * Version 1 to 4 files are still read (a version 1 file does not say its data set, versions 1 and
 * 2 do not say how the epoch was cut into steps, versions 1 to 3 do not record the pixels, so their
 * resume skips the pixel check; for a version 3 or 4 file the global batch and the epoch's world
 * size are those of its own run, batch × accumulation × world size and the world size); every file
 * written is version 5.
 *
 * Saving writes `PATH.tmp.PID` (PID: the saving process's id), flushes, fsyncs, renames it to PATH and
 * fsyncs the directory, so a crash never leaves a half-written file under the real name.
 */
#ifndef DDP_CKPT_H
#define DDP_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "data.h"
#include "mlp.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Current checkpoint format version. */
#define CKPT_VERSION 5

/** @brief Everything in a checkpoint besides the float arrays. */
typedef struct CkptMeta {
  uint32_t version;               ///< format version of the file read (ckpt_load); ckpt_save ignores it
  uint32_t epoch;                 ///< epochs completed
  uint32_t epoch_step;            ///< optimizer steps into the next epoch (0: epoch boundary)
  uint64_t step;                  ///< global optimizer step
  uint64_t seed;                  ///< run seed
  uint32_t world_size;            ///< world size at save
  uint32_t optim;                 ///< optimizer kind (OPTIM_SGD)
  uint32_t optim_steps;           ///< optimizer steps taken (momentum buffer valid when > 0)
  int n_layers;                   ///< L
  int sizes[MLP_MAX_LAYERS + 1];  ///< layer sizes I, H…, O
  DataId data;                    ///< the data set trained on (all zero in a version 1 file;
                                  ///< pixels_crc 0 before version 4)
  uint32_t batch_size;            ///< --batch_size (0 in a version 1 or 2 file: not recorded)
  uint32_t grad_accum;            ///< --grad_accum: micro-batches per step (1 before step 06)
  uint32_t drop_last;             ///< --drop_last: 1 when the sampler drops the tail, else 0
  uint32_t epoch_samples;         ///< samples of the current epoch consumed per rank: epoch_step ×
                                  ///< batch_size × grad_accum (0 at an epoch boundary)
  uint32_t global_batch;          ///< G, samples per step over all ranks (0: ckpt_save() writes
                                  ///< batch_size × grad_accum × world_size); a run that changed its world
                                  ///< size keeps G (step 09), so G need not be that product
  uint32_t epoch_world;           ///< the world size the current epoch's sample list was padded for
                                  ///< (0: ckpt_save() writes world_size); the epoch's cursor is
                                  ///< epoch_step × global_batch
} CkptMeta;

/**
 * @brief Number of floats of parameters for the layer sizes in @p meta (weights and biases).
 * @return the count, or 0 when the sizes are invalid.
 */
size_t ckpt_param_count(const CkptMeta *meta);

/**
 * @brief Writes a checkpoint atomically (temporary file `PATH.tmp.PID`, fsync, rename, directory
 * fsync). After a successful rename it also removes the `PATH.tmp.PID` files of savers that were
 * killed mid-write: those whose process no longer exists on this machine, untouched for 5 minutes.
 *
 * The temporary file is created with O_EXCL | O_NOFOLLOW, so a symlink planted under its name is
 * never followed. Parameters or optimizer state that hold a NaN or an infinity are refused before
 * any file is touched (the message names the first bad index), so a diverged run never replaces a
 * good checkpoint.
 * @param[in] path      destination.
 * @param[in] meta      header fields; n_layers and sizes define n.
 * @param[in] params    host, (n): parameters.
 * @param[in] opt_state host, (n): momentum buffer.
 * @param[out] err      on error, a one-line message.
 * @param[in] err_len   size of @p err.
 * @return 0 on success, -1 on error (the previous file at @p path is left untouched).
 */
int ckpt_save(const char *path, const CkptMeta *meta, const float *params, const float *opt_state, char *err,
              size_t err_len);

/**
 * @brief Prepares a checkpoint directory at start-up, so that a run does not train for an epoch
 * before it finds that it cannot save: creates @p dir and its missing parents (like `mkdir -p`),
 * then checks that it is a directory in which a file can be created and removed (a probe file
 * `DIR/.ddp_write_check.PID`, removed again).
 * @param[in] dir      the directory (`--ckpt_dir`).
 * @param[out] err     on error, a one-line message naming @p dir and the reason.
 * @param[in] err_len  size of @p err.
 * @return 0 when checkpoints can be written there, -1 on error.
 */
int ckpt_dir_check(const char *dir, char *err, size_t err_len);

/**
 * @brief Reads and verifies a checkpoint: magic, version, header size, file size, CRC, that its
 * layer sizes equal those of @p expect, and that it was trained on the data of @p expect (from
 * version 2 its sizes and labels, from version 4 also its pixels).
 * Only a regular file is read (a FIFO or a device is refused
 * without blocking). Counters that cannot be right (an epoch or steps into an epoch above INT_MAX,
 * more steps into the epoch than global steps, a step above INT64_MAX; from version 3 a batch size
 * or accumulation of 0, a drop_last other than 0 or 1, consumed samples other than epoch_step ×
 * batch_size × grad_accum) and non-finite parameters or optimizer state are refused.
 * @param[in] path      source.
 * @param[in] expect    the model shape and data the caller has (n_layers, sizes, data); other fields
 *                      ignored.
 * @param[out] meta     the header fields.
 * @param[out] params   host, (n): parameters.
 * @param[out] opt_state host, (n): momentum buffer.
 * @param[out] err      on error, a one-line message saying exactly what does not match.
 * @param[in] err_len   size of @p err.
 * @return 0 on success, -1 on error (outputs may be partly written).
 */
int ckpt_load(const char *path, const CkptMeta *expect, CkptMeta *meta, float *params, float *opt_state,
              char *err, size_t err_len);

#ifdef __cplusplus
}
#endif
#endif
