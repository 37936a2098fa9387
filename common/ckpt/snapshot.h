/**
 * @file
 * @brief Snapshots to restart from: `--save_steps N` and `--resume auto`.
 *
 * A restarted job (scripts/restart.sh, torchrun `--max-restarts`) runs the same command line again,
 * so the command must say "continue from the last snapshot if there is one": that is `--resume auto`.
 * The snapshot is the ordinary checkpoint (`--ckpt_dir`/checkpoint.bin, written atomically by rank 0),
 * also written every `--save_steps` optimizer steps, so that a failure loses at most that many steps.
 */
#ifndef DDP_SNAPSHOT_H
#define DDP_SNAPSHOT_H

#include <stdbool.h>

#include "args.h"  // ARGS_RESUME_AUTO

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Whether the step just finished is a `--save_steps` snapshot.
 * @param[in] save_steps `--save_steps` N (0: never).
 * @param[in] step       global optimizer steps done.
 * @return true when N > 0 and @p step is a multiple of N.
 */
bool snapshot_due(int save_steps, long long step);

/**
 * @brief The checkpoint to resume from: `--resume FILE` as given; for `--resume auto`, `--ckpt_dir`'s
 * checkpoint.bin when there is one (prints `--resume auto: found PATH`, then what is compared and
 * that --lr, --momentum, --weight_decay, --epochs and every other flag are not recorded), else NULL
 * (prints `--resume auto: no checkpoint in DIR: starting from the beginning`). "There is one" means
 * that the name exists, whatever it holds: a corrupt file, or one whose recorded model, data, seed or
 * (saved inside an epoch) world size, samples per step or --drop_last differ from this run's, is then
 * refused by the loader as `--resume FILE` refuses it (ckpt_load_model()), never silently replaced by
 * a fresh start. A file of a run that differs only in the flags not recorded resumes.
 * @param[in] resume   `--resume`: a checkpoint file, ARGS_RESUME_AUTO, or NULL.
 * @param[in] ckpt_dir `--ckpt_dir`, where `--resume auto` looks.
 * @return the path (static storage for auto), or NULL: no resume.
 */
const char *snapshot_resume_path(const char *resume, const char *ckpt_dir);

#ifdef __cplusplus
}
#endif
#endif
