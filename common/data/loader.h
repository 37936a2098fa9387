/**
 * @file
 * @brief Batch gathering: the dataset copied once to the device, and batches gathered from it by
 * index (the analogue of a `DataLoader` that is given its sample order).
 *
 * The trainer decides the order (a permutation, or a rank's shard of one) and hands it over once per
 * epoch with loader_set_order(), or has the loader build a strided one (loader_set_stride_order():
 * the whole set in order, or every W-th sample); loader_batch() then gathers rows on the device, with
 * no host work and no allocation.
 */
#ifndef DDP_LOADER_H
#define DDP_LOADER_H

#include "data.h"
#include "device.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief The device-side copy of a dataset and its batch buffers. */
typedef struct Loader {
  int n;            ///< samples in the dataset
  int dim;          ///< features per sample
  int max_batch;    ///< capacity of the batch buffers
  int max_order;    ///< capacity of @ref order
  int n_order;      ///< length of the current order (0 before the first loader_set_order())
  float *x;         ///< device, (n, dim): all features, when the dataset has float features
  uint8_t *pixels;  ///< device, (n, dim): all pixels, when the dataset has 8-bit pixels
  float mean;       ///< with `pixels`: normalisation constants (see @ref Dataset)
  float std;        ///< with `pixels`: see `mean`
  int *y;           ///< device, (n): all labels
  int *order;       ///< device, (max_order): the sample order set by loader_set_order()
  int *order_host;  ///< host staging for @ref order (pinned on CUDA)
  float *xb;        ///< device, (max_batch, dim): the current batch's features
  int *yb;          ///< device, (max_batch): the current batch's labels
  double busy_s;    ///< seconds spent in loader_batch() so far: the data time of `--straggler`
} Loader;

/**
 * @brief Puts @p ds on the device and allocates the batch buffers. On CUDA the samples are copied and
 * @p ds keeps its arrays; on the CPU the loader takes the arrays over (no copy), leaving `ds->x` (or
 * `ds->pixels`) and `ds->y` NULL. Either way the caller may dataset_free() @p ds at once. Pixels stay
 * 8-bit on the device and become normalised floats in loader_batch().
 * @param[out] ld        the loader.
 * @param[in] c          context.
 * @param[in,out] ds     host dataset.
 * @param[in] max_batch  largest batch loader_batch() will be asked for.
 * @param[in] max_order  longest order loader_set_order() will be given (e.g. the padded shard size).
 */
void loader_init(Loader *ld, const Ctx *c, Dataset *ds, int max_batch, int max_order);

/**
 * @brief Sets the sample order for the next batches (one upload per epoch).
 * @param[in,out] ld  the loader.
 * @param[in] c       context.
 * @param[in] order   host, (n_order): indices into the dataset.
 * @param[in] n_order length, <= max_order.
 */
void loader_set_order(Loader *ld, const Ctx *c, const int *order, int n_order);

/**
 * @brief Sets the order to the samples @p first, @p first + @p stride, @p first + 2 @p stride, … below
 * @ref Loader.n, with no padding and no wrap-around, so each sample is visited at most once. (0, 1) is the
 * whole dataset in order; (rank, world size) is a rank's shard, and the W shards together visit every
 * sample exactly once. Like loader_set_order(), one upload.
 * @param[in,out] ld  the loader; its max_order must hold the order (e.g. max_order = n).
 * @param[in] c       context.
 * @param[in] first   first sample, >= 0 (none when >= n).
 * @param[in] stride  distance between consecutive samples, >= 1.
 */
void loader_set_stride_order(Loader *ld, const Ctx *c, int first, int stride);

/**
 * @brief Gathers samples `order[start .. start+B)` into @ref Loader.xb and @ref Loader.yb.
 * @param[in,out] ld the loader.
 * @param[in] c      context.
 * @param[in] start  first position in the order.
 * @param[in] B      batch size, <= max_batch.
 */
void loader_batch(Loader *ld, const Ctx *c, int start, int B);

/** @brief Frees the loader's device and host memory. */
void loader_free(Loader *ld, const Ctx *c);

#ifdef __cplusplus
}
#endif
#endif
