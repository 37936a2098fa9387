// blas.h: the OpenBLAS calls common/ makes (the GEMM and the start-up line's questions), under their
// usual names whichever OpenBLAS the build links (CMake's DDP_BLAS): the system's, or scipy-openblas32
// from PyPI, whose symbols all carry the prefix scipy_ (BLAS_SCIPY_PREFIX). Included only where
// HAVE_OPENBLAS is defined.
#ifndef BLAS_H
#define BLAS_H

#include <cblas.h>

#ifdef BLAS_SCIPY_PREFIX
#define cblas_sgemm scipy_cblas_sgemm
#define openblas_get_config scipy_openblas_get_config
#define openblas_get_corename scipy_openblas_get_corename
#define openblas_get_num_threads scipy_openblas_get_num_threads
#endif

#endif  // BLAS_H
