// gpu_count: prints how many CUDA GPUs this process can use, as the trainer will count them
// (cudaGetDeviceCount: it honours CUDA_VISIBLE_DEVICES and MIG, unlike `nvidia-smi -L`); 0 without a
// GPU, a driver, or a CUDA build. scripts/run.sh starts one rank per GPU it prints.
#include <stdio.h>

#include "device.h"  // device.h: device_cuda_count

int main(void) {
  printf("%d\n", device_cuda_count());
  return 0;
}
