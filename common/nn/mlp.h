/**
 * @file
 * @brief A multi-layer perceptron classifier: Linear → ReLU → … → Linear, with softmax cross-entropy.
 *
 * Parameters live in **one flat buffer**, layer-major: W0 (H0, I), b0 (H0), W1 (H1, H0), b1 (H1), …,
 * each weight `[out][in]` row-major as PyTorch's `nn.Linear` stores it. Gradients live in a second flat
 * buffer with the same layout, so a slice of parameters and the slice of their gradients share offsets:
 * this is what lets the optimizer run one pass and the DDP reducer all-reduce contiguous buckets.
 *
 * Backward walks the layers from last to first and calls a "gradients ready" hook after each layer's
 * weight and bias gradients have been queued: the analogue of the autograd hooks that PyTorch's DDP
 * reducer registers.
 *
 * What only sharded trainers use (steps 07 and 08: padded buffers, module hooks, a model without its
 * parameters) is in mlp_shard.h.
 *
 * Dimension letters: B batch, I inputs, H hidden, O outputs (classes), L layers (Linear modules).
 */
#ifndef DDP_MLP_H
#define DDP_MLP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "devmem.h"
#include "loader.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Most Linear layers an Mlp may have. */
#define MLP_MAX_LAYERS 8

/** @brief Largest hidden layer size mlp_parse_sizes() (and `--hidden`) accepts: 2^20. */
#define MLP_MAX_WIDTH 1048576

/**
 * @brief Called by mlp_backward() when the gradients of layer @p layer are queued (last layer first).
 * @param[in] layer index of the Linear layer, L-1 down to 0.
 * @param[in] user  the pointer given to mlp_backward().
 */
typedef void (*MlpGradHook)(int layer, void *user);

struct MlpHooks;  // mlp_shard.h

/** @brief An MLP with its parameters, gradients and activation buffers on one device. */
typedef struct Mlp {
  int n_layers;                   ///< L, number of Linear layers
  int sizes[MLP_MAX_LAYERS + 1];  ///< sizes[0] = I, sizes[l+1] = outputs of layer l, sizes[L] = O
  size_t w_off[MLP_MAX_LAYERS];   ///< offset (floats) of layer l's weight in the flat buffers
  size_t b_off[MLP_MAX_LAYERS];   ///< offset (floats) of layer l's bias in the flat buffers
  size_t n_params;                ///< total parameters
  int max_batch;                  ///< capacity of the activation buffers
  float *params;                  ///< device, (n_params): the parameters (then the padding: mlp_shard.h)
  float *grads;                   ///< device, (n_params): their gradients (then the padding)
  float *act[MLP_MAX_LAYERS];     ///< device, (max_batch, sizes[l+1]): layer l's output (after ReLU)
  float *dact[MLP_MAX_LAYERS];    ///< device, (max_batch, sizes[l+1]): gradient w.r.t. act[l]
  float *row_loss;                ///< device, (max_batch): scratch for the loss
  float *loss;                    ///< device, (1): mean loss of the last mlp_loss()
  bool grads_none;                ///< next backward writes grads instead of accumulating
  bool timed;                     ///< backward records the events below (mlp_time_backward())
  DevEvent backward_start;        ///< recorded when the last backward began
  DevEvent layer_done[MLP_MAX_LAYERS];  ///< recorded when that backward had queued layer l's gradients
  // Sharded models (mlp_shard.h); params + w_off[l] and grads + w_off[l] otherwise:
  size_t n_alloc;                ///< floats in params and grads: n_params, or padded
  float *layer[MLP_MAX_LAYERS];  ///< device: layer l's weight then bias, as forward and backward read them
  float *layer_grad[MLP_MAX_LAYERS];  ///< device: where backward writes layer l's gradients
  struct MlpHooks *hooks;             ///< module hooks (mlp_register_hooks()); NULL by default
} Mlp;

/**
 * @brief Builds an MLP with parameters initialised like `nn.Linear`: weight and bias uniform in
 * ±1/√fan_in, drawn in layer order (weights row by row, then the bias) from
 * `rng_init(seed, RNG_STREAM_INIT)`.
 * @param[out] m        the model.
 * @param[in] c         context (where parameters and buffers live).
 * @param[in] sizes     host, (n_layers + 1): I, hidden sizes…, O; each > 0.
 * @param[in] n_layers  number of Linear layers, 1..MLP_MAX_LAYERS.
 * @param[in] max_batch largest batch forward/backward will see.
 * @param[in] seed      initialisation seed.
 */
void mlp_init(Mlp *m, const Ctx *c, const int *sizes, int n_layers, int max_batch, uint64_t seed);

/** @brief Frees everything mlp_init() allocated. */
void mlp_free(Mlp *m, const Ctx *c);

/**
 * @brief Forward pass.
 * @param[in,out] m model (activations are stored for backward).
 * @param[in] c     context.
 * @param[in] x     device, (B, I).
 * @param[in] B     batch size, <= max_batch.
 * @return device, (B, O): the logits (m->act[L-1]).
 */
const float *mlp_forward(Mlp *m, const Ctx *c, const float *x, int B);

/**
 * @brief Softmax cross-entropy of the last forward's logits: writes the mean loss to `m->loss` and the
 * logits' gradient to `m->dact[L-1]`.
 * @param[in,out] m model.
 * @param[in] c     context.
 * @param[in] y     device, (B): labels.
 * @param[in] B     batch size of the last forward.
 */
void mlp_loss(Mlp *m, const Ctx *c, const int *y, int B);

/**
 * @brief Forgets the gradients (like `zero_grad(set_to_none=True)`): the next backward writes them
 * instead of accumulating, at no cost.
 * @param[in,out] m model.
 */
void mlp_zero_grad(Mlp *m);

/**
 * @brief Backward pass of `scale` × the loss of the last mlp_loss(): the C form of PyTorch's
 * `(loss * scale).backward()`. The loss gradient `m->dact[L-1]` is multiplied by @p scale (when it
 * is not 1), then propagated from layer L-1 down to 0, so every gradient comes out multiplied by
 * @p scale. Gradients are written after mlp_zero_grad() and accumulated otherwise (gradient
 * accumulation). After each layer's weight and bias gradients are queued, calls @p hook (if not
 * NULL) before propagating further.
 * @param[in,out] m model.
 * @param[in] c     context.
 * @param[in] x     device, (B, I): the input of the last forward.
 * @param[in] B     batch size of the last forward.
 * @param[in] scale factor of the loss (1: its plain gradient).
 * @param[in] hook  "gradients ready" callback, or NULL.
 * @param[in] user  passed to @p hook.
 */
void mlp_backward(Mlp *m, const Ctx *c, const float *x, int B, float scale, MlpGradHook hook, void *user);

/**
 * @brief From now on, every backward records `m->backward_start` when it begins and
 * `m->layer_done[l]` when layer l's gradients are queued, on the context's stream, for timelines
 * (trace.h). The events are freed by mlp_free().
 * @param[in,out] m model.
 * @param[in] c     context.
 */
void mlp_time_backward(Mlp *m, const Ctx *c);

/**
 * @brief Reads the mean loss of the last mlp_loss() (waits for the device).
 * @return the loss.
 */
float mlp_loss_value(const Mlp *m, const Ctx *c);

/**
 * @brief Forward pass, then adds the number of correctly classified rows to @p correct.
 * @param[in,out] m      model.
 * @param[in] c          context.
 * @param[in] x          device, (B, I).
 * @param[in] y          device, (B): labels.
 * @param[in] B          batch size.
 * @param[in,out] correct device, (1): running count.
 */
void mlp_count_correct(Mlp *m, const Ctx *c, const float *x, const int *y, int B, int *correct);

/**
 * @brief mlp_count_correct() over a loader's whole order (loader_set_order()), in batches of at most
 * @p batch samples (the last may be short): adds the number of correctly classified samples of the
 * order to @p correct.
 * @param[in,out] m       model; its max_batch must be at least @p batch.
 * @param[in] c           context.
 * @param[in,out] ld      the loader (its batch buffers are overwritten); its max_batch must be at
 *                        least @p batch.
 * @param[in] batch       samples per forward pass, >= 1.
 * @param[in,out] correct device, (1): running count.
 */
void mlp_count_correct_loader(Mlp *m, const Ctx *c, Loader *ld, int batch, int *correct);

/** @brief Number of floats of layer @p l's parameters (weight then bias, contiguous). */
size_t mlp_layer_size(const Mlp *m, int l);

/**
 * @brief 64-bit FNV-1a hash of the raw bytes of all parameters (the `param_digest` of the metrics file):
 * equal digests mean bit-identical replicas. The trainers compute it at the end of a run, so it also
 * checks the parameters there: a NaN or an infinity ends the job (exit 1, naming the first bad index),
 * so that a run whose last steps diverged does not end `done` with exit 0 when it saves nothing.
 * @return the digest (waits for the device).
 */
uint64_t mlp_param_digest(const Mlp *m, const Ctx *c);

/**
 * @brief Parses a `--hidden` list such as "1024,1024" into layer sizes I, hidden…, O.
 * @param[in] hidden   comma-separated positive sizes (may be empty: no hidden layer).
 * @param[in] in       input features I.
 * @param[in] out      classes O.
 * @param[out] sizes   host, (MLP_MAX_LAYERS + 1).
 * @return number of Linear layers, or -1 when @p hidden is malformed, has more than
 * MLP_MAX_LAYERS - 1 sizes, or a size above MLP_MAX_WIDTH (this is where `--hidden`'s bounds are
 * checked).
 */
int mlp_parse_sizes(const char *hidden, int in, int out, int *sizes);

/**
 * @brief mlp_parse_sizes() for the `--hidden` flag: ends the job on a list it rejects, with exit
 * status 2 and `error: --hidden 'LIST': at most 7 sizes, each 1..1048576` (check.h's die(); the
 * numbers are MLP_MAX_LAYERS - 1 and MLP_MAX_WIDTH).
 * @param[in] hidden   the flag's value.
 * @param[in] in       input features I.
 * @param[in] out      classes O.
 * @param[out] sizes   host, (MLP_MAX_LAYERS + 1): I, hidden…, O.
 * @return number of Linear layers.
 */
int mlp_parse_hidden(const char *hidden, int in, int out, int *sizes);

#ifdef __cplusplus
}
#endif
#endif
