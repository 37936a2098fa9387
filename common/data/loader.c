// loader.c: the dataset copied to the device once, an order uploaded once per epoch, and batches
// gathered on the device. All memory is allocated in loader_init(), none while training.
#include "loader.h"

#include <string.h>

#include "check.h"
#include "devmem.h"
#include "log.h"
#include "ops.h"

void loader_init(Loader *ld, const Ctx *c, Dataset *ds, int max_batch, int max_order) {
  if (ds->n <= 0 || ds->dim <= 0 || max_batch <= 0 || max_order <= 0)
    check_fail("LOADER", __FILE__, __LINE__, "loader_init: bad sizes n=%d dim=%d max_batch=%d max_order=%d",
               ds->n, ds->dim, max_batch, max_order);
  if ((ds->x == NULL) == (ds->pixels == NULL))
    check_fail("LOADER", __FILE__, __LINE__,
               "loader_init: the dataset must have either float features or pixels");
  memset(ld, 0, sizeof *ld);
  ld->n = ds->n;
  ld->dim = ds->dim;
  ld->max_batch = max_batch;
  ld->max_order = max_order;
  ld->mean = ds->mean;
  ld->std = ds->std;
  if (c->dev == DEVICE_CPU) {
    // The CPU's "device memory" is host memory: take the arrays over instead of copying them (fresh
    // pages cost 11-19 us per 4 KB to touch on these VMs).
    ld->x = ds->x;
    ld->pixels = ds->pixels;
    ld->y = ds->y;
    ds->x = NULL;
    ds->pixels = NULL;
    ds->y = NULL;
  } else {
    size_t elems = (size_t)ds->n * ds->dim;
    if (ds->pixels) {
      ld->pixels = dev_alloc(c, elems);
      dev_upload(c, ld->pixels, ds->pixels, elems);
    } else {
      ld->x = dev_alloc(c, elems * sizeof(float));
      dev_upload(c, ld->x, ds->x, elems * sizeof(float));
    }
    ld->y = dev_alloc(c, (size_t)ds->n * sizeof(int));
    dev_upload(c, ld->y, ds->y, (size_t)ds->n * sizeof(int));
  }
  ld->order = dev_alloc(c, (size_t)max_order * sizeof(int));
  ld->order_host = dev_host_alloc(c, (size_t)max_order * sizeof(int));
  ld->xb = dev_alloc(c, (size_t)max_batch * ds->dim * sizeof(float));
  ld->yb = dev_alloc(c, (size_t)max_batch * sizeof(int));
  // The uploads read the caller's dataset, which is not retained: wait so it may be freed at once.
  dev_sync(c);
}

// The host staging of the order, free to overwrite: the upload reads it asynchronously, so wait for
// the previous epoch's batches (and upload) first. Once per epoch, so the wait costs nothing measurable.
static int *order_staging(Loader *ld, const Ctx *c) {
  dev_sync(c);
  return ld->order_host;
}

// Uploads the first n_order entries of the staging as the order.
static void upload_order(Loader *ld, const Ctx *c, int n_order) {
  dev_upload(c, ld->order, ld->order_host, (size_t)n_order * sizeof(int));
  ld->n_order = n_order;
}

void loader_set_order(Loader *ld, const Ctx *c, const int *order, int n_order) {
  if (n_order < 0 || n_order > ld->max_order)
    check_fail("LOADER", __FILE__, __LINE__, "loader_set_order: %d indices, capacity is %d", n_order,
               ld->max_order);
  // A bad index would make the gather read outside the dataset on the device; catch sampler bugs
  // here, once per epoch, where the message can name the position.
  for (int i = 0; i < n_order; i++)
    if (order[i] < 0 || order[i] >= ld->n)
      check_fail("LOADER", __FILE__, __LINE__, "loader_set_order: order[%d] = %d is not in [0, %d)", i,
                 order[i], ld->n);
  memcpy(order_staging(ld, c), order, (size_t)n_order * sizeof(int));
  upload_order(ld, c, n_order);
}

void loader_set_stride_order(Loader *ld, const Ctx *c, int first, int stride) {
  if (first < 0 || stride < 1)
    check_fail("LOADER", __FILE__, __LINE__, "loader_set_stride_order: first %d, stride %d", first, stride);
  int n_order = first < ld->n ? (int)(((long long)ld->n - first + stride - 1) / stride) : 0;
  if (n_order > ld->max_order)
    check_fail("LOADER", __FILE__, __LINE__, "loader_set_stride_order: %d indices, capacity is %d", n_order,
               ld->max_order);
  int *order = order_staging(ld, c);
  for (int i = 0; i < n_order; i++) order[i] = first + i * stride;
  upload_order(ld, c, n_order);
}

void loader_batch(Loader *ld, const Ctx *c, int start, int B) {
  if (B <= 0 || B > ld->max_batch || start < 0 || start > ld->max_order - B)
    check_fail("LOADER", __FILE__, __LINE__,
               "loader_batch: batch [%d, %d) is outside the order (length %d) or larger than %d", start,
               start + B, ld->max_order, ld->max_batch);
  double t0 = log_clock();
  if (ld->pixels)
    ops_gather_pixels(c, ld->pixels, ld->y, ld->order + start, B, ld->dim, ld->mean, ld->std, ld->xb, ld->yb);
  else
    ops_gather(c, ld->x, ld->y, ld->order + start, B, ld->dim, ld->xb, ld->yb);
  ld->busy_s += log_clock() - t0;
}

void loader_free(Loader *ld, const Ctx *c) {
  dev_free(c, ld->yb);
  dev_free(c, ld->xb);
  dev_host_free(c, ld->order_host);
  dev_free(c, ld->order);
  dev_free(c, ld->y);
  dev_free(c, ld->pixels);
  dev_free(c, ld->x);
  memset(ld, 0, sizeof *ld);
}
