/**
 * @file
 * @brief The GEMM work a process has done, in floating-point operations, and the device's peak rate:
 * what the progress line's GFLOP/s and MFU (model FLOPs utilisation) are computed from.
 *
 * The MLP counts its GEMMs' FLOPs as it queues them (flops_count(), like PyTorch's
 * `FlopCounterMode`): a Linear layer of `in` inputs and `out` outputs on B rows costs 2·B·in·out in
 * forward and twice that in backward (the weight gradient and the input gradient), so an optimizer
 * step of B samples per rank counts 6·B·Σ in·out, the usual convention (the first layer's input
 * gradient is not computed, but counted: the figures compare with those of other tools). Bias, ReLU,
 * softmax and the optimizer are not counted; they are O(B·Σ out), not O(B·Σ in·out).
 *
 * The peak is the device's dense (no sparsity) fp32 rate, or the TF32 tensor-core rate once the
 * context's GEMMs use TF32, from a table of NVIDIA data-centre GPUs (figures from NVIDIA's data
 * sheets) looked up by the GPU's name; on the CPU it is read from the environment variable
 * `DDP_CPU_PEAK_GFLOPS` (for instance the single-core bound `bench/gemm_bound` measures), and unknown
 * when that is not set. With no known peak there is no MFU.
 */
#ifndef DDP_FLOPS_H
#define DDP_FLOPS_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * @brief FLOPs of a Linear layer's GEMMs on @p rows rows: 2·rows·in·out (forward); backward costs
 * twice as much.
 * @param[in] rows batch rows.
 * @param[in] in   inputs of the layer.
 * @param[in] out  outputs of the layer.
 * @return the forward FLOPs.
 */
double flops_linear(long long rows, int in, int out);

/**
 * @brief GEMM FLOPs of one optimizer step of an MLP: 6·@p batch·Σ_l sizes[l]·sizes[l+1].
 * @param[in] sizes    host, (n_layers + 1): layer widths, input first.
 * @param[in] n_layers number of Linear layers.
 * @param[in] batch    samples of the step on this rank.
 * @return forward plus backward FLOPs.
 */
double flops_mlp_step(const int *sizes, int n_layers, long long batch);

/** @brief Adds @p n FLOPs to this process's count (the MLP calls it for each GEMM it queues). */
void flops_count(double n);

/** @brief This process's FLOPs counted so far. */
double flops_total(void);

/**
 * @brief Dense peak of a known GPU, in FLOP/s: looked up by a substring of @p name ("H100 SXM",
 * "A100", …; the first entry of the table whose key @p name contains).
 * @param[in] name the GPU's name, as `cudaGetDeviceProperties` gives it (e.g. "NVIDIA H100 80GB HBM3").
 * @param[in] tf32 the TF32 tensor-core rate instead of plain fp32.
 * @return the peak in FLOP/s, or 0 when the GPU is not in the table.
 */
double flops_gpu_peak(const char *name, bool tf32);

/**
 * @brief Sets the peak the MFU is computed against: @p name "cpu" reads `DDP_CPU_PEAK_GFLOPS` (GFLOP/s;
 * unset, empty or not a positive number: unknown), any other name is looked up with flops_gpu_peak().
 * device_init() calls it.
 * @param[in] name "cpu" or the GPU's name.
 * @param[in] tf32 whether the GEMMs use TF32 (GPUs only).
 */
void flops_set_device(const char *name, bool tf32);

/**
 * @brief Switches the peak of the device last set between fp32 and TF32 (device_set_tf32() calls it;
 * on the CPU nothing changes).
 * @param[in] tf32 whether the GEMMs use TF32.
 */
void flops_set_tf32(bool tf32);

/** @brief The peak set by flops_set_device(), in FLOP/s; 0 when unknown (then there is no MFU). */
double flops_peak(void);

#ifdef __cplusplus
}
#endif
#endif
