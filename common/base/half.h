/**
 * @file
 * @brief The two 16-bit floats of mixed-precision training, on the host: IEEE half (`torch.float16`:
 * 5 exponent bits, 10 mantissa bits, largest 65504) and bfloat16 (`torch.bfloat16`: float32's 8
 * exponent bits, 7 mantissa bits). Conversions from float32 round to nearest, ties to even, as
 * PyTorch's and CUDA's (`__float2half_rn`, `__float2bfloat16_rn`) do; a NaN stays a (quiet) NaN.
 *
 * Sums: half_add() and bf16_add() add in float32 and round once to the narrow type. That is the
 * correctly rounded narrow sum (float32 has more than twice their precision plus two bits, so the
 * double rounding is harmless), i.e. exactly what an all-reduce that adds in the narrow type computes
 * for each pair: what a backend without the narrow types (MPI) does to sum them.
 */
#ifndef DDP_HALF_H
#define DDP_HALF_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** @brief float32 to IEEE half, round to nearest even (overflow: infinity). */
uint16_t half_from_float(float f);
/** @brief IEEE half to float32 (exact). */
float half_to_float(uint16_t h);
/** @brief float32 to bfloat16, round to nearest even. */
uint16_t bf16_from_float(float f);
/** @brief bfloat16 to float32 (exact). */
float bf16_to_float(uint16_t h);
/** @brief The half sum a + b, correctly rounded (see above). */
uint16_t half_add(uint16_t a, uint16_t b);
/** @brief The bfloat16 sum a + b, correctly rounded (see above). */
uint16_t bf16_add(uint16_t a, uint16_t b);

#ifdef __cplusplus
}
#endif
#endif
