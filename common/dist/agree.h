/**
 * @file
 * @brief Ranks must agree: every rank's training settings, model, data and program are compared
 * across the process group before training, and any difference ends every rank with one message.
 *
 * Data parallelism is only correct when every replica runs the same program on the same model with
 * the same settings and differs only in its shard of the data. A rank started with another `--lr`
 * still all-reduces its gradients with the others, and the replicas then part without a word; one
 * started with another bucket cap or model shape feeds collectives of different sizes, which crash
 * or hang. PyTorch's DistributedDataParallel guards the same way when it wraps the model: it
 * compares the parameter shapes of all processes and refuses to go on if any differs.
 *
 * Use: agree_init(), then agree_args() with the flags' settings (args_settings()) and agree_add() for
 * each other setting, then agree_check(), which
 * all-gathers every rank's list (a few KiB) and compares them.
 */
#ifndef DDP_AGREE_H
#define DDP_AGREE_H

#include "data.h"
#include "device.h"
#include "dist.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @brief Most settings one Agreement holds. */
#define AGREE_MAX 32
/** @brief Longest setting name, with its NUL. */
#define AGREE_NAME 32
/** @brief Longest value text, with its NUL (a longer value keeps its start and a hash of the rest). */
#define AGREE_VALUE 160

/** @brief The settings this rank will compare, as name and value text. */
typedef struct Agreement {
  int n;                               ///< settings added
  char name[AGREE_MAX][AGREE_NAME];    ///< e.g. "--lr"
  char value[AGREE_MAX][AGREE_VALUE];  ///< e.g. "0.0500000007"
} Agreement;

/**
 * @brief Starts an empty list holding one setting, "program": the running executable's file name and
 * a CRC-32 of its bytes, so that ranks running different builds or different steps are refused.
 * @param[out] a the list.
 */
void agree_init(Agreement *a);

/**
 * @brief Adds one setting; its value is formatted like printf.
 * @param[in,out] a   the list (at most AGREE_MAX settings: more end the job, a programming error).
 * @param[in] name    the name the mismatch message shows (a flag such as "--lr", or a phrase).
 * @param[in] fmt     printf format of the value.
 */
void agree_add(Agreement *a, const char *name, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/**
 * @brief Adds every flag that changes what is trained, one setting per line of @p settings,
 * `NAME<TAB>VALUE` (args_settings(), which says which flags and why); flags that only say where
 * output goes may differ, and `--hidden` and `--data_dir` are compared through what they produce
 * (agree_model(), agree_data()).
 * @param[in,out] a       the list.
 * @param[in] settings    this rank's settings, as args_settings() writes them.
 */
void agree_args(Agreement *a, const char *settings);

/**
 * @brief Adds the model's shape, e.g. "784-1024-1024-10".
 * @param[in,out] a     the list.
 * @param[in] sizes     layer sizes I, H..., O: (n_layers + 1).
 * @param[in] n_layers  number of layers.
 */
void agree_model(Agreement *a, const int *sizes, int n_layers);

/**
 * @brief Adds the identity of the loaded data (dataset_id_str()).
 * @param[in,out] a  the list.
 * @param[in] id     what dataset_id() returned.
 */
void agree_data(Agreement *a, const DataId *id);

/**
 * @brief Compares every rank's list with rank 0's. A collective: every rank of @p pg must call it.
 * When any setting differs, every rank ends with one message naming the first such setting and which
 * ranks have which value, e.g. `the ranks disagree on --lr (rank 0: 0.05; rank 1: 0.1)`.
 * @param[in] a    this rank's list.
 * @param[in] pg   the connected process group.
 * @param[in] c    the device context of @p pg (the all-gather goes through its memory).
 */
void agree_check(const Agreement *a, ProcessGroup *pg, const Ctx *c);

/**
 * @brief The message agree_check() would print for a gathered table, or an empty string when every
 * rank agrees (what agree_check() decides, without the process group; for tests).
 * @param[out] msg       the message.
 * @param[in] len        size of @p msg.
 * @param[in] all        the lists of ranks 0 .. world_size-1.
 * @param[in] world_size number of lists.
 * @return 0 when all agree, 1 otherwise.
 */
int agree_compare(char *msg, size_t len, const Agreement *all, int world_size);

#ifdef __cplusplus
}
#endif
#endif
