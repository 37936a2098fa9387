/**
 * @file
 * @brief Command-line flags with the course's names (`--epochs --batch_size --lr …`).
 *
 * Flags come in groups; each step accepts the groups of the stages it has reached, so a learner who
 * passes `--backend` to step 01 is told that step 01 has no process group. Invalid input (unknown flag,
 * missing value, non-number, out-of-range value) prints one line naming the problem, then the usage, and
 * exits with status 2. Every number has both bounds, and `--help` states them: the upper ones keep
 * what the trainers compute from a flag inside an int (e.g. `--batch_size` x `--grad_accum`, at most
 * 2^24 samples per optimizer step). `--hidden` is checked here only as a list of positive integers:
 * its bounds are the model's, checked by mlp_parse_sizes() (`--help` states them too).
 */
#ifndef DDP_ARGS_H
#define DDP_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Flags every step has: training, data, model, checkpoints, logging. */
#define ARGS_TRAIN 0x1u
/** @brief `--backend`, `--timeout` (from step 02: the process group). */
#define ARGS_DIST 0x2u
/** @brief `--drop_last` (from step 03: the distributed sampler). */
#define ARGS_SAMPLER 0x4u
/** @brief `--bucket_cap_mb`, `--grad_accum`, `--trace` (step 06: the bucketed reducer). */
#define ARGS_REDUCER 0x8u
/** @brief `--save_steps`, and `--resume auto` (step 06: snapshots for restarts). */
#define ARGS_FAULT 0x10u

/** @brief `--comm_hook`, `--powersgd_rank`, `--powersgd_start_iter`, `--check_finite` (step 06's reducer:
 *  DDP's communication hooks; steps 07 and 08 reduce-scatter shards and take no hook). */
#define ARGS_HOOKS 0x20u

/** @brief `--ft_op_timeout`, `--heartbeat_timeout`, `--join_timeout`, `--ft_quorum_timeout`,
 *  `--min_replicas` (step 09: live recovery under scripts/launch.sh --ft). */
#define ARGS_LIVE 0x40u

/** @brief The value of `--resume` that means --ckpt_dir's checkpoint when there is one (ARGS_FAULT). */
#define ARGS_RESUME_AUTO "auto"

/** @brief Parsed flags. Defaults and bounds: see `--help` (args.c's flag table). */
typedef struct Args {
  int epochs;             ///< --epochs: passes over the training data
  int batch_size;         ///< --batch_size: samples per optimizer step per process
  float lr;               ///< --lr: learning rate
  float momentum;         ///< --momentum: SGD momentum
  float weight_decay;     ///< --weight_decay: L2 weight decay
  int dataset_size;       ///< --dataset_size: train samples to use, 0 = all
  int save_interval;      ///< --save_interval: save a checkpoint every N epochs, 0 = never
  const char *device;     ///< --device: auto | cpu | cuda
  bool tf32;              ///< --tf32: GPU GEMMs may use TF32 tensor cores
  const char *data;       ///< --data: fashion-mnist | mnist | synthetic
  const char *data_dir;   ///< --data_dir: IDX directory (NULL: the dataset's default)
  const char *hidden;     ///< --hidden: hidden layer sizes, comma-separated positive integers
  uint64_t seed;          ///< --seed: initialisation and shuffling
  const char *metrics;    ///< --metrics: JSON Lines path, `{rank}` replaced (NULL: none)
  const char *ckpt_dir;   ///< --ckpt_dir: where checkpoints go
  const char *resume;     ///< --resume: checkpoint to continue from (NULL: none; ARGS_RESUME_AUTO: see there)
  const char *save_init;  ///< --save_init: folder for the initial state's checkpoint (NULL: none)
  int max_steps;          ///< --max_steps: stop after this many optimizer steps, 0 = no limit
  int log_interval;       ///< --log_interval: steps between progress lines
  float clip_grad_norm;   ///< --clip_grad_norm: clip the gradient's global 2-norm to this, 0 = off
  const char *backend;    ///< --backend: auto | nccl | mpi (ARGS_DIST)
  float timeout;          ///< --timeout: seconds a collective may wait before the job ends (ARGS_DIST)
  const char
      *fr_dir;  ///< --fr_dir: the flight recorder's folder (ARGS_DIST; default: --metrics' folder, else out)
  bool drop_last;           ///< --drop_last: drop the tail instead of padding (ARGS_SAMPLER)
  float bucket_cap_mb;      ///< --bucket_cap_mb: bucket size cap in MiB (ARGS_REDUCER)
  int grad_accum;           ///< --grad_accum: micro-batches per optimizer step (ARGS_REDUCER)
  const char *trace;        ///< --trace: Chrome trace output path (ARGS_REDUCER; NULL: none)
  int straggler;            ///< --straggler: steps per straggler report, 0 = none (ARGS_REDUCER)
  int save_steps;           ///< --save_steps: also save every N optimizer steps, 0 = never (ARGS_FAULT)
  const char *comm_hook;    ///< --comm_hook: allreduce | fp16 | bf16 | powersgd (ARGS_HOOKS)
  int powersgd_rank;        ///< --powersgd_rank: PowerSGD's matrix_approximation_rank (ARGS_HOOKS)
  int powersgd_start_iter;  ///< --powersgd_start_iter: plain all-reduce before this iteration (ARGS_HOOKS)
  bool check_finite;    ///< --check_finite: check each bucket for NaN/Inf before its collective (ARGS_HOOKS)
  float ft_op_timeout;  ///< --ft_op_timeout: seconds a collective may wait before its step fails (ARGS_LIVE)
  float heartbeat_timeout;  ///< --heartbeat_timeout: seconds without a heartbeat before the lighthouse drops
                            ///< a replica (ARGS_LIVE)
  float join_timeout;       ///< --join_timeout: seconds the lighthouse waits for late members (ARGS_LIVE)
  float ft_quorum_timeout;  ///< --ft_quorum_timeout: a replica's longest wait for a quorum (ARGS_LIVE)
  int min_replicas;         ///< --min_replicas: the fewest replicas that may train on (ARGS_LIVE)
  const char
      *ft_batch;  ///< --ft_batch: global | per_rank, the batch after a change of world size (ARGS_LIVE)
} Args;

/**
 * @brief Parses argv into @p a (each flag's default first). `--help` prints the usage and exits 0; any error
 * prints `error: <what>` and the usage to stderr and exits 2. Accepts `--flag value` and `--flag=value`.
 * @param[out] a      parsed flags.
 * @param[in] argc,argv the command line.
 * @param[in] groups  the ARGS_* groups this program accepts.
 * @param[in] about   one line describing the program, shown at the top of the usage.
 */
void args_parse(Args *a, int argc, char **argv, unsigned groups, const char *about);

/**
 * @brief Every flag that changes what is trained, as text that ranks can compare (agree_args()): one
 * line `--NAME<TAB>VALUE` each, for epochs, batch size, learning rate, momentum, weight decay,
 * clipping, dataset size and kind, seed, step limit, save interval, device, TF32, and the later
 * stages' `--drop_last`, `--bucket_cap_mb`, `--grad_accum`, `--save_steps`, `--comm_hook` and its
 * flags, `--check_finite`, and whether `--trace`, `--save_init` and `--resume auto` are on (all add
 * collectives). Flags that only say where output goes (`--metrics`, `--ckpt_dir`, `--log_interval`,
 * `--timeout`) are left out; `--hidden` and `--data_dir` are compared through what they produce. A
 * new flag that changes training joins this list. A float is written as its user would ("0.05"),
 * unless that text does not tell it from a neighbour: then with 9 significant digits.
 * @param[in] a the flags.
 * @return the text, in static storage (the next call overwrites it).
 */
const char *args_settings(const Args *a);

#ifdef __cplusplus
}
#endif
#endif
