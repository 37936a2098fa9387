/**
 * @file
 * @brief What only the sharded trainers use of the MLP (mlp.h): steps 07 (ZeRO: flat buffers padded
 * to equal shards) and 08 (FSDP: a model without its parameters, whose module hooks gather each layer
 * just before it runs). Implemented in mlp.c with the rest of the model.
 *
 * Module hooks (mlp_register_hooks(), the analogue of PyTorch's `register_forward_pre_hook`,
 * `register_forward_hook`, `register_full_backward_pre_hook` and `register_full_backward_hook` on each
 * Linear layer) run around each layer's forward and backward. Forward and backward read layer l's
 * parameters at `m->layer[l]` and write its gradients at `m->layer_grad[l]`; mlp_init() points them
 * into the flat buffers, and a pre-forward or pre-backward hook may point them at a copy of its own (a
 * fully sharded model gathers each layer's parameters just before the layer runs).
 */
#ifndef DDP_MLP_SHARD_H
#define DDP_MLP_SHARD_H

#include <stdint.h>

#include "device.h"
#include "mlp.h"
#include "rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief Per-layer module hooks (each may be NULL), called with the layer's index and `user`.
 * Forward calls pre_forward(l) before it reads `layer[l]` and post_forward(l) once the layer's forward
 * is queued; backward calls pre_backward(l) before it reads `layer[l]` or writes `layer_grad[l]`, and
 * post_backward(l) once the layer's whole backward (its gradients and the gradient of its input) is
 * queued, after the "gradients ready" hook of mlp_backward().
 */
typedef struct MlpHooks {
  MlpGradHook pre_forward;    ///< before layer l's forward
  MlpGradHook post_forward;   ///< after layer l's forward
  MlpGradHook pre_backward;   ///< before layer l's backward
  MlpGradHook post_backward;  ///< after layer l's backward, input gradient included
  void *user;                 ///< passed to every hook
} MlpHooks;

/**
 * @brief mlp_init(), with the flat parameter and gradient buffers padded with zeros to
 * `n_alloc` = @p shards · ⌈n_params / @p shards⌉ floats, so that they split into @p shards equal,
 * contiguous shards (a sharded optimizer: each rank updates one shard). The padding is never read by
 * the model; it stays zero. mlp_init() is this with one shard.
 * @param[out] m        the model.
 * @param[in] c         context.
 * @param[in] sizes     host, (n_layers + 1): I, hidden sizes…, O; each > 0.
 * @param[in] n_layers  number of Linear layers, 1..MLP_MAX_LAYERS.
 * @param[in] max_batch largest batch forward/backward will see.
 * @param[in] seed      initialisation seed.
 * @param[in] shards    number of shards, >= 1.
 */
void mlp_init_sharded(Mlp *m, const Ctx *c, const int *sizes, int n_layers, int max_batch, uint64_t seed,
                      int shards);

/**
 * @brief The shape of an MLP without its parameters: sizes, offsets, n_params, activation buffers and
 * loss, but no flat parameter or gradient buffers (params, grads, layer[] and layer_grad[] are NULL,
 * n_alloc is 0), for a model whose parameters live elsewhere: its pre-forward and pre-backward hooks
 * must point layer[l] and layer_grad[l] at the layer's buffers (mlp_register_hooks()).
 * @param[out] m        the model.
 * @param[in] c         context.
 * @param[in] sizes     host, (n_layers + 1): I, hidden sizes…, O; each > 0.
 * @param[in] n_layers  number of Linear layers, 1..MLP_MAX_LAYERS.
 * @param[in] max_batch largest batch forward/backward will see.
 */
void mlp_init_layout(Mlp *m, const Ctx *c, const int *sizes, int n_layers, int max_batch);

/**
 * @brief Draws layer @p l's initial parameters (weight row by row, then bias; mlp_layer_size(l)
 * floats) from @p r, as mlp_init() does: called for l = 0, 1, …, L-1 in turn with one
 * `rng_init(seed, RNG_STREAM_INIT)` generator, it yields exactly mlp_init()'s parameters, one layer
 * at a time (so a sharded model never holds them all).
 * @param[in] m     the model (its sizes).
 * @param[in,out] r the generator, advanced past the layer.
 * @param[in] l     the layer.
 * @param[out] host host, (mlp_layer_size(l)).
 */
void mlp_init_layer_params(const Mlp *m, Rng *r, int l, float *host);

/**
 * @brief Registers module hooks (copied; NULL or all-NULL hooks remove them). See MlpHooks.
 * @param[in,out] m model.
 * @param[in] hooks the hooks, or NULL.
 */
void mlp_register_hooks(Mlp *m, const MlpHooks *hooks);

/** @brief The FNV-1a 64 offset basis: the digest of no bytes, where mlp_digest_update() starts. */
#define MLP_DIGEST_INIT 0xcbf29ce484222325ull

/**
 * @brief Continues a param_digest over @p n more floats on the device (FNV-1a over their bytes), with
 * mlp_param_digest()'s check that they are finite. The digest of the whole flat buffer is this over the
 * layers in order (weight then bias each), so a sharded model can hash its gathered layers one by one.
 * @param[in] h     the digest so far (MLP_DIGEST_INIT to begin).
 * @param[in] c     context.
 * @param[in] x     device, (n).
 * @param[in] n     floats.
 * @param[in] first index of x[0] among all n_params parameters (for the message on a bad value).
 * @param[in] n_params all parameters (for the message).
 * @return the digest after these floats (waits for the device).
 */
uint64_t mlp_digest_update(uint64_t h, const Ctx *c, const float *x, size_t n, size_t first, size_t n_params);

#ifdef __cplusplus
}
#endif
#endif
