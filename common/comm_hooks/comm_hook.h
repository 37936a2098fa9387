/**
 * @file
 * @brief DDP communication hooks (PyTorch: `ddp_model.register_comm_hook(state, hook)`): what the
 * reducer sends for a bucket of gradients, and how it turns the answer back into the bucket's mean.
 *
 * PyTorch's DDP calls a registered hook once per bucket instead of its own all-reduce; the hook
 * returns a future whose value becomes the bucket. Here a hook has the same two halves:
 * comm_hook_run() starts the bucket's collective, comm_hook_wait() waits and finishes (PyTorch's
 * `fut.then(decompress)`). The kinds (`--comm_hook`):
 * - `allreduce`: DDP without a hook, today's reducer: the bucket arrives divided by the world size W
 *   (the trainer's backward scaled the loss by 1/W), and a float32 all-reduce sums it.
 * - `fp16`, `bf16`: PyTorch's `fp16_compress_hook` and `bf16_compress_hook`
 *   (torch/distributed/algorithms/ddp_comm_hooks/default_hooks.py): the bucket, not divided yet, is
 *   cast to the 16-bit type, divided by W in that type, all-reduced in that type, and cast back. Half
 *   the bytes on the wire; the sum is rounded to 16 bits after every addition. NCCL sums the 16-bit
 *   types natively; MPI (no 16-bit floats at all) and Gloo send the 16-bit values and add each pair in
 *   float32, rounded once to the 16-bit type (half.h): that is the correctly rounded 16-bit sum, the
 *   same as NCCL's (and as PyTorch on Gloo) for each pair; with 3 or more ranks the order of the pairs
 *   is the backend's, as in PyTorch.
 * - `powersgd`: PyTorch's `powerSGD_hook` with its defaults (powersgd.h): low-rank factors of each
 *   weight gradient instead of the gradient, error feedback, warm start. It needs the bucket's tensors
 *   (PyTorch's GradBucket.gradients()): comm_hook_add_tensor() for each, then comm_hook_layout().
 * comm_hook_divides() says whether the hook divides by W itself (the trainer then must not).
 * What a hook sends for a bucket counts in the bucket's handle (DistWork.bytes, dist_take_bytes()):
 * the metrics file's `allreduce_bytes`.
 */
#ifndef DDP_COMM_HOOK_H
#define DDP_COMM_HOOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "dist.h"
#include "mlp.h"
#include "powersgd.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief The hooks of `--comm_hook`. */
typedef enum CommHookKind {
  COMM_HOOK_ALLREDUCE = 0,  ///< DDP's own float32 all-reduce (no hook)
  COMM_HOOK_FP16 = 1,       ///< fp16_compress_hook
  COMM_HOOK_BF16 = 2,       ///< bf16_compress_hook
  COMM_HOOK_POWERSGD = 3    ///< powerSGD_hook
} CommHookKind;

/** @brief A registered hook and its state. */
typedef struct CommHook {
  CommHookKind kind;  ///< which hook
  ProcessGroup *pg;   ///< who to reduce with (its context: where the buffers live)
  uint16_t *narrow;   ///< device, (n): fp16/bf16: the buckets cast to 16 bits, at the gradients' offsets
  size_t n;           ///< floats of the gradient buffer the buckets are slices of
  PowerSgd psgd;      ///< powersgd: its state
  float *widened;     ///< device, (n): fp16/bf16 with comm_hook_check_finite(): what is sent, widened back
  int *nonfinite;     ///< device, (1): fp16/bf16 with comm_hook_check_finite(): the count of that check
} CommHook;

/**
 * @brief The hook named @p name (`allreduce`, `fp16`, `bf16`, `powersgd`).
 * @param[in] name the name.
 * @param[out] kind its kind.
 * @return 0, or -1 for an unknown name.
 */
int comm_hook_parse(const char *name, CommHookKind *kind);

/**
 * @brief Sets up a hook for buckets that are slices of a gradient buffer of @p n floats.
 * @param[out] h  the hook.
 * @param[in] pg  the process group (connected: its context is where the buffers go).
 * @param[in] kind which hook.
 * @param[in] n   floats in the gradient buffer.
 * @param[in] psgd_rank  powersgd: matrix_approximation_rank (`--powersgd_rank`).
 * @param[in] psgd_start powersgd: start_powerSGD_iter (`--powersgd_start_iter`).
 * @param[in] seed       powersgd: the initial Qs' seed (`--seed`: the same on every rank).
 * fp16 and bf16 first check that the library sums their type (dist_verify_sum(): one small blocking
 * all-reduce, on every rank) and end the job, naming the library and the missing kernel, when it does not.
 */
void comm_hook_init(CommHook *h, ProcessGroup *pg, CommHookKind kind, size_t n, int psgd_rank, int psgd_start,
                    uint64_t seed);

/**
 * @brief `--comm_hook` and its flags, for a reducer (PyTorch: `ddp_model.register_comm_hook(state,
 * hook)`): the hook named @p name (comm_hook_parse(); an unknown name ends the job, exit 2) set up for
 * the gradients of @p m (comm_hook_init()), told each bucket's tensors, weight then bias per layer
 * (comm_hook_add_tensor(), comm_hook_layout()), and its own `--check_finite` (comm_hook_check_finite()).
 * Every rank must call it at the same point (fp16 and bf16 check their sum: a collective).
 * @param[out] h         the hook.
 * @param[in] pg         the process group (connected).
 * @param[in] name       `--comm_hook`.
 * @param[in] psgd_rank  `--powersgd_rank`.
 * @param[in] psgd_start `--powersgd_start_iter`.
 * @param[in] seed       `--seed`.
 * @param[in] m          the model whose flat gradient buffer the buckets are slices of.
 * @param[in] bucket_of  (2·n_layers): each tensor's bucket (tensor 2l: layer l's weight, 2l+1: its bias).
 * @param[in] check_finite `--check_finite`.
 * @return true when a hook is to run the buckets; false for `allreduce`, the reducer's own all-reduce
 *         (PyTorch's DDP without a hook), which is then set up but told nothing.
 */
bool comm_hook_setup(CommHook *h, ProcessGroup *pg, const char *name, int psgd_rank, int psgd_start,
                     uint64_t seed, const Mlp *m, const int *bucket_of, bool check_finite);

/**
 * @brief Tells the hook one tensor of a bucket (PyTorch's GradBucket.gradients()); only powersgd
 * uses them. Then comm_hook_layout().
 * @param[in,out] h  the hook.
 * @param[in] bucket the bucket's index.
 * @param[in] offset the tensor's first float in the gradient buffer.
 * @param[in] rows,cols its matrix view (a weight: out × in; a bias: its length × 1).
 */
void comm_hook_add_tensor(CommHook *h, int bucket, size_t offset, int rows, int cols);

/** @brief After the last comm_hook_add_tensor(): the hook's per-bucket state is allocated. */
void comm_hook_layout(CommHook *h);

/**
 * @brief `--check_finite` for what the hook sends: fp16 and bf16 check each bucket after the cast to
 * 16 bits (a finite float32 above 65504 becomes an infinity in fp16) and end the job, naming the rank,
 * the bucket and the overflow, before the all-reduce would spread it to every replica. The float32
 * gradients themselves are the reducer's to check (before the hook runs). No effect on the other hooks.
 * @param[in,out] h  the hook.
 * @param[in] on     whether to check (allocates n floats of scratch for fp16 and bf16).
 */
void comm_hook_check_finite(CommHook *h, bool on);

/** @brief True when the hook divides by the world size itself (fp16, bf16), as PyTorch's hooks do. */
bool comm_hook_divides(const CommHook *h);

/**
 * @brief Starts bucket @p bucket's collective (asynchronous).
 * @param[in,out] h    the hook.
 * @param[in] bucket   the bucket's index (the order every rank starts them in).
 * @param[in,out] grads device, (n): the gradient buffer; the bucket is [offset, offset + count).
 * @param[in] offset   the bucket's first float.
 * @param[in] count    its floats.
 * @param[in,out] w    the bucket's handle (dist_work_init(), not active).
 */
void comm_hook_run(CommHook *h, int bucket, float *grads, size_t offset, size_t count, DistWork *w);

/**
 * @brief Waits for the bucket's collective and finishes it: afterwards the bucket holds the mean of
 * the ranks' gradients (for fp16/bf16: cast back from 16 bits). Same arguments as comm_hook_run().
 */
void comm_hook_wait(CommHook *h, int bucket, float *grads, size_t offset, size_t count, DistWork *w);

/**
 * @brief Saves the hook's state of optimizer step @p step beside a checkpoint (powersgd:
 * `DIR/powersgd.step<S>.rank<R>.bin`, every rank its own; the other hooks have none), **before** the
 * checkpoint of that step: for powersgd a collective, which returns once every rank's state is on disk
 * (a barrier), so the caller then writes the checkpoint, and removes older states only once that is
 * written (comm_hook_prune()). A rank killed at any moment then leaves a checkpoint whose states all
 * exist: a restart resumes it.
 * @param[in] h    the hook.
 * @param[in] dir  the checkpoint's folder.
 * @param[in] step the optimizer step the checkpoint will record.
 */
void comm_hook_save(const CommHook *h, const char *dir, long long step);

/**
 * @brief Removes this rank's states of other steps than @p step from @p dir (powersgd only), once
 * the checkpoint of @p step is written: the states of the checkpoint it replaced, or of one a killed
 * run never wrote, and any `.tmp` a killed save left. Best effort: a file that cannot be removed
 * stays (it is never read).
 * @param[in] h    the hook.
 * @param[in] dir  the checkpoint's folder.
 * @param[in] step the step of the checkpoint now in @p dir.
 */
void comm_hook_prune(const CommHook *h, const char *dir, long long step);

/**
 * @brief Loads the state comm_hook_save() wrote for the checkpoint file @p ckpt_path (in its folder, of
 * its step); ends the job when it is missing, does not fit, or holds another step (powersgd only).
 * @param[in,out] h     the hook (after comm_hook_layout()).
 * @param[in] ckpt_path the checkpoint file resumed from.
 * @param[in] step      the checkpoint's optimizer step.
 */
void comm_hook_load(CommHook *h, const char *ckpt_path, long long step);

/** @brief Releases the hook's buffers. */
void comm_hook_free(CommHook *h);

/**
 * @brief The compression of fp16_compress_hook / bf16_compress_hook: `dst = narrow(src)`, then
 * `dst = narrow(dst / W)` (the division in the 16-bit type: computed in float32, rounded once).
 * @param[in] c    context (where both buffers live).
 * @param[in] bf16 false: IEEE half, true: bfloat16.
 * @param[in] src  device, (n): float32 values.
 * @param[out] dst device, (n): 16-bit values.
 * @param[in] n    elements.
 * @param[in] W    the world size.
 */
void comm_hook_compress(const Ctx *c, bool bf16, const float *src, uint16_t *dst, size_t n, int W);

/**
 * @brief The decompression: `dst = float(src)` (exact).
 * @param[in] c    context.
 * @param[in] bf16 false: IEEE half, true: bfloat16.
 * @param[in] src  device, (n): 16-bit values.
 * @param[out] dst device, (n): float32 values.
 * @param[in] n    elements.
 */
void comm_hook_decompress(const Ctx *c, bool bf16, const uint16_t *src, float *dst, size_t n);

#ifdef __cplusplus
}
#endif
#endif
