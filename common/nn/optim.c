// optim.c: SGD state and step (the arithmetic is ops_sgd, one fused pass).
#include "optim.h"

#include <string.h>

#include "devmem.h"
#include "ops.h"

void sgd_init(Sgd *o, const Ctx *c, size_t n, float lr, float momentum, float dampening, float wd,
              bool nesterov) {
  memset(o, 0, sizeof *o);
  o->lr = lr;
  o->momentum = momentum;
  o->dampening = dampening;
  o->wd = wd;
  o->nesterov = nesterov;
  o->n = n;
  o->buf = dev_alloc(c, n * sizeof(float));  // zeros; kept even without momentum (checkpoints)
}

void sgd_step(Sgd *o, const Ctx *c, float *params, const float *grads) {
  ops_sgd(c, params, grads, o->buf, o->n, o->lr, o->momentum, o->dampening, o->wd, o->nesterov,
          o->steps == 0);
  o->steps++;
}

void sgd_free(Sgd *o, const Ctx *c) {
  dev_free(c, o->buf);
  memset(o, 0, sizeof *o);
}
