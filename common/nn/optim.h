/**
 * @file
 * @brief SGD with momentum, dampening, Nesterov and weight decay, with `torch.optim.SGD` semantics, as
 * one fused pass over the flat parameter, gradient and momentum buffers.
 */
#ifndef DDP_OPTIM_H
#define DDP_OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Optimizer kinds recorded in checkpoints. */
#define OPTIM_SGD 1

/** @brief SGD hyper-parameters and state. */
typedef struct Sgd {
  float lr;         ///< learning rate
  float momentum;   ///< momentum factor (0: plain SGD, no buffer used)
  float dampening;  ///< dampening of the momentum update
  float wd;         ///< weight decay (L2, added to the gradient)
  bool nesterov;    ///< Nesterov momentum
  size_t n;         ///< number of parameters
  float *buf;       ///< device, (n): momentum buffer
  uint64_t steps;   ///< optimizer steps taken (0: the buffer is not yet initialised)
} Sgd;

/**
 * @brief Creates the optimizer state for @p n parameters.
 * @param[out] o   the optimizer.
 * @param[in] c    context.
 * @param[in] n    number of parameters.
 * @param[in] lr,momentum,dampening,wd,nesterov hyper-parameters (as torch.optim.SGD).
 */
void sgd_init(Sgd *o, const Ctx *c, size_t n, float lr, float momentum, float dampening, float wd,
              bool nesterov);

/**
 * @brief One optimizer step: `params -= lr * update(grads)`.
 * @param[in,out] o   the optimizer.
 * @param[in] c       context.
 * @param[in,out] params device, (n).
 * @param[in] grads   device, (n).
 */
void sgd_step(Sgd *o, const Ctx *c, float *params, const float *grads);

/** @brief Frees the momentum buffer. */
void sgd_free(Sgd *o, const Ctx *c);

#ifdef __cplusplus
}
#endif
#endif
