/* A stand-in for an older NCCL's nccl.h (2.<SHIM_NCCL_MINOR>.0, -DSHIM_NCCL_MINOR=13 by default), for
 * the compile test nccl_old_headers (tests/CMakeLists.txt): the declarations common/dist/dist_nccl.c uses,
 * as those versions had them. Copied in shape from NCCL's own headers of the time: before 2.24,
 * ncclBfloat16 exists only where cuda_bf16.h defines __CUDA_BF16_TYPES_EXIST__ (C++, not C); from
 * 2.24 always. ncclInProgress came with 2.14 (non-blocking communicators), ncclGetLastError with
 * 2.13, ncclAvg with 2.10. Nothing links against it: the test only compiles. */
#ifndef NCCL_H_
#define NCCL_H_

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif

#ifndef SHIM_NCCL_MINOR
#define SHIM_NCCL_MINOR 13
#endif
#define NCCL_MAJOR 2
#define NCCL_MINOR SHIM_NCCL_MINOR
#define NCCL_PATCH 0
#define NCCL_SUFFIX ""
#define NCCL_VERSION_CODE (20000 + SHIM_NCCL_MINOR * 100)
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ncclComm *ncclComm_t;
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
#if SHIM_NCCL_MINOR >= 14
  ncclInProgress = 7,
  ncclNumResults = 8
#else
  ncclNumResults = 7
#endif
} ncclResult_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
#if SHIM_NCCL_MINOR >= 24 || defined(__CUDA_BF16_TYPES_EXIST__)
  ncclBfloat16 = 9,
  ncclNumTypes = 10
#else
  ncclNumTypes = 9
#endif
} ncclDataType_t;

typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff
} ncclRedOp_t;

ncclResult_t ncclGetVersion(int *version);
ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
const char *ncclGetErrorString(ncclResult_t result);
#if SHIM_NCCL_MINOR >= 13
const char *ncclGetLastError(ncclComm_t comm);
#endif
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

#if SHIM_NCCL_MINOR >= 14 /* non-blocking communicators, their configuration, and finalize came with 2.14 */
#include <limits.h>
#include <stddef.h>
typedef struct ncclConfig_v21400 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
} ncclConfig_t;
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_INITIALIZER                                                         \
  {                                                                                     \
    sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), \
        NCCL_CONFIG_UNDEF_INT                                                           \
  }
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
#endif

#ifdef __cplusplus
}
#endif
#endif
