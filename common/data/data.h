/**
 * @file
 * @brief Datasets in host memory: Fashion-MNIST / MNIST from IDX files (`.gz` or plain) and a learnable
 * synthetic dataset (the analogue of `torchvision.datasets`).
 *
 * Images stay 8-bit pixels in memory, 1 byte per feature instead of 4; the loader turns the rows of
 * each batch into floats as it gathers them: scaled to [0, 1], then normalised with the dataset's
 * mean and standard deviation (Fashion-MNIST 0.2860 / 0.3530, MNIST 0.1307 / 0.3081). The synthetic
 * dataset is float features. Labels are ints in [0, n_classes).
 */
#ifndef DDP_DATA_H
#define DDP_DATA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef DATA_FASHION_MNIST_DIR
/** @brief Where Fashion-MNIST is read from without `--data_dir`: the folder of the Debian/Ubuntu
 *  package `dataset-fashion-mnist`. The one place this path is written: CMake reads it from here
 *  into its cache variable DDP_FASHION_MNIST_DIR, which can change it for a build. */
#define DATA_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"
#endif

/** @brief A dataset in host memory: its features are either `x` or `pixels` (the other is NULL). */
typedef struct Dataset {
  int n;            ///< number of samples
  int dim;          ///< features per sample (784 for 28x28 images)
  int rows;         ///< image height (IDX images; rows · cols = dim), 0 for synthetic data
  int cols;         ///< image width (IDX images), 0 for synthetic data
  int n_classes;    ///< number of classes (10)
  float *x;         ///< host, (n, dim): float features (synthetic data), or NULL
  uint8_t *pixels;  ///< host, (n, dim): 8-bit pixels (IDX images), or NULL
  float mean;       ///< with `pixels`: feature = (pixel / 255 - mean) / std
  float std;        ///< with `pixels`: see `mean`
  int *y;           ///< host, (n): labels
  uint32_t crc;     ///< CRC-32 of the features as read: an IDX image file's whole (inflated) content,
                    ///< header included, also the images `--dataset_size` leaves out; for synthetic
                    ///< data, the bytes of the generated floats `x`
} Dataset;

/** @brief Which data `--data` selects. */
typedef enum DataKind {
  DATA_FASHION_MNIST = 0,  ///< Fashion-MNIST IDX files
  DATA_MNIST = 1,          ///< MNIST IDX files (same format)
  DATA_SYNTHETIC = 2       ///< generated, learnable clusters
} DataKind;

/**
 * @brief Resolves a `--data` name.
 * @param[in] name "fashion-mnist", "mnist" or "synthetic".
 * @param[out] out the kind.
 * @return 0 on success, -1 for an unknown name.
 */
int data_parse(const char *name, DataKind *out);

/**
 * @brief Loads an IDX image file and its label file (each `.gz` or plain; gzip is detected from the
 * content) into @p ds: `pixels`, `mean` and `std` are set, `x` is NULL.
 *
 * Checks the magic numbers (2051 images, 2049 labels), the dimensions, that both files hold the same
 * number of items, that every label is < 10, and that each file is exactly as long as its header
 * says (truncated or longer: an error). Only regular files are read (a FIFO or a device is refused
 * without blocking). A gzip file may hold several members; libdeflate verifies each one's trailer
 * (CRC-32 and size), a header CRC is verified when present, and bytes after the last member are an
 * error. `crc` is set to the CRC-32 of the image file's (inflated) bytes: a gzip file of one member
 * gives it for free (its trailer's, which libdeflate verified), a plain file or one of several
 * members is hashed once, so a `.gz` file and its inflated copy have the same `crc`.
 * @param[out] ds        the dataset (freed by dataset_free()); untouched on error.
 * @param[in] images     path of the `*-images-idx3-ubyte[.gz]` file.
 * @param[in] labels     path of the `*-labels-idx1-ubyte[.gz]` file.
 * @param[in] limit      keep only the first @p limit samples (0: all).
 * @param[in] mean,std   normalisation constants.
 * @param[out] err       on error, a one-line message naming the file, what was expected and found.
 * @param[in] err_len    size of @p err.
 * @return 0 on success, -1 on error.
 */
int dataset_load_idx(Dataset *ds, const char *images, const char *labels, int limit, float mean, float std,
                     char *err, size_t err_len);

/**
 * @brief Generates a learnable synthetic dataset: @p n_classes cluster centres drawn from
 * `rng_init(seed, RNG_STREAM_DATA)`, each sample a centre plus unit Gaussian noise; the label is the
 * cluster. Train and test splits share the centres and differ in their samples (@p split 0 or 1).
 * `crc` is the CRC-32 of the generated floats' bytes (host order; little-endian on every supported
 * host): what was generated, so a generator that changed between two builds, or a libm that rounds
 * differently, gives other data and another `crc`.
 * @param[out] ds       the dataset.
 * @param[in] n         number of samples, > 0.
 * @param[in] dim       features per sample, > 0.
 * @param[in] n_classes number of classes, in [2, 1000].
 * @param[in] seed      seed.
 * @param[in] split     0 for train, 1 for test.
 */
void dataset_synthetic(Dataset *ds, int n, int dim, int n_classes, uint64_t seed, int split);

/**
 * @brief Loads the train and test splits that `--data` / `--data_dir` / `--dataset_size` describe, or
 * ends the job with a message that names the missing or bad file and how to get it. The test split
 * must have the training split's image size and classes (the model is built for those).
 * @param[in] kind         dataset kind.
 * @param[in] dir          directory of the IDX files (NULL: the default for @p kind).
 * @param[in] train_limit  train samples to keep (0: all; for synthetic data: the size, 0 → 10000).
 *                         The test split is never limited: the real test sets keep all 10000
 *                         samples and the synthetic one always has 2000.
 * @param[in] seed         seed for synthetic data.
 * @param[out] train,test  the splits.
 */
void dataset_load(DataKind kind, const char *dir, int train_limit, uint64_t seed, Dataset *train,
                  Dataset *test);

/**
 * @brief What identifies the data a run trains on: recorded in checkpoints and compared across ranks,
 * so that a resume on other data, or ranks that loaded different data, are refused.
 */
typedef struct DataId {
  uint32_t kind;        ///< DataKind
  uint32_t n_train;     ///< training samples (after `--dataset_size`)
  uint32_t n_test;      ///< test samples
  uint32_t dim;         ///< features per sample
  uint32_t n_classes;   ///< number of classes
  uint32_t labels_crc;  ///< CRC-32 of the train labels, then the test labels (one byte each)
  uint32_t
      pixels_crc;  ///< CRC-32 of the train split's `crc` then the test split's (u32 each, little-endian):
                   ///< the features; 0 in a checkpoint of format version 1 to 3 (not recorded)
} DataId;

/**
 * @brief The identity of a loaded train/test pair.
 * @param[in] kind  the data set's kind.
 * @param[in] train the training split.
 * @param[in] test  the test split.
 * @return its DataId.
 */
DataId dataset_id(DataKind kind, const Dataset *train, const Dataset *test);

/**
 * @brief Writes a DataId as one readable phrase, e.g.
 * `fashion-mnist: 60000 train / 10000 test samples of 784 features, 10 classes, labels crc 1a2b3c4d,
 * pixels crc 5e6f7a8b` (one line).
 * @param[out] buf the text.
 * @param[in] len  size of @p buf.
 * @param[in] id   the identity.
 */
void dataset_id_str(char *buf, size_t len, const DataId *id);

/** @brief Frees a dataset's memory (safe on a zeroed Dataset). */
void dataset_free(Dataset *ds);

#ifdef __cplusplus
}
#endif
#endif
