/**
 * @file
 * @brief PowerSGD (Vogels et al., NeurIPS 2019) as PyTorch's `powerSGD_hook` computes it
 * (torch/distributed/algorithms/ddp_comm_hooks/powerSGD_hook.py, with its defaults: error feedback
 * and warm start on, `min_compression_rate` 2, `orthogonalization_epsilon` 0, no batching of equal
 * shapes): a bucket's gradient matrices are sent as two thin factors instead of themselves.
 *
 * For iterations before `start_powerSGD_iter` a bucket is divided by W and all-reduced (PyTorch's
 * `_allreduce_fut`). From then on, for each bucket (M: a weight gradient, rows × cols; r = min(rows,
 * cols, rank)):
 * 1. error feedback: the bucket += this rank's error of the previous iteration; a copy is kept;
 * 2. the tensors not worth compressing (vectors, and matrices where (rows + cols)·r·2 >= rows·cols)
 *    are all-reduced as they are and divided by W;
 * 3. Q (cols × r; warm start: last iteration's, else Gaussian) is orthogonalised; P = M·Q;
 *    P is all-reduced (a sum) and orthogonalised; Q = Mᵀ·P; Q is all-reduced and divided by W;
 * 4. M = P·Qᵀ, and the error becomes the copy minus the bucket's new contents (for every tensor of
 *    the bucket, as PyTorch computes it).
 * Orthogonalisation is Gram–Schmidt (each column divided by its norm, then removed from the later
 * ones), PyTorch's own at a matrix_approximation_rank of 1 or 2; above 2 PyTorch uses a QR
 * factorisation (torch.linalg.qr), whose columns may differ from Gram–Schmidt's in sign (the
 * approximation P·Qᵀ, and so the update, is the same up to rounding). It runs on the host: P and Q are (rows
 * + cols)·r floats a matrix, copied to the host and back on a GPU. Every rank draws the same initial Q
 * (`rng_init(seed, RNG_STREAM_POWERSGD)`, Gaussian; PyTorch draws its own with torch.randn). The hook is
 * synchronous: its three all-reduces run one after the other when the bucket is ready (PyTorch chains them as
 * futures).
 *
 * The state is saved beside each checkpoint, one file per rank (each rank's error feedback is its
 * own): `powersgd.step<S>.rank<R>.bin` in the checkpoint's folder (powersgd_save(); comm_hook_save()
 * names it and orders it before the checkpoint), so that a resumed run continues exactly
 * (powersgd_load(), at the same world size).
 */
#ifndef DDP_POWERSGD_H
#define DDP_POWERSGD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dist.h"
#include "rng.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Most buckets, and most tensors in one bucket. */
#define POWERSGD_MAX 16

/** @brief PowerSGD's min_compression_rate: compress only when it saves more than this factor. */
#define POWERSGD_MIN_COMPRESSION_RATE 2

/** @brief One gradient tensor of a bucket, as a rows × cols row-major matrix. */
typedef struct PsgdTensor {
  size_t offset;  ///< its first float in the gradient buffer
  int rows;       ///< its matrix view: rows (out features; a vector: its length)
  int cols;       ///< ... and columns (in features; a vector: 1)
  int r;          ///< min(rows, cols, rank)
  bool compress;  ///< worth compressing (see above)
  size_t p;       ///< where its P (rows × r) starts in the bucket's P memory
  size_t q;       ///< where its Q (cols × r) starts in the bucket's Q memory
} PsgdTensor;

/** @brief One bucket: its tensors in memory order, and its P and Q memories. */
typedef struct PsgdBucket {
  int n;                       ///< tensors
  PsgdTensor t[POWERSGD_MAX];  ///< the tensors, by offset
  size_t offset;               ///< the bucket's first float in the gradient buffer
  size_t count;                ///< its floats
  size_t p_len;                ///< floats of all its Ps
  size_t q_len;                ///< floats of all its Qs
  float *p;                    ///< device, (p_len): its Ps, one after another
  float *q;                    ///< device, (q_len): its Qs
  bool warm;                   ///< q holds last iteration's Qs (warm start)
} PsgdBucket;

/** @brief PowerSGD's state (PyTorch's PowerSGDState). */
typedef struct PowerSgd {
  ProcessGroup *pg;            ///< who to reduce with
  int rank;                    ///< matrix_approximation_rank
  long long start_iter;        ///< start_powerSGD_iter
  long long iter;              ///< iterations done (PyTorch: state.iter)
  int n_buckets;               ///< buckets
  PsgdBucket b[POWERSGD_MAX];  ///< the buckets
  size_t n;                    ///< floats of the gradient buffer
  float *error;                ///< device, (n): this rank's error feedback, zero at first
  float *copy;                 ///< device, (n): the bucket before compression
  float *host;                 ///< host, (largest P or Q memory): orthogonalisation
  Rng rng;                     ///< the initial Qs
  long long bytes;  ///< bytes handed to collectives so far (comm_hook_run() adds a bucket's to its handle)
} PowerSgd;

/**
 * @brief Starts the state for a gradient buffer of @p n floats; the buckets come next.
 * @param[out] s         the state.
 * @param[in] pg         the process group (connected).
 * @param[in] n          floats of the gradient buffer.
 * @param[in] rank       matrix_approximation_rank, >= 1.
 * @param[in] start_iter start_powerSGD_iter.
 * @param[in] seed       the initial Qs' seed (the same on every rank).
 */
void powersgd_init(PowerSgd *s, ProcessGroup *pg, size_t n, int rank, long long start_iter, uint64_t seed);

/**
 * @brief Adds a tensor to bucket @p bucket (buckets numbered 0, 1, … in the order they are started;
 * tensors of a bucket in any order: they are kept by offset).
 * @param[in,out] s the state.
 * @param[in] bucket the bucket.
 * @param[in] offset its first float in the gradient buffer.
 * @param[in] rows,cols its matrix view (a bias: rows = its length, cols = 1).
 */
void powersgd_add_tensor(PowerSgd *s, int bucket, size_t offset, int rows, int cols);

/** @brief After the last powersgd_add_tensor(): lays out and allocates the P and Q memories. */
void powersgd_layout(PowerSgd *s);

/**
 * @brief The hook on bucket @p bucket of @p grads (see above); afterwards the bucket holds PowerSGD's
 * estimate of the ranks' mean gradient. Synchronous.
 * @param[in,out] s      the state.
 * @param[in] bucket     the bucket.
 * @param[in,out] grads  device, (n): the gradient buffer.
 */
void powersgd_hook(PowerSgd *s, int bucket, float *grads);

/**
 * @brief Sets bucket @p bucket's Q memory (a test's: the same initial Q as PyTorch's) and marks it
 * warm, as if a previous iteration had left it.
 * @param[in,out] s the state (after powersgd_layout()).
 * @param[in] bucket the bucket.
 * @param[in] q host, (q_len).
 */
void powersgd_set_q(PowerSgd *s, int bucket, const float *q);

/**
 * @brief Writes this rank's state to @p path: `DDPPSGD` + NUL, u32 version 2, u32 world size, u64
 * iteration, u64 n,
 * u32 buckets, per bucket u64 Q floats and u32 warm, then f32 error[n], each bucket's Q, and a CRC-32
 * of all that (little-endian). Written to `PATH.tmp`, synced, renamed, and the folder synced, so a
 * crash never leaves half a file and the file is on disk when this returns; the folder is created if
 * missing. Ends the job when it cannot be written.
 * @param[in] s    the state.
 * @param[in] path the file.
 */
void powersgd_save(const PowerSgd *s, const char *path);

/**
 * @brief Reads this rank's state back from @p path; ends the job, saying what does not match, when
 * the file is missing, damaged, of another layout (another model, bucket cap or rank), saved at
 * another world size than this run's, or at another iteration than @p step (the checkpoint's: a file
 * copied or renamed).
 * @param[in,out] s the state (after powersgd_layout()).
 * @param[in] path  the file.
 * @param[in] step  the checkpoint's optimizer step, which the state's iteration count must equal.
 */
void powersgd_load(PowerSgd *s, const char *path, long long step);

/** @brief Releases the state. */
void powersgd_free(PowerSgd *s);

#ifdef __cplusplus
}
#endif
#endif
