// A stand-in for libnccl.so with the device functions' names of an NCCL built with a subset of them
// (as NCCL's ONLY_FUNCS builds one): every collective the code calls, except Reduce unless
// WITH_REDUCE is defined, and the 16-bit all-reduces unless WITHOUT_16BIT is. scripts/gpu/nccl_caps.py
// must say which ones are missing (tests/CMakeLists.txt).
#define DEV(name)                          \
  void ncclDevFunc_##name##_RING_LL(void); \
  void ncclDevFunc_##name##_RING_LL(void) {}

DEV(AllReduce_Sum_f32)
DEV(AllReduce_Sum_f64)
DEV(AllReduce_Sum_u32)
DEV(AllReduce_PreMulSum_f32)
DEV(AllReduce_PreMulSum_f64)
DEV(AllReduce_SumPostDiv_u32)
#ifndef WITHOUT_16BIT
DEV(AllReduce_Sum_f16)
DEV(AllReduce_Sum_bf16)
#endif
DEV(ReduceScatter_Sum_f32)
DEV(ReduceScatter_Sum_f64)
DEV(ReduceScatter_Sum_u32)
DEV(ReduceScatter_PreMulSum_f32)
DEV(ReduceScatter_PreMulSum_f64)
DEV(ReduceScatter_SumPostDiv_u32)
#ifdef WITH_REDUCE
DEV(Reduce_Sum_f32)
DEV(Reduce_Sum_f64)
DEV(Reduce_Sum_u32)
DEV(Reduce_PreMulSum_f32)
DEV(Reduce_PreMulSum_f64)
DEV(Reduce_SumPostDiv_u32)
#endif
DEV(Broadcast)
DEV(AllGather)
