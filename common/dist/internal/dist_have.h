/**
 * @file
 * @brief Which backends this build has, for dist.c and dist_launch.c: CMake defines HAVE_MPI=1,
 * HAVE_NCCL=1, HAVE_GLOO=1 in a build with that backend; here the others are 0. The backends'
 * operations go through their tables (dist_backend_ops()); only the MPI launcher's own calls need
 * WITH_MPI. The includer includes check.h (die()).
 */
#ifndef DDP_DIST_HAVE_H
#define DDP_DIST_HAVE_H

#if HAVE_MPI
/** @brief A call of the MPI launcher (MPI_Init, the abort hook, MPI_Finalize: under mpirun whatever
 *  the backend), compiled only in a build with MPI. */
#define WITH_MPI(call) call
#else
/** @brief 0: this build has no MPI. */
#define HAVE_MPI 0
/** @brief In a build without MPI, the end of the job instead of the MPI launcher's @p call: never
 *  reached, since discover() (dist_launch.c) refuses mpirun in a build without MPI. */
#define WITH_MPI(call) die(1, "this program was built without MPI")
#endif
#ifndef HAVE_NCCL
/** @brief 0: this build has no NCCL. */
#define HAVE_NCCL 0
#endif
#ifndef HAVE_GLOO
/** @brief 0: this build has no Gloo. */
#define HAVE_GLOO 0
#endif

#endif
